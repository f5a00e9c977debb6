"""Sources the feed can run: a fake (a list of batches, for tests and benchmarks), a recording, live tracefs.

Each one is built and run in the worker process (`run(sink, stop)`, see `tui.worker`); the UI's requests
reach the small control methods between two batches, on the same thread (the sink serves them), and most
only set flags that `run` applies.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from npu_trace.events import LossLedger, TraceEvent
from npu_trace.ftrace.format import EventFormat, parse_format
from npu_trace.process import StopFlag
from tui.worker.feed import UpdateSink

IDLE_S = 0.02
PRINT_FORMAT = """name: print
ID: 5
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;
\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:0;

print fmt: "%ps: %s", (void *)REC->ip, REC->buf
"""


class BaseSource:
    """Defaults: no markers, no recording, no pacing."""

    label = "source"

    def __init__(self) -> None:
        self.ledger = LossLedger()

    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
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

    def dump_now(self, directory: str) -> Optional[str]:
        """Write the last minutes to a recording in `directory` now; its path (None: not this source)."""
        return None

    def set_paused(self, paused: bool) -> bool:
        return False

    def set_speed(self, factor: float) -> Optional[float]:
        return None

    def seek(self, delta_s: float) -> bool:
        return False


class FakeSource(BaseSource):
    """Hands `batches` to the sink, `gap_s` apart; then idles until stopped (`hold`) or ends.

    A marker becomes an `ftrace:print` event in the stream, as a trace_marker write does in a live session;
    recording is pretended (`recording()` names the file, nothing is written)."""

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
        self.dumps: List[str] = []
        self._recording: Optional[str] = None
        self._print: Optional[EventFormat] = None
        self._last_ts = 0
        self.paused = False

    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        for batch in self.batches:
            while self.paused and not stop.stopped:
                sink(self._take_marks())
                time.sleep(IDLE_S)
            if stop.stopped:
                return
            if batch:
                self._last_ts = max(self._last_ts, int(batch[-1].ts_ns))
            marks = self._take_marks()
            sink(batch + marks if marks else batch)
            if self.gap_s:
                time.sleep(self.gap_s)
        while self.hold and not stop.stopped:
            sink(self._take_marks())
            time.sleep(IDLE_S)

    def _take_marks(self) -> List[Any]:
        if not self.marks:
            return []
        if self._print is None:
            self._print = parse_format(PRINT_FORMAT, "ftrace")
        self._last_ts += 1
        out = [TraceEvent(self._last_ts, 0, 0, self._print, (0, text)) for text in self.marks]
        self.marks = []
        return out

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

    def dump_now(self, directory: str) -> Optional[str]:
        """Pretended, as recording is: the path a dump would have."""
        self.dumps.append(directory)
        return f"{directory}/flight-fake-manual.npt"

    def set_paused(self, paused: bool) -> bool:
        self.paused = paused
        return True


Clock = Callable[[], float]
