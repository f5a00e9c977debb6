"""What crosses the process boundary between the UI and the worker: plain, picklable values.

The feed update and its views (the worker builds them, the UI process unpickles them and the widgets only
read them), the `SourceSpec` the UI sends first, and the command that starts the worker. Nothing here
touches Textual, and both sides import it: it is the protocol (`tui.worker.main` documents the messages).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Final, List, Optional, Tuple, Union

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


INTERVAL_S = 0.1  # the longest a feed update waits (the worker sends one per interval, once acknowledged)
ROWS_PER_UPDATE = 250  # events carried to the log per update (the newest that match the log filter)
CONTEXT_NS = 5_000_000  # a spike's context: events within 5 ms of the slow call

WORKER_BOOT = (  # python -c BOOT FD PATH: the UI's module search path first, then the worker
    "import json, sys; sys.path[:0] = json.loads(sys.argv[2]); "
    "from tui.worker.main import worker_main; worker_main(int(sys.argv[1]))"
)


@dataclass
class SourceSpec:
    """How the worker builds its source: `factory(*args, **kwargs)`; the factory is importable by name (a
    "module:name" string, or a module-level class or function) and the arguments are picklable."""

    factory: Union[str, Callable[..., Any]]  # "module:name" (the UI never imports the worker's modules)
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)
    label: str = ""  # shown until the worker's first update (and set on the source when given)

    def build(self) -> Any:
        """The source (in the worker process: a "module:name" factory is imported there)."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(importlib.import_module(module), name)
        source = factory(*self.args, **self.kwargs)
        if self.label:
            source.label = self.label
        return source

    def title(self) -> str:
        return self.label or str(getattr(self.factory, "label", "") or "")


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


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
class FaultView:
    """A kernel fault, a device the driver no longer reaches, or an application's error; for an application's
    error, the driver-level finding that explains it (npu_trace.detectors.links, against what was found before
    it and up to its settle time after it)."""

    finding: Finding
    explanation: str = ""


@dataclass
class MemoryView:
    devices: List[Tuple[int, int, int]] = field(default_factory=list)  # (dev, live bytes, peak)
    processes: List[Tuple[int, int, str, int]] = field(default_factory=list)  # (dev, pid, comm, live bytes)
    failures: List[Finding] = field(default_factory=list)
    spark: Dict[int, List[int]] = field(default_factory=dict)  # live bytes per update interval
    # npu-smi's view: (device, npu, chip, used MB, total MB) of each chip's last reading
    chips: List[Tuple[Optional[int], int, int, Optional[int], Optional[int]]] = field(default_factory=list)
    accounting: List[Finding] = field(default_factory=list)  # accounting_mismatch, alloc_fail_explained


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
    faults: List[FaultView] = field(default_factory=list)  # the newest kernel faults, device faults, app errors


@dataclass
class LogWindow:
    """The answer to a filter change: the newest matching events the worker still holds, replacing the log."""

    query: str
    rows: List[LogRow]
    skipped: int  # matching events held by the worker beyond the bound
    examined: int  # events the worker examined (its recent-events window)
