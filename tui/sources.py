"""Sources the feed can run: a fake (a list of batches, for tests and benchmarks), a recording, live tracefs.

Each one runs on the feed's worker thread (`run(sink, stop)`); the UI thread only calls the small control
methods, which set flags the worker applies (markers are the exception: one write to trace_marker).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from npu_trace.events import LossLedger, TraceEvent
from npu_trace.runner import StopFlag
from tui.feed import Sink

IDLE_S = 0.02


class BaseSource:
    """Defaults: no markers, no recording, no pacing."""

    label = "source"

    def __init__(self) -> None:
        self.ledger = LossLedger()

    def run(self, sink: Sink, stop: StopFlag) -> None:
        raise NotImplementedError

    def comm(self, pid: int) -> str:
        return "<idle>" if pid == 0 else "<...>"

    def detail(self) -> str:
        return ""

    def mark(self, text: str) -> bool:
        return False

    def start_recording(self, path: str) -> bool:
        return False

    def stop_recording(self) -> bool:
        return False

    def recording(self) -> Optional[Tuple[str, int]]:
        return None

    def set_paused(self, paused: bool) -> bool:
        return False

    def set_speed(self, factor: float) -> Optional[float]:
        return None

    def seek(self, delta_s: float) -> bool:
        return False


class FakeSource(BaseSource):
    """Hands `batches` to the sink, `gap_s` apart; then idles until stopped (`hold`) or ends.

    Controls are recorded (`marks`, `recordings`) so tests can see what the UI asked for."""

    label = "fake"

    def __init__(
        self,
        batches: Iterable[List[Any]],
        *,
        gap_s: float = 0.0,
        hold: bool = True,
        comms: Optional[Dict[int, str]] = None,
    ) -> None:
        super().__init__()
        self.batches = batches
        self.gap_s = gap_s
        self.hold = hold
        self.comms = comms or {}
        self.marks: List[str] = []
        self.recordings: List[str] = []
        self._recording: Optional[str] = None
        self.paused = False

    def run(self, sink: Sink, stop: StopFlag) -> None:
        for batch in self.batches:
            while self.paused and not stop.stopped:
                sink([])
                time.sleep(IDLE_S)
            if stop.stopped:
                return
            sink(batch)
            if self.gap_s:
                time.sleep(self.gap_s)
        while self.hold and not stop.stopped:
            sink([])
            time.sleep(IDLE_S)

    def comm(self, pid: int) -> str:
        return self.comms.get(pid, super().comm(pid))

    def mark(self, text: str) -> bool:
        self.marks.append(text)
        return True

    def start_recording(self, path: str) -> bool:
        self.recordings.append(path)
        self._recording = path
        return True

    def stop_recording(self) -> bool:
        was, self._recording = self._recording, None
        return was is not None

    def recording(self) -> Optional[Tuple[str, int]]:
        return None if self._recording is None else (self._recording, 4096)

    def set_paused(self, paused: bool) -> bool:
        self.paused = paused
        return True


def time_slices(batch: List[Any], slice_ns: int) -> Iterator[List[Any]]:
    """A time-sorted batch cut into runs of at most `slice_ns` of event time (items without a time follow)."""
    start: Optional[int] = None
    out: List[Any] = []
    for item in batch:
        ts = int(item.ts_ns)
        if ts and start is None:
            start = ts
        if ts and start is not None and ts - start > slice_ns and out:
            yield out
            out, start = [], ts
        out.append(item)
    if out:
        yield out


def sorted_batch(batch: List[Any]) -> List[Any]:
    return sorted(batch, key=lambda x: x.ts_ns)


def event_ts(item: Any) -> int:
    return int(item.ts_ns) if isinstance(item, TraceEvent) else 0


Clock = Callable[[], float]
