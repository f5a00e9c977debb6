"""Normalization: raw trace records into the event model's `NpuEvent`s (`npu_trace.events`), by rules as data.

`Normalizer(mapping)` turns raw `TraceEvent`/`Loss` items into NpuEvents. The mapping is data (a profile's
`mapping`): event "system:name" -> a rule dict, or a list of rule dicts tried in order (the first whose
`match` holds wins). Rule keys:

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
Pending entries are bounded (`MAX_PENDING`); evicted ones are counted in `stats["unpaired_entries"]`.

Events without a rule become kind "log" (op = "system:name", args = their fields): nothing is dropped
silently; detectors ignore "log". `Loss` items become kind "lost" (op = the loss kind, args source/lost);
`ftrace:print` (trace_marker writes) becomes kind "marker" with args {"text": ...} unless a profile maps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from npu_trace.errors import UsageError
from npu_trace.events import KINDS, Loss, NpuEvent, TraceEvent, lost_event
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
        if len(cond) != 4 or cond[1] not in _CMP or cond[3] not in KINDS or not _is_int(cond[2]):
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


def _matches(rule: Rule, fields: Mapping[str, Any]) -> bool:
    return not rule.match or all(field_value(fields, f) == v for f, v in rule.match)


def _kind(rule: Rule, fields: Mapping[str, Any]) -> str:
    if not rule.kind_if:
        return rule.kind
    for name, cmp, value, kind in rule.kind_if:
        got = field_value(fields, name)
        if _is_int(got) and _CMP[cmp](got, value):
            return kind
    return rule.kind


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _op(rule: Rule, fields: Mapping[str, Any], default: str) -> str:
    if not rule.op_field:
        return rule.op or default
    value = field_value(fields, rule.op_field)
    return dict(rule.op_names).get(str(value), f"{rule.op_field}={value}")


def _args(rule: Rule, fields: Mapping[str, Any]) -> Dict[str, Any]:
    if rule.args:
        out = {name: field_value(fields, path) for name, path in rule.args}
    else:
        out = {k: v for k, v in fields.items() if not k.startswith("__") and k != rule.dev}
    out.update(rule.set)
    return out


def _dev(rule: Rule, fields: Mapping[str, Any]) -> Optional[int]:
    value = field_value(fields, rule.dev) if rule.dev else None
    return int(value) if isinstance(value, int) else None


# (kind, op, index of the device field or -1, ((arg name, field index), ...), constant args, pair,
#  kind_if as ((field index, comparison, value, kind), ...))
_KindIf = Tuple[Tuple[int, Any, Any, str], ...]
_Plan = Tuple[str, str, int, Tuple[Tuple[str, int], ...], Tuple[Tuple[str, Any], ...], str, _KindIf]
_new = tuple.__new__


def _plan(names: Sequence[str], event_name: str, rules: Sequence[Rule]) -> Optional[_Plan]:
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
_Pending = Tuple[int, Optional[int], Dict[str, Any]]  # (entry ts, dev, args)


class Normalizer:
    """Raw TraceEvent/Loss items -> NpuEvents, by a profile's mapping (see the module docstring)."""

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        self.rules = compile_mapping(mapping)
        self._formats: Dict[int, Tuple[Any, Tuple[str, ...], str, Tuple[Rule, ...], Optional[_Plan]]] = {}
        self._pending: Dict[Tuple[int, str], List[_Pending]] = {}
        self._pending_count = 0
        self.stats: Dict[str, int] = {"unpaired_entries": 0, "unpaired_returns": 0}
        self._plans: Dict[int, Tuple[Any, _Plan]] = {}  # id(format) -> (format, its plan), for feed_mapped
        self._unmapped: Set[int] = set()  # ids of formats without a rule (their EventFormat stays referenced)

    def feed(self, items: Iterable[Item]) -> List[NpuEvent]:
        """Raw items -> NpuEvents (an NpuEvent, already normalized by its channel, passes as it is)."""
        out: List[NpuEvent] = []
        for item in items:
            cls = item.__class__
            if cls is TraceEvent:
                out.append(self._event(item))  # type: ignore[arg-type]
            elif cls is NpuEvent:
                out.append(item)  # type: ignore[arg-type]
            else:
                out.append(lost_event(item))  # type: ignore[arg-type]
        return out

    def feed_mapped(self, items: Iterable[Item]) -> Tuple[List[NpuEvent], int]:
        """Like feed(), without building the "log" events of formats that have no rule (analysis ignores
        them): (the other events, how many were left out)."""
        out: List[NpuEvent] = []
        logs = 0
        unmapped, planned, plans = self._unmapped, self._planned, self._plans
        for any_item in items:
            cls = any_item.__class__
            if cls is not TraceEvent:
                out.append(any_item if cls is NpuEvent else lost_event(any_item))  # type: ignore[arg-type]
                continue
            item: TraceEvent = any_item  # type: ignore[assignment]
            fmt = item.fmt
            hit = plans.get(id(fmt))
            if hit is not None and hit[0] is fmt:  # the common case, without the general path's lookups
                out.append(planned(item, hit[1]))
            elif id(fmt) in unmapped:
                logs += 1
            else:
                ev = self._event(item)
                if ev.kind == "log" and not self._format(item)[2]:  # no rule: counted, like those after it
                    unmapped.add(id(item.fmt))
                    logs += 1
                    continue
                out.append(ev)
        return out, logs

    def _format(self, ev: TraceEvent) -> Tuple[Tuple[str, ...], str, Tuple[Rule, ...], Optional[_Plan]]:
        cached = self._formats.get(id(ev.fmt))
        if cached is None or cached[0] is not ev.fmt:
            name = ev.fmt.full_name
            rules = self.rules.get(name, ())
            cached = (ev.fmt, ev.fmt.field_names, name, rules, _plan(ev.fmt.field_names, ev.fmt.name, rules))
            self._formats[id(ev.fmt)] = cached
            if cached[4] is not None:
                self._plans[id(ev.fmt)] = (ev.fmt, cached[4])
        return cached[1], cached[2], cached[3], cached[4]

    def _event(self, ev: TraceEvent) -> NpuEvent:
        shaped, pair = self._shape(ev)
        return self._paired(ev, shaped, pair) if pair else shaped

    def _paired(self, ev: TraceEvent, shaped: NpuEvent, pair: str) -> NpuEvent:
        """An entry waits for its return (and is passed on as it is); a return takes its entry's device and args."""
        if pair == "entry":
            self._push((ev.pid, shaped.op), (ev.ts_ns, shaped.dev, shaped.args))
        elif pair == "return":
            dev, args = self._pop((ev.pid, shaped.op), ev.ts_ns, shaped.args)
            return shaped._replace(dev=dev, args=args)
        return shaped

    def _shape(self, ev: TraceEvent) -> Tuple[NpuEvent, str]:
        """The event as its rule makes it, before call pairing, and its rule's `pair` ("", entry, return)."""
        names, full_name, rules, plan = self._format(ev)
        if plan is not None:
            return self._planned_shape(ev, plan), plan[5]
        fields = dict(zip(names, ev.values))
        rule = next((r for r in rules if _matches(r, fields)), None)
        if rule is None:
            args = {k: v for k, v in fields.items() if not k.startswith("__")}
            return NpuEvent(ev.ts_ns, "log", None, full_name, ev.pid, ev.cpu, args), ""
        op = _op(rule, fields, ev.fmt.name)
        kind, dev, args = _kind(rule, fields), _dev(rule, fields), _args(rule, fields)
        if kind == "marker" and isinstance(args.get("text"), str):
            args["text"] = args["text"].rstrip("\n")
        return NpuEvent(ev.ts_ns, kind, dev, op, ev.pid, ev.cpu, args), rule.pair

    def _planned(self, ev: TraceEvent, plan: _Plan) -> NpuEvent:
        """The common case, precompiled: one rule, constant kind and op, fields taken by position."""
        shaped = self._planned_shape(ev, plan)
        return self._paired(ev, shaped, plan[5]) if plan[5] else shaped

    @staticmethod
    def _planned_shape(ev: TraceEvent, plan: _Plan) -> NpuEvent:
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

    def format_info(self, fmt: EventFormat) -> Tuple[str, Tuple[Rule, ...], Optional[_Plan]]:
        """(its "system:name", its rules, its positional plan or None) for a format (cached)."""
        _, name, rules, plan = self._format(TraceEvent(0, 0, 0, fmt, ()))
        return name, rules, plan

    def _push(self, key: Tuple[int, str], entry: _Pending) -> None:
        stack = self._pending.setdefault(key, [])
        if len(stack) >= MAX_DEPTH or self._pending_count >= MAX_PENDING:
            self._evict(key if len(stack) >= MAX_DEPTH else next(iter(self._pending)))
            stack = self._pending.setdefault(key, [])
        stack.append(entry)
        self._pending_count += 1

    def _evict(self, key: Tuple[int, str]) -> None:
        """Forget the oldest pending entry of `key` (insertion order: deterministic for a given input)."""
        stack = self._pending[key]
        stack.pop(0)
        self._pending_count -= 1
        self.stats["unpaired_entries"] += 1
        if not stack:
            del self._pending[key]

    def _pop(self, key: Tuple[int, str], ts_ns: int, ret_args: Dict[str, Any]) -> Tuple[Optional[int], Dict]:
        entry = self._take(key)
        if entry is None:
            return None, ret_args
        entry_ts, dev, args = entry
        merged = {**args, **ret_args, "latency_ns": ts_ns - entry_ts, "entry_ts_ns": entry_ts}
        return dev, merged

    def pending_entries(self) -> List[Tuple[int, str, int, Optional[int], Dict[str, Any]]]:
        """The call entries still waiting for their return (calls in flight): (pid, op, entry ts, device, args),
        oldest first."""
        out = [(pid, op, ts, dev, dict(args)) for (pid, op), stack in self._pending.items() for ts, dev, args in stack]
        return sorted(out, key=lambda e: (e[2], e[0], e[1]))

    def _take(self, key: Tuple[int, str]) -> Optional[_Pending]:
        """The latest pending entry of `key`, removed (None, counted unpaired, when there is none)."""
        stack = self._pending.get(key)
        if not stack:
            self.stats["unpaired_returns"] += 1
            return None
        entry = stack.pop()
        self._pending_count -= 1
        if not stack:
            del self._pending[key]
        return entry


def normalize(mapping: Mapping[str, Any], items: Sequence[Item]) -> List[NpuEvent]:
    """One-shot convenience: a fresh Normalizer over `items`."""
    return Normalizer(mapping).feed(items)
