"""The values a feed update carries from the worker process to the UI: plain, picklable data.

Nothing here touches Textual: the worker builds these, the UI process unpickles them and the widgets only
read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Final, List, Optional, Tuple

from npu_trace.detectors.base import Finding

# A log row: a plain tuple of atomic values, (ts_ns, dev, kind, op, pid, cpu, comm, fields) where fields is
# the event's args as text (`tui.fmt.log_row`). CPython's cyclic GC stops tracking such tuples: the thousands
# of rows the UI holds cost its collections nothing (rows holding NpuEvents and their args dicts made the UI's
# collections long enough to delay key presses).
LogRow = Tuple[int, Optional[int], str, str, int, int, str, str]
TS: Final = 0
DEV: Final = 1
KIND: Final = 2
OP: Final = 3
PID: Final = 4
CPU: Final = 5
COMM: Final = 6
FIELDS: Final = 7
STATES = ("ok", "degraded", "resetting", "offline")


@dataclass
class DeviceState:
    dev: int
    state: str = "ok"
    events: int = 0
    rate: float = 0.0
    last_error: str = ""
    spark: List[int] = field(default_factory=list)  # max call latency (ns) per update interval


@dataclass
class OpRow:
    dev: Optional[int]
    op: str
    count: int
    rate: float
    p50_ns: int
    p99_ns: int
    max_ns: int
    spikes: int


@dataclass
class SpikeView:
    finding: Finding
    context: List[LogRow]  # events within CONTEXT_NS of the slow call
    more: int = 0  # context events left out (bounded)


@dataclass
class ResetView:
    dev: int
    status: str  # "in progress", "complete", "failed", "incomplete"
    ts_ns: int
    steps: List[Tuple[str, int, int]]  # (name, ts, ret)
    precursor: Dict[str, Any]
    trigger: Optional[Dict[str, Any]]
    waiting_for: Optional[str] = None


@dataclass
class MemoryView:
    devices: List[Tuple[int, int, int]] = field(default_factory=list)  # (dev, live bytes, peak)
    processes: List[Tuple[int, int, str, int]] = field(default_factory=list)  # (dev, pid, comm, live bytes)
    failures: List[Finding] = field(default_factory=list)
    spark: Dict[int, List[int]] = field(default_factory=dict)  # live bytes per update interval


@dataclass
class Counters:
    events: int = 0
    rate: float = 0.0
    loss: int = 0
    loss_flagged: bool = False
    loss_text: str = "loss: none (0 events lost)"
    recording: Optional[str] = None
    recording_bytes: int = 0
    source: str = ""
    ended: bool = False
    detail: str = ""  # source state: replay speed/position, errors
    pending_spikes: int = 0  # spikes found whose context (the events after them) is still being gathered
    error: str = ""  # the worker's error, one line ("" while all is well)


@dataclass
class FeedUpdate:
    """One interval's worth: new events (bounded), new findings, and the superseding state."""

    seq: int
    rows: List[LogRow]  # the newest events of the interval that match the log filter (bounded)
    skipped: int  # matching events of this interval not carried (beyond the bound)
    findings: List[Finding]
    spikes: List[SpikeView]
    devices: List[DeviceState]
    ops: List[OpRow]
    resets: List[ResetView]
    memory: MemoryView
    counters: Counters
    restart: bool = False  # the source started over (seek back): the UI clears what it accumulated


@dataclass
class LogWindow:
    """The answer to a filter change: the newest matching events the worker still holds, replacing the log."""

    query: str
    rows: List[LogRow]
    skipped: int  # matching events held by the worker beyond the bound
    examined: int  # events the worker examined (its recent-events window)
