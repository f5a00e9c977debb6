"""Timeouts: every `timeout` event is a `timeout` finding (device, op = what timed out, how long it waited).

Sources in the sim profile: driver timeouts (op cq_wait / mbox / dma / msg_chan, `wait_us`), a HAL wait
returning -ETIMEDOUT (op = the HAL call, the wait is the paired call's latency) and heartbeat loss
(op "heartbeat", `lost_count`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.model import NpuEvent

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


class TimeoutDetector:
    def __init__(self) -> None:
        self.counts: Dict[Tuple[int, str], int] = {}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        return [self._finding(ev) for ev in events if ev.kind == "timeout"]

    def _finding(self, ev: NpuEvent) -> Finding:
        key = (-1 if ev.dev is None else ev.dev, ev.op)
        self.counts[key] = self.counts.get(key, 0) + 1
        start = ev.args.get("entry_ts_ns", ev.ts_ns)
        details = {k: v for k, v in sorted(ev.args.items()) if k not in _SKIP}
        details.update(wait_ns=wait_ns(ev.args), pid=ev.pid, end_ts_ns=ev.ts_ns)
        return Finding("timeout", ev.dev, ev.op, int(start), details)

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        rows = [{"device": None if d < 0 else d, "op": op, "count": n} for (d, op), n in sorted(self.counts.items())]
        return {"total": sum(self.counts.values()), "by_op": rows}
