"""What every detector shares: the `Finding` value and the `Detector` protocol.

A detector is pure and deterministic: `feed(events)` (in time order) returns the findings those events
complete (so a live view can show them at once), `advance(now)` those that time alone completes (the
timeline's watermark while the host is quiet: a reset sequence whose next step is overdue), `flush()` those
only the end of the session decides (leaks, incomplete sequences, loss), `summary()` its JSON-able totals.
Time comes only from event timestamps and the watermarks that replay reproduces, never from the wall clock.

The fast path (`Analysis.feed_block`) takes the hot kinds (call, irq, submit, complete, alloc, free: hundreds
of thousands a second) as columns, in the latency and memory detectors' `feed_block`; every other detector is
fed only the other events of a block, as objects, then `advance(stamp of the block's last item)`. A detector
other than those two must therefore give the same findings whether or not it sees the hot kinds (it may read
the latency and memory detectors' views instead), and judge time by stamps only: tests/test_fast_path.py
holds every detector to that, byte for byte against the reference path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from npu_trace.events import NpuEvent

FINDING_KINDS: Tuple[str, ...] = (
    "spike", "reset_sequence", "alloc_fail", "timeout", "leak", "loss", "link_degraded", "health", "truncated",
    "accounting_mismatch", "alloc_fail_explained",
    "kernel_fault", "device_fault", "app_error",
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One thing a detector found. `details` holds JSON-able values only (ints, str, bool, None, lists, dicts)."""

    kind: str
    device: Optional[int]
    op: Optional[str]
    ts_ns: int
    details: Dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "device": self.device, "op": self.op, "ts_ns": self.ts_ns, "details": self.details}

    def sort_key(self) -> Tuple[int, str, int, str, str]:
        """Total order: (ts_ns, kind, device, op), then the details' canonical JSON."""
        dev = -1 if self.device is None else self.device
        return (self.ts_ns, self.kind, dev, self.op or "", json.dumps(self.details, sort_keys=True))


def sort_findings(findings: Sequence[Finding]) -> List[Finding]:
    return sorted(findings, key=Finding.sort_key)


class Detector(Protocol):
    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]: ...

    def advance(self, now: int) -> List[Finding]: ...

    def flush(self) -> List[Finding]: ...

    def summary(self) -> Dict[str, Any]: ...
