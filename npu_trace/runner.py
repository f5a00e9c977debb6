"""The loop that moves events from a source to sinks: poll, decode, hand over in batches, never per event."""

from __future__ import annotations

import gc
import signal
import time
from types import FrameType
from typing import Any, Callable, List, Optional

from npu_trace.sources.channels import Channels
from npu_trace.sources.tracefs_source import TracefsSession

POLL_INTERVAL_S = 0.005
Sink = Callable[[List[Any]], None]


def tune_gc() -> None:
    """Millions of small tuples a second make CPython's cyclic GC run constantly (measured: 2-3x the decode
    cost); events hold no cycles, so the process collects rarely. Called by the CLI, never by the library."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def prepare_process() -> StopFlag:
    """For a CLI process about to trace: SIGINT/SIGTERM end the session cleanly, GC tuned for throughput."""
    stop = StopFlag()
    stop.install()
    tune_gc()
    return stop


class StopFlag:
    """Set by SIGTERM/SIGINT (installed by `install`) or by a caller; checked once per poll."""

    def __init__(self) -> None:
        self.stopped = False
        self.signal = 0

    def set(self, signum: int = 0, _frame: Optional[FrameType] = None) -> None:
        self.stopped = True
        self.signal = signum

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.set)


def pump(
    session: TracefsSession,
    sink: Sink,
    *,
    duration: Optional[float] = None,
    stop: Optional[StopFlag] = None,
    until: Optional[Callable[[], bool]] = None,
    poll_s: float = POLL_INTERVAL_S,
    raw: bool = False,
    channels: Optional[Channels] = None,
) -> None:
    """Read `session` until `duration` passes, `stop` is set or `until()` is true; then drain what is left.

    Decoded: `sink` gets time-ordered batches of events and losses (each read drains every CPU, so a batch is
    sorted before it is handed on), only when there is something. Raw: `sink` gets the (cpu, page) pairs of
    every pass, possibly none, so that a recorder can flush on time.
    `channels` (kmsg, uevents, npu-smi, bpf): at the start of each pass, what they have goes to `sink` as a batch
    of its own (NpuEvents, never mixed with the tracefs items), so a sink sees everything in one order, and
    channel events usually come before the trace events of the same time (npu_trace.detectors.pipeline holds
    them until the trace reaches them).
    """
    deadline = None if duration is None else time.monotonic() + duration
    stop = stop or StopFlag()
    read = session.read_raw if raw else session.read
    batch: List[Any] = []
    while not stop.stopped:
        if channels is not None:  # first: what they tell is then usually earlier than the pages read after it
            _channels(channels, sink)
        full_pages = read(batch)
        _flush(batch, sink, raw)
        if deadline is not None and time.monotonic() >= deadline:
            break
        if until is not None and until():
            break
        if not full_pages:  # every CPU caught up: let pages fill instead of re-reading a few events at a time
            time.sleep(poll_s)
    session.stop(batch, raw=raw)
    _flush(batch, sink, raw)
    if channels is not None:
        _channels(channels, sink, final=True)


def _channels(channels: Channels, sink: Sink, final: bool = False) -> None:
    events = channels.read(final)
    if events:
        sink(events)


def _flush(batch: List[Any], sink: Sink, raw: bool) -> None:
    if raw:
        sink(batch)
    elif batch:
        batch.sort(key=_ts)
        sink(batch)
    batch.clear()


def _ts(item: Any) -> int:
    return int(item.ts_ns)
