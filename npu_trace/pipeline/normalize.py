"""Normalization: raw trace records into the event model's `NpuEvent`s (`npu_trace.events`), by rules as data.

`Normalizer(mapping)` holds a profile's rules and the call pairing's state, for the one production path
(`npu_trace.pipeline.vnormalize.BlockNormalizer`: a block at a time); it shapes one record by its rule
(`shape`, `planned_shape`) and keeps the call entries waiting for their return (`pairing`: `CallPairing`).
The tests keep a per-event reference normalizer beside it (tests/reference/normalize.py).

The mapping is data (a profile's `mapping`): event "system:name" -> a rule dict, or a list of rule dicts tried
in order (the first whose `match` holds wins). Rule keys:

    kind      the NpuEvent kind (required)
    op        the operation name (default: the event's name)
    op_field  take op from this field instead, renamed through `op_names` (keys are str(value))
    dev       field path of the device id (default "dev"; "" = no device). A path "a.b" reads member b of
              the struct field a.
    args      {arg name: field path}; absent: every field except the device field and "__*" probe fields
    set       constant args to add ({"edge": "entry"})
    kind_if   [[field, "==" | "!=" | "<" | ">", value, kind], ...]: the first that holds changes the kind (value
              an integer; a condition holds only when the field is one: never on a string, array or struct
              field, as a damaged or unusual format may give)
    match     {field: value}: the rule applies only when every field equals its value
    pair      "entry" | "return": call pairing (below)

Call pairing is done here, once: an "entry" event is remembered per (pid, op) (a stack, for nesting); its
"return" takes the entry's device and args, plus `ret` fields, `latency_ns` and `entry_ts_ns`. Return probes
carry no device, so this is where they get one. A return without an entry keeps dev None and has no latency.
Pending entries are bounded (`MAX_PENDING` in all, `MAX_DEPTH` per (pid, op)); evicted ones (the oldest
pushed first, deterministic for a given input) are counted in `stats["unpaired_entries"]`, returns without
an entry in `stats["unpaired_returns"]`.

Events without a rule become kind "log" (op = "system:name", args = their fields): nothing is dropped
silently; detectors ignore "log". `Loss` items become kind "lost" (op = the loss kind, args source/lost);
`ftrace:print` (trace_marker writes) becomes kind "marker" with args {"text": ...} unless a profile maps it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from npu_trace.errors import UsageError
from npu_trace.events import KINDS, Loss, NpuEvent, TraceEvent
from npu_trace.ftrace.format import EventFormat

MAX_PENDING = 100_000  # call entries waiting for their return, all (pid, op) together
MAX_DEPTH = 64  # nested entries of one (pid, op)

COMMON_MAPPING: Dict[str, Any] = {
    "ftrace:print": {"kind": "marker", "op": "marker", "dev": "", "args": {"text": "buf"}},
    # a task started (fired in its parent): the thread -> process map grows (npu_trace.detectors.processes)
    "task:task_newtask": {"kind": "task", "op": "newtask", "dev": "",
                          "args": {"tid": "pid", "comm": "comm", "flags": "clone_flags"}},
}


_CMP = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


@dataclass(frozen=True)
class Rule:
    """One compiled mapping rule (see the module docstring for the keys)."""

    kind: str
    op: str = ""
    op_field: str = ""
    op_names: Tuple[Tuple[str, str], ...] = ()
    dev: str = "dev"
    args: Tuple[Tuple[str, str], ...] = ()
    set: Tuple[Tuple[str, Any], ...] = ()
    kind_if: Tuple[Tuple[str, str, Any, str], ...] = ()
    match: Tuple[Tuple[str, Any], ...] = ()
    pair: str = ""


def compile_rule(spec: Mapping[str, Any]) -> Rule:
    """A rule dict from a profile -> Rule; unknown keys or kinds are a UsageError."""
    unknown = set(spec) - set(Rule.__dataclass_fields__)
    if unknown or spec.get("kind") not in KINDS:
        raise UsageError(f"bad mapping rule {dict(spec)!r}: unknown keys {sorted(unknown)} or kind")
    for cond in spec.get("kind_if", ()):
        if len(cond) != 4 or cond[1] not in _CMP or cond[3] not in KINDS or not is_int(cond[2]):
            raise UsageError(f"bad kind_if condition {cond!r}")
    if spec.get("pair", "") not in ("", "entry", "return"):
        raise UsageError(f"bad pair {spec['pair']!r} (entry or return)")
    return Rule(
        kind=spec["kind"],
        op=spec.get("op", ""),
        op_field=spec.get("op_field", ""),
        op_names=tuple(sorted(spec.get("op_names", {}).items())),
        dev=spec.get("dev", "dev"),
        args=tuple(spec.get("args", {}).items()),
        set=tuple(spec.get("set", {}).items()),
        kind_if=tuple((c[0], c[1], c[2], c[3]) for c in spec.get("kind_if", ())),
        match=tuple(spec.get("match", {}).items()),
        pair=spec.get("pair", ""),
    )


def compile_mapping(mapping: Mapping[str, Any]) -> Dict[str, Tuple[Rule, ...]]:
    """A profile mapping (with COMMON_MAPPING under it) -> event name -> rules in order."""
    merged = {**COMMON_MAPPING, **mapping}
    out: Dict[str, Tuple[Rule, ...]] = {}
    for name, spec in merged.items():
        specs = spec if isinstance(spec, (list, tuple)) else [spec]
        out[name] = tuple(compile_rule(s) for s in specs)
    return out


def field_value(fields: Mapping[str, Any], path: str) -> Any:
    """fields[path], or for "a.b" the member b of the struct field a (None when absent)."""
    if path in fields:
        return fields[path]
    head, _, rest = path.partition(".")
    inner = fields.get(head)
    if rest and isinstance(inner, Mapping):
        return field_value(inner, rest)
    return None


def rule_matches(rule: Rule, fields: Mapping[str, Any]) -> bool:
    return not rule.match or all(field_value(fields, f) == v for f, v in rule.match)


def rule_kind(rule: Rule, fields: Mapping[str, Any]) -> str:
    if not rule.kind_if:
        return rule.kind
    for name, cmp, value, kind in rule.kind_if:
        got = field_value(fields, name)
        if is_int(got) and _CMP[cmp](got, value):
            return kind
    return rule.kind


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rule_op(rule: Rule, fields: Mapping[str, Any], default: str) -> str:
    if not rule.op_field:
        return rule.op or default
    value = field_value(fields, rule.op_field)
    return dict(rule.op_names).get(str(value), f"{rule.op_field}={value}")


def rule_args(rule: Rule, fields: Mapping[str, Any]) -> Dict[str, Any]:
    if rule.args:
        out = {name: field_value(fields, path) for name, path in rule.args}
    else:
        out = {k: v for k, v in fields.items() if not k.startswith("__") and k != rule.dev}
    out.update(rule.set)
    return out


def rule_dev(rule: Rule, fields: Mapping[str, Any]) -> Optional[int]:
    value = field_value(fields, rule.dev) if rule.dev else None
    return int(value) if isinstance(value, int) else None


# (kind, op, index of the device field or -1, ((arg name, field index), ...), constant args, pair,
#  kind_if as ((field index, comparison, value, kind), ...))
_KindIf = Tuple[Tuple[int, Any, Any, str], ...]
_Plan = Tuple[str, str, int, Tuple[Tuple[str, int], ...], Tuple[Tuple[str, Any], ...], str, _KindIf]
_new = tuple.__new__


def positional_plan(names: Sequence[str], event_name: str, rules: Sequence[Rule]) -> Optional[_Plan]:
    """A positional plan for a format with one rule that names plain fields and needs no match or op_field:
    the same NpuEvent as the general path, without building a fields dict."""
    if len(rules) != 1:
        return None
    rule = rules[0]
    if rule.match or rule.op_field or rule.kind == "marker":
        return None
    index = {n: i for i, n in enumerate(names)}
    if "." in rule.dev and rule.dev not in index:
        return None  # a struct member: the general path reads it
    if any(name not in index for name, _, _, _ in rule.kind_if):
        return None
    kind_if = tuple((index[name], _CMP[cmp], value, kind) for name, cmp, value, kind in rule.kind_if)
    if rule.args:
        if any(path not in index for _, path in rule.args):
            return None
        arg_at = tuple((name, index[path]) for name, path in rule.args)
    else:
        arg_at = tuple((n, i) for i, n in enumerate(names) if not n.startswith("__") and n != rule.dev)
    dev_at = index.get(rule.dev, -1) if rule.dev else -1  # absent (return probes): no device, as _dev says
    return (rule.kind, rule.op or event_name, dev_at, arg_at, rule.set, rule.pair, kind_if)


Item = Union[TraceEvent, Loss, NpuEvent]
Key = Tuple[int, str]  # (pid, op)
Entry = Tuple[int, Optional[int], Any]  # (entry ts, dev, its args: a dict, or where they are while a block holds them)


class CallPairing:
    """The call entries waiting for their return, per (pid, op) a stack (nested calls), bounded: `push` an
    entry, `take` the latest of a key for its return. The stacks are kept in the order their keys were first
    pushed (since their last emptying): the oldest key's oldest entry is the one evicted at the bound."""

    def __init__(self) -> None:
        self._stacks: OrderedDict[Key, List[Entry]] = OrderedDict()  # its oldest key found in O(1) at the bound
        self.count = 0  # entries pending, all keys together
        self.stats: Dict[str, int] = {"unpaired_entries": 0, "unpaired_returns": 0}

    def push(self, key: Key, entry: Entry) -> None:
        """An entry waits for its return (evicting the oldest at a bound)."""
        stack = self._stacks.setdefault(key, [])
        if len(stack) >= MAX_DEPTH or self.count >= MAX_PENDING:
            self._evict(key if len(stack) >= MAX_DEPTH else next(iter(self._stacks)))
            stack = self._stacks.setdefault(key, [])
        stack.append(entry)
        self.count += 1

    def _evict(self, key: Key) -> None:
        stack = self._stacks[key]
        stack.pop(0)
        self.count -= 1
        self.stats["unpaired_entries"] += 1
        if not stack:
            del self._stacks[key]

    def take(self, key: Key) -> Optional[Entry]:
        """The latest pending entry of `key`, removed (None, counted as an unpaired return, when there is none)."""
        stack = self._stacks.get(key)
        if not stack:
            self.stats["unpaired_returns"] += 1
            return None
        entry = stack.pop()
        self.count -= 1
        if not stack:
            del self._stacks[key]
        return entry

    def depth(self, key: Key) -> int:
        """How many entries of `key` are pending."""
        return len(self._stacks.get(key, ()))

    def settle(self, key: Key, entry: Optional[Entry]) -> None:
        """After a run of calls of `key` paired elsewhere (a block's, at once): its stack as they left it, empty
        or holding `entry` alone (placed after every other key, as a fresh push would be)."""
        self.count -= len(self._stacks.pop(key, ()))
        if entry is not None:
            self._stacks[key] = [entry]
            self.count += 1

    def resolve(self, key: Key, args_of: Callable[[Any], Any]) -> None:
        """Replace the args of `key`'s pending entries by `args_of(args)` (a block's references made dicts)."""
        stack = self._stacks.get(key, [])
        for k, (ts, dev, args) in enumerate(stack):
            stack[k] = (ts, dev, args_of(args))

    def pending_entries(self) -> List[Tuple[int, str, int, Optional[int], Dict[str, Any]]]:
        """The call entries still waiting for their return (calls in flight): (pid, op, entry ts, device, args),
        oldest first."""
        out = [(pid, op, ts, dev, dict(args)) for (pid, op), stack in self._stacks.items() for ts, dev, args in stack]
        return sorted(out, key=lambda e: (e[2], e[0], e[1]))


