"""The scope's pipeline part one event at a time: the reference `npu_trace.pipeline.scope.ScopeFilter`'s block
stage (`raw_rows`, `event_rows`) is held equal to. Same rules, same counters (a ScopeFilter's `dropped`)."""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence

from npu_trace.events import NpuEvent, TraceEvent
from npu_trace.pipeline.scope import KEEP_KINDS, ScopeFilter

from .normalize import Normalizer


def raw(flt: ScopeFilter, items: Sequence[Any]) -> Sequence[Any]:
    """The trace's items without the events of a task whose name is out of scope (for the events whose kernel
    filter was refused); `items` itself when there are none."""
    if not flt.comm_events:
        return items
    out = []
    for item in items:
        if _other_task(flt, item):
            flt.dropped["comm"] += 1
            continue
        out.append(item)
    return out


def _other_task(flt: ScopeFilter, item: Any) -> bool:
    if item.__class__ is not TraceEvent or item.fmt.full_name not in flt.comm_events:
        return False
    return flt.comm_of(item.pid) not in flt.comms


def events(flt: ScopeFilter, evs: Iterable[NpuEvent]) -> List[NpuEvent]:
    """Normalized events in scope, interrupts with their device."""
    out = []
    for ev in evs:
        kept = placed(flt, ev)
        if kept is not None:
            out.append(kept)
    return out


def placed(flt: ScopeFilter, ev: NpuEvent) -> Optional[NpuEvent]:
    """The event as the scope has it (an interrupt with its device), or None when it is out of scope."""
    if flt.irqs is not None and ev.kind == "irq" and "irq" in ev.args:
        irq = ev.args["irq"]
        if not isinstance(irq, int) or irq not in flt.irqs:  # a field of another type: not an interrupt's number
            flt.dropped["irq"] += 1
            return None
        if ev.dev is None and flt.irqs[irq] is not None:
            ev = ev._replace(dev=flt.irqs[irq])
    if flt.devices and ev.dev not in flt.devices and not (ev.dev is None and ev.kind in KEEP_KINDS):
        flt.dropped["device"] += 1
        return None
    return ev


class RawScope:
    """The scope over raw items, each normalized only to tell whether it is in scope; the raw ones are kept."""

    def __init__(self, flt: ScopeFilter, mapping: Mapping[str, Any]) -> None:
        self.filter = flt
        self.normalizer = Normalizer(mapping)

    def keep(self, items: Sequence[Any]) -> List[Any]:
        items = raw(self.filter, items)
        if not (self.filter.devices or self.filter.irqs is not None):
            return list(items)
        evs = self.normalizer.feed(items)  # one NpuEvent per item, in order
        return [item for item, ev in zip(items, evs) if placed(self.filter, ev) is not None]
