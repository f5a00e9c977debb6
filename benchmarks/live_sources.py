"""Sources the TUI's worker runs for benchmarks.live (built in the worker process from a SourceSpec): the live
task workload, or a recording of it replayed at a given offered rate. Both report what the harness needs in
their `detail()` ("bench: key=value ..."), which reaches it in every update's counters.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Dict, List, Optional

from benchmarks.tasks import EVENTS, PROFILE
from npu_trace.pipeline.blocktimeline import LiveBlocks
from npu_trace.process import StopFlag
from npu_trace.sources.procs import TaskSnapshot
from npu_trace.sources.replay_source import ReplaySource
from npu_trace.sources.tracefs_source import TracefsSession
from tui.worker.feed import UpdateSink
from tui.worker.live_feed import LiveSource
from tui.worker.sources import BaseSource

TICK_S = 0.002
DETAIL = "bench:"


def detail_text(values: Dict[str, Any]) -> str:
    return DETAIL + " " + " ".join(f"{k}={v}" for k, v in values.items())


def parse_detail(text: str) -> Dict[str, float]:
    """The values of detail_text (the harness side)."""
    if not text.startswith(DETAIL):
        return {}
    pairs = (item.split("=", 1) for item in text[len(DETAIL) :].split())
    return {k: float(v) for k, v in pairs if v not in ("None", "")}


class _Counting:
    """The feed's sink, counting the items handed to it."""

    def __init__(self, sink: UpdateSink) -> None:
        self.sink = sink
        self.items = 0

    def __call__(self, items: List[Any], now: Optional[int] = None) -> None:
        self.items += len(items)
        self.sink(items, now)

    def restart(self) -> None:
        self.sink.restart()

    def end(self) -> None:
        self.sink.end()

    def announce(self, resource: Dict[str, str]) -> None:
        self.sink.announce(resource)

    def begin(self, tasks: TaskSnapshot) -> None:
        self.sink.begin(tasks)


class WorkloadSource(LiveSource):
    """The live source of `npu-trace live` on the workload's tracepoints (benchmarks.tasks.PROFILE); it starts
    the workload (`argv`, its output into the file `out`) once its session has read once, and ends when the
    workload has ended and the buffers are drained."""

    def __init__(self, argv: List[str], out: str, buffer_kb: int) -> None:
        session = TracefsSession(list(EVENTS), buffer_kb=buffer_kb, tag="benchtui", companions=())
        super().__init__(session, PROFILE, label="tasks")
        self.until = self._ended
        self.argv, self.out = argv, out
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.counting: Optional[_Counting] = None
        self.times: Dict[str, Any] = {"started": None, "ended": None, "done": None, "at_end": None}

    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        self.counting = _Counting(sink)
        try:
            super().run(self.counting, stop)
        finally:
            self.times["done"] = time.monotonic()
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def _ended(self) -> bool:
        if self.proc is None:
            self.times["started"] = time.monotonic()
            with open(self.out, "wb") as out:
                self.proc = subprocess.Popen(self.argv, stdout=out)
            return False
        if self.proc.poll() is None:
            return False
        if self.times["ended"] is None:
            self.times.update(ended=time.monotonic(), at_end=self.counting.items if self.counting else 0)
        return True

    def detail(self) -> str:
        return detail_text({**self.times, "items": self.counting.items if self.counting else 0})


class PacedReplay(BaseSource):
    """A recording's events decoded and handed to the feed at `rate` events/s at most (paced by the clock: a
    worker that cannot keep up falls behind the clock, it is never offered less), then, once the offering's time
    is over (`window` s), the rest as fast as the worker takes it, for `limit` s at most in all: like a live
    session whose workload has ended and whose buffers are drained."""

    label = "replay"

    def __init__(self, path: str, rate: float, window: float, limit: float) -> None:
        super().__init__()
        self.path, self.rate, self.window, self.limit = path, rate, window, limit
        self.sent = 0
        self.times: Dict[str, Any] = {"started": None, "ended": None, "at_end": None, "done": None}

    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        source = ReplaySource(self.path, PROFILE.layouts)
        blocks = LiveBlocks(source.block_timeline(), time.monotonic)
        timeline = blocks.timeline
        start = self.times["started"] = time.monotonic()
        for batch in source.batches():
            now = time.monotonic() - start
            if stop.stopped or now >= self.limit:
                break
            if now >= self.window and self.times["ended"] is None:
                self.times.update(ended=start + now, at_end=self.sent)
            before = timeline.events
            block = blocks.push(batch)
            if block is None:
                sink([])
            else:
                sink(block, timeline.now)
            self.sent += timeline.events - before
            while self.sent > self.rate * (time.monotonic() - start) and not stop.stopped:
                time.sleep(TICK_S)
        self.times["done"] = time.monotonic()
        if self.times["ended"] is None:
            self.times.update(ended=self.times["done"], at_end=self.sent)

    def detail(self) -> str:
        return detail_text({**self.times, "sent": self.sent})