FormatInfo = Tuple[str, Tuple[Rule, ...], Optional[_Plan]]


class Normalizer:
    """A profile's rules (`rules`), one record shaped by them (`shape`), and the call pairing's state
    (`pairing`), for the block normalizer (see the module docstring)."""

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        self.rules = compile_mapping(mapping)
        self.pairing = CallPairing()
        self._formats: Dict[int, Tuple[EventFormat, FormatInfo]] = {}

    @property
    def stats(self) -> Dict[str, int]:
        return self.pairing.stats

    def pending_entries(self) -> List[Tuple[int, str, int, Optional[int], Dict[str, Any]]]:
        return self.pairing.pending_entries()

    def format_info(self, fmt: EventFormat) -> FormatInfo:
        """(its "system:name", its rules, its positional plan or None) for a format (cached)."""
        cached = self._formats.get(id(fmt))
        if cached is None or cached[0] is not fmt:
            name = fmt.full_name
            rules = self.rules.get(name, ())
            cached = self._formats[id(fmt)] = (fmt, (name, rules, positional_plan(fmt.field_names, fmt.name, rules)))
        return cached[1]

    def shape(self, ev: TraceEvent) -> Tuple[NpuEvent, str]:
        """The record as its rule makes it, before call pairing, and the rule's `pair` ("", entry, return)."""
        full_name, rules, plan = self.format_info(ev.fmt)
        if plan is not None:
            return self.planned_shape(ev, plan), plan[5]
        fields = dict(zip(ev.fmt.field_names, ev.values))
        rule = next((r for r in rules if rule_matches(r, fields)), None)
        if rule is None:
            args = {k: v for k, v in fields.items() if not k.startswith("__")}
            return NpuEvent(ev.ts_ns, "log", None, full_name, ev.pid, ev.cpu, args), ""
        op = rule_op(rule, fields, ev.fmt.name)
        kind, dev, args = rule_kind(rule, fields), rule_dev(rule, fields), rule_args(rule, fields)
        if kind == "marker" and isinstance(args.get("text"), str):
            args["text"] = args["text"].rstrip("\n")
        return NpuEvent(ev.ts_ns, kind, dev, op, ev.pid, ev.cpu, args), rule.pair

    @staticmethod
    def planned_shape(ev: TraceEvent, plan: _Plan) -> NpuEvent:
        """A record of a format with a positional plan: one rule, constant kind and op, fields by position."""
        kind, op, dev_at, arg_at, const, _, kind_if = plan
        values = ev.values
        for at, cmp, value, other in kind_if:
            got = values[at]
            if got.__class__ is int and cmp(got, value):  # an integer field (the kernel's never give a bool)
                kind = other
                break
        args = {name: values[i] for name, i in arg_at}
        if const:
            args.update(const)
        dev = values[dev_at] if dev_at >= 0 else None
        if not isinstance(dev, int):
            dev = None
        return _new(NpuEvent, (ev.ts_ns, kind, dev, op, ev.pid, ev.cpu, args))
