"""The feed: one worker thread runs a source, analyses its batches and posts one `FeedUpdate` per interval.

A source (see `tui.sources`) is injected: it calls `sink(items)` often (at least every ~50 ms, with an empty
list when nothing came) from the worker thread, and `sink.restart()` when it starts over (seek back).
The worker never touches widgets: it hands updates to `post` (the app's thread-safe `post_message`).
Backpressure: a new update is posted only once the UI acknowledged the previous one (`ack`); until then the
interval's data keeps accumulating (bounded), so a slow UI sees fewer, larger updates, never a queue.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, Protocol, Tuple

from npu_trace.errors import NpuTraceError
from npu_trace.events import LossLedger
from npu_trace.profiles import Profile
from npu_trace.runner import StopFlag
from tui.collector import ROWS_PER_UPDATE, Collector, fresh_counters
from tui.model import FeedUpdate

INTERVAL_S = 0.1
STALE_ACK_S = 2.0  # post anyway if the UI has not acknowledged for this long


class Sink(Protocol):
    def __call__(self, items: List[Any]) -> None: ...

    def restart(self) -> None: ...

    def end(self) -> None: ...


class Source(Protocol):
    """What the feed runs. Controls return False (or None) when the source cannot do them."""

    label: str
    ledger: LossLedger

    def run(self, sink: Sink, stop: StopFlag) -> None: ...

    def comm(self, pid: int) -> str: ...

    def detail(self) -> str: ...

    def mark(self, text: str) -> bool: ...

    def start_recording(self, path: str) -> bool: ...

    def stop_recording(self) -> bool: ...

    def recording(self) -> Optional[Tuple[str, int]]: ...

    def set_paused(self, paused: bool) -> bool: ...

    def set_speed(self, factor: float) -> Optional[float]: ...

    def seek(self, delta_s: float) -> bool: ...


class Feed:
    """Owns the worker thread. `post(update)` must be thread-safe (App.post_message is)."""

    def __init__(
        self,
        source: Source,
        profile: Profile,
        post: Callable[[FeedUpdate], Any],
        *,
        interval: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        rows_per_update: int = ROWS_PER_UPDATE,
    ) -> None:
        self.source = source
        self.profile = profile
        self.post = post
        self.interval = interval
        self.clock = clock
        self.stop = StopFlag()
        self.rows_per_update = rows_per_update
        self.collector = Collector(profile, source.comm, rows_per_update)
        self.seq = 0
        self.ack = 0
        self.restarted = False
        self.ended = False
        self.error: Optional[str] = None
        self.done = threading.Event()
        self._last = clock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="npu-trace-feed", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the source and wait for the worker (the source cleans up its kernel resources there)."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.source.run(self, self.stop)
        except NpuTraceError as exc:
            self.error = str(exc)
        finally:
            self.end()
            self.done.set()

    # ---- the sink ------------------------------------------------------------------------------
    def __call__(self, items: List[Any]) -> None:
        self.collector.add(items)
        now = self.clock()
        if now - self._last >= self.interval and (self.ack >= self.seq or now - self._last >= STALE_ACK_S):
            self._post()

    def restart(self) -> None:
        self.collector = Collector(self.profile, self.source.comm, self.rows_per_update)
        self.restarted = True
        self.ended = False

    def end(self) -> None:
        """The source has nothing more: flush the detectors (leaks, incomplete sequences) and say so, once."""
        if not self.ended:
            self.ended = True
            self.collector.finish()
            self._post(ended=True)

    def _post(self, ended: bool = False) -> None:
        now = self.clock()
        self.seq += 1
        counters = fresh_counters(self.source)
        if self.error:
            counters.detail = f"error: {self.error}"
        update = self.collector.update(self.seq, now - self._last, counters, ended or self.ended)
        update.restart, self.restarted = self.restarted, False
        self._last = now
        self.post(update)
