"""Timeouts: every `timeout` event is a `timeout` finding (device, op = what timed out, how long it waited).

Sources in the sim profile: driver timeouts (op cq_wait / mbox / dma / msg_chan, `wait_us`), a HAL wait
returning -ETIMEDOUT (op = the HAL call, the wait is the paired call's latency) and heartbeat loss
(op "heartbeat", `lost_count`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

_SKIP = frozenset(("latency_ns", "entry_ts_ns", "wait_us", "wait_ns"))


def wait_ns(args: Dict[str, Any]) -> Optional[int]:
    """How long the timed-out operation waited, in ns, when the event says."""
    if isinstance(args.get("wait_ns"), int):
        return int(args["wait_ns"])
    if isinstance(args.get("wait_us"), int):
        return int(args["wait_us"]) * 1000
    if isinstance(args.get("latency_ns"), int):
        return int(args["latency_ns"])
    return None


class _Pending:
    __slots__ = ("dev", "ev", "sources", "ts")

    def __init__(self, ev: NpuEvent) -> None:
        self.ev = ev
        self.dev = ev.dev
        self.ts = ev.ts_ns
        self.sources = [_source(ev)]


def _source(ev: NpuEvent) -> str:
    return str(ev.args.get("source", "ftrace"))


def _rank(ev: NpuEvent) -> Tuple[bool, bool]:
    return (ev.dev is not None, "source" not in ev.args)


class TimeoutDetector:
    """merge_ns > 0: one timeout told by several channels (a driver probe and its kmsg line, say) is one
    finding, with `sources`: a timeout of the same op from another channel within merge_ns (its device the
    same, or unknown on one side) is merged. Findings then wait merge_ns of event time (the latest timestamp
    seen, or the time `advance` says was reached) for their copies; the result depends only on the sequence
    of events."""

    def __init__(self, merge_ns: int = 0) -> None:
        self.merge = merge_ns
        self.counts: Dict[Tuple[int, str], int] = {}
        self.pending: List[_Pending] = []
        self.now = 0
        self.merged = 0

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        if not self.merge:
            return [self._finding(ev, []) for ev in events if ev.kind == "timeout"]
        out: List[Finding] = []
        pending, merge = self.pending, self.merge
        for ev in events:
            if ev.ts_ns > self.now:
                self.now = ev.ts_ns
            if ev.kind == "timeout" and not self._merged(ev):
                pending.append(_Pending(ev))
            if pending and pending[0].ts <= self.now - merge:
                self._release(self.now - merge, out)
        return out

    def feed_sparse(self, events: Sequence[NpuEvent], before: Sequence[int], last: int) -> List[Finding]:
        """feed() of a stream of which only the timeout events are given: `before[i]` is the stamp of the item
        just before events[i] (the latest stamp feed() would have seen), `last` the last item's stamp."""
        if not self.merge:
            return self.feed(events)
        out: List[Finding] = []
        for ev, now in zip(events, before):
            self._catch_up(now, out)
            out += self.feed([ev])
        self._catch_up(last, out)
        return out

    def _catch_up(self, now: int, out: List[Finding]) -> None:
        if now > self.now:
            self.now = now
        if self.pending and self.pending[0].ts <= self.now - self.merge:
            self._release(self.now - self.merge, out)

    def advance(self, now: int) -> List[Finding]:
        """Time has reached `now` (nothing earlier is still to come): a timeout no copy can join any more
        (every later event is at least `now`, more than merge_ns after it) is a finding."""
        out: List[Finding] = []
        if self.merge and self.pending and self.pending[0].ts < now - self.merge:
            self._release(now - self.merge - 1, out)
        return out

    def _merged(self, ev: NpuEvent) -> bool:
        source = _source(ev)
        for p in self.pending:
            if (p.ev.op == ev.op and source not in p.sources and abs(p.ts - ev.ts_ns) <= self.merge
                    and (p.dev is None or ev.dev is None or p.dev == ev.dev)):  # fmt: skip
                p.sources.append(source)
                if _rank(ev) > _rank(p.ev):  # the copy with a device, from the probe, tells the most
                    p.ev, p.dev = ev, ev.dev
                p.ts = min(p.ts, ev.ts_ns)
                self.merged += 1
                return True
        return False

    def _release(self, upto: int, out: List[Finding]) -> None:
        due = sorted((p for p in self.pending if p.ts <= upto), key=lambda p: p.ts)
        self.pending[:] = [p for p in self.pending if p.ts > upto]  # in place: feed() holds the list
        out.extend(self._finding(p.ev, p.sources) for p in due)

    def _finding(self, ev: NpuEvent, sources: List[str]) -> Finding:
        key = (-1 if ev.dev is None else ev.dev, ev.op)
        self.counts[key] = self.counts.get(key, 0) + 1
        start = ev.args.get("entry_ts_ns", ev.ts_ns)
        details = {k: v for k, v in sorted(ev.args.items()) if k not in _SKIP}
        details.update(wait_ns=wait_ns(ev.args), pid=ev.pid, end_ts_ns=ev.ts_ns)
        if sources:
            details["sources"] = sorted(sources)
        return Finding("timeout", ev.dev, ev.op, int(start), details)

    def flush(self) -> List[Finding]:
        out: List[Finding] = []
        if self.pending:
            self._release(max(p.ts for p in self.pending), out)
        return out

    def summary(self) -> Dict[str, Any]:
        rows = [{"device": None if d < 0 else d, "op": op, "count": n} for (d, op), n in sorted(self.counts.items())]
        out: Dict[str, Any] = {"total": sum(self.counts.values()), "by_op": rows}
        if self.merge:
            out["merged"] = self.merged
        return out
