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
    of its own (NpuEvents, never mixed with the tracefs items), so a sink sees everything in one order. The
    trace items of a pass are handed on one pass later, after the channels' events read since: every channel
    event up to the time those pages were read comes first (npu_trace.detectors.pipeline holds it until the
    trace reaches its time), so it lands among them in time order, whichever buffer delivered it later.
    """
    deadline = None if duration is None else time.monotonic() + duration
    stop = stop or StopFlag()
    read = session.read_raw if raw else session.read
    batch: List[Any] = []
    held: List[Any] = []  # with channels: the previous pass's trace items
    while not stop.stopped:
        if channels is not None:
            _channels(channels, sink)
            _flush(held, sink, raw)
        full_pages = read(batch)
        if channels is None:
            _flush(batch, sink, raw)
        else:
            held, batch = batch, held  # `held` was emptied by its flush
        if deadline is not None and time.monotonic() >= deadline:
            break
        if until is not None and until():
            break
        if not full_pages:  # every CPU caught up: let pages fill instead of re-reading a few events at a time
            time.sleep(poll_s)
    session.stop(batch, raw=raw)
    if channels is not None:
        _channels(channels, sink, final=True)
        _flush(held, sink, raw)
    _flush(batch, sink, raw)


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
