"""The one loop that moves batches from a source to a sink: read, hand over, wait only when caught up.

Every consumer runs this loop: `stream`, `record`, `demo`, `live` and the TUI's worker, `bpf`, `replay`,
`check` and `diff`. A source (tracefs with its channels, BPF, a recording) reads without blocking and says
when it is caught up (`idle`); the pump then sleeps one poll interval, so nothing wakes up per event. The
sink gets every batch, empty ones too (a recorder flushes on time, the TUI's feed answers its UI), and last
the source's final batch (tracing stopped, everything drained: the timeline releases what it still holds).
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Protocol

from npu_trace.events import LossLedger
from npu_trace.pipeline.batch import Batch
from npu_trace.process import StopFlag

# The sleep when a source is caught up. A live tracefs read takes each CPU's partial page from under its writer:
# every 5 ms, the stream bench's writer (5 M getpid calls, 2 vCPU) made 2.24 M calls/s and its reader spent
# 0.53 s of CPU; every 10 ms, 2.29 M/s and 0.45 s (trace-cmd record beside them: 2.27 M/s, 0.38 s; 5 rounds,
# medians). Still 100 reads a second: a live view waits on the timeline's blocks (50 ms), not on this.
POLL_INTERVAL_S = 0.010
Sink = Callable[[Batch], None]


class Source(Protocol):
    """What the pump runs. Opened and closed by its owner (a context manager), read by the pump."""

    @property
    def ledger(self) -> LossLedger:
        """Every loss the source counted."""
        ...

    def read(self) -> Batch:
        """What there is now, without blocking (a recording: its next batch, paced)."""
        ...

    def idle(self) -> bool:
        """The last read found everything caught up: wait a poll interval before the next."""
        ...

    def done(self) -> bool:
        """Nothing more will come (a recording's end)."""
        ...

    def finish(self) -> Batch:
        """Stop producing; everything left, as the final batch."""
        ...


def pump(
    source: Source,
    sink: Sink,
    *,
    duration: Optional[float] = None,
    stop: Optional[StopFlag] = None,
    until: Optional[Callable[[], bool]] = None,
    poll_s: float = POLL_INTERVAL_S,
) -> None:
    """Read `source` into `sink` until it is done, `duration` passes, `stop` is set or `until()` holds; then
    hand over its final batch."""
    deadline = None if duration is None else time.monotonic() + duration
    stop = stop or StopFlag()
    while not stop.stopped and not source.done():
        sink(source.read())
        if deadline is not None and time.monotonic() >= deadline:
            break
        if until is not None and until():
            break
        if source.idle():
            time.sleep(poll_s)
    sink(source.finish())
