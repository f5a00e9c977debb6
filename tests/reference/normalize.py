"""The reference normalizer: raw TraceEvent/Loss items -> NpuEvents one at a time, by a profile's rules
(`npu_trace.pipeline.normalize`), with call pairing of its own (its own stacks, eviction and counters).

The production path normalizes a block at a time (`npu_trace.pipeline.vnormalize.BlockNormalizer` over the
rules and `CallPairing` of `npu_trace.pipeline.normalize.Normalizer`); the tests hold it equal to this one,
event for event, counter for counter.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from npu_trace.events import Loss, NpuEvent, TraceEvent, lost_event
from npu_trace.ftrace.format import EventFormat
from npu_trace.pipeline.normalize import (
    MAX_DEPTH,
    MAX_PENDING,
    Rule,
    _Plan,
    compile_mapping,
    positional_plan,
    rule_args,
    rule_dev,
    rule_kind,
    rule_matches,
    rule_op,
)

Item = Union[TraceEvent, Loss, NpuEvent]
_Pending = Tuple[int, Optional[int], Dict[str, Any]]  # (entry ts, dev, args)
_new = tuple.__new__


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
            cached = (ev.fmt, ev.fmt.field_names, name, rules, positional_plan(ev.fmt.field_names, ev.fmt.name, rules))
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
        rule = next((r for r in rules if rule_matches(r, fields)), None)
        if rule is None:
            args = {k: v for k, v in fields.items() if not k.startswith("__")}
            return NpuEvent(ev.ts_ns, "log", None, full_name, ev.pid, ev.cpu, args), ""
        op = rule_op(rule, fields, ev.fmt.name)
        kind, dev, args = rule_kind(rule, fields), rule_dev(rule, fields), rule_args(rule, fields)
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
    """One-shot convenience: a fresh reference Normalizer over `items`."""
    return Normalizer(mapping).feed(items)
