"""The replay source: a recording, paced by its own timestamps, with pause, speed and seek.

The pace itself (real time, N x, as fast as possible, pause, fast forward) is the recording's source's
(`npu_trace.sources.replay_source.ReplaySource`), run by the one pump; this adds the seek back: it starts over
from the beginning (a fresh analysis, `sink.restart()`) and fast-forwards to the target. Simple and always
right. Built and run in the worker process (`SourceSpec(ReplayFeedSource, (path, speed))`).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

from npu_trace.pipeline import Batch, empty_batch, pump
from npu_trace.pipeline.blocktimeline import LiveBlocks
from npu_trace.process import StopFlag
from npu_trace.sources.procs import TaskSnapshot
from npu_trace.sources.replay_source import ReplaySource
from tui.worker.feed import UpdateSink
from tui.worker.sources import IDLE_S, BaseSource

SPEEDS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)


class ReplayFeedSource(BaseSource):
    label = "replay"

    def __init__(self, path: str, speed: Optional[float] = 1.0) -> None:
        super().__init__()
        self.path = path
        self.speed = speed  # None: as fast as possible
        self.replay = ReplaySource(path, speed=speed)  # opened here: a bad file fails before the UI starts
        self.scope_filter = self.replay.scope_filter()  # the analysis applies the recording's scope as live did
        self.ledger = self.replay.ledger
        self.finished = False
        self._seek_s = 0.0
        self._back: Optional[int] = None  # a seek back to this time: start over

    # ---- controls (the UI's requests, served between batches: flags only) ------------------------
    def set_paused(self, paused: bool) -> bool:
        self.replay.set_paused(paused)
        return True

    def set_speed(self, factor: float) -> Optional[float]:
        """The pace times `factor`, within SPEEDS: past the fastest, as fast as it reads (returned as inf); a
        step never goes the other way (+ at max slowed it to 64x; - at --speed 0.001 sped it up to 0.125x)."""
        current: Optional[float] = self.speed
        if current is None:  # as fast as it reads
            if factor >= 1:
                return math.inf
            current = SPEEDS[-1] / factor  # one step slower: the fastest pace
        new: Optional[float] = current * factor
        if factor > 1 and current * factor > SPEEDS[-1]:
            new = None if current >= SPEEDS[-1] else SPEEDS[-1]
        elif factor < 1 and current * factor < SPEEDS[0]:
            new = min(current, SPEEDS[0])
        self.speed = new
        self.replay.set_speed(new)
        return math.inf if new is None else new

    def seek(self, delta_s: float) -> bool:
        self._seek_s += delta_s
        return True

    def comm(self, pid: int) -> str:
        return self.replay.comm(pid)

    def detail(self) -> str:
        replay = self.replay
        pos = (replay.position_ns - (replay.first_ns or replay.position_ns)) / 1e9
        speed = "max" if self.speed is None else f"{self.speed:g}x"
        state = "paused" if replay.paused else "end of recording" if self.finished else "playing"
        if replay.target_ns is not None:
            state = "seeking"
        cut = ", the file is cut (its end is missing)" if replay.reader.truncated else ""  # as replay's summary says
        return f"{state} {speed} at {pos:.1f} s{cut}"

    # ---- worker --------------------------------------------------------------------------------
    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        while not stop.stopped:
            sink.begin(TaskSnapshot(self.replay.tasks, self.replay.processes))
            pump(self, _through(LiveBlocks(self.replay.block_timeline(), time.monotonic), sink), stop=stop,
                 poll_s=IDLE_S)  # fmt: skip
            if self._back is None:
                if stop.stopped:
                    return
                self.finished = True
                sink.end()
                self._back = self._idle(sink, stop)
                if self._back is None:
                    return
            self._restart(sink, self._back)

    def _restart(self, sink: UpdateSink, target: int) -> None:
        paused = self.replay.paused
        self.replay = ReplaySource(self.path, speed=self.speed)
        self.replay.set_paused(paused)
        self.replay.fast_forward(target)
        self.ledger = self.replay.ledger
        self.finished = False
        self._back = None
        sink.restart()

    def _idle(self, sink: UpdateSink, stop: StopFlag) -> Optional[int]:
        """At the end: wait for a seek back (its target) or stop (None)."""
        while not stop.stopped:
            if self._seek_s < 0:
                return self._take_seek()
            self._seek_s = 0.0
            sink([])
            time.sleep(IDLE_S)
        return None

    def _take_seek(self) -> int:
        delta, self._seek_s = self._seek_s, 0.0
        replay = self.replay
        return max(replay.first_ns or 0, replay.position_ns + int(delta * 1e9))

    # ---- the pump's side: the recording's pace, and seeks -----------------------------------------
    def read(self) -> Batch:
        if self._seek_s:
            target = self._take_seek()
            if target < self.replay.position_ns:
                self._back = target
                return empty_batch()
            self.replay.fast_forward(target)
        return self.replay.read()

    def idle(self) -> bool:
        return self.replay.idle()

    def done(self) -> bool:
        return self._back is not None or self.replay.done()

    def finish(self) -> Batch:
        return empty_batch() if self._back is not None else self.replay.finish()


def _through(blocks: LiveBlocks, sink: UpdateSink) -> Callable[[Batch], None]:
    """A pump sink: each batch through the (columnar) timeline, taken as a live consumer takes it (a block
    and its watermark to the feed), the UI's requests served in between."""

    def take(batch: Batch) -> None:
        block = blocks.push(batch)
        if block is None:
            sink([])
        else:
            sink(block, blocks.timeline.now)

    return take
