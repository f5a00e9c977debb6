"""The replay source: a recording, paced by its own timestamps, with pause, speed and seek.

Seek forward reads on without waiting up to the target; seek back starts over from the beginning (a fresh
analysis, `sink.restart()`) and reads without waiting up to the target. Simple and always right.
Built and run in the worker process (`SourceSpec(ReplayFeedSource, (path, speed))`).
"""

from __future__ import annotations

import time
from typing import Any, List, Optional

from npu_trace.runner import StopFlag
from npu_trace.sources.replay_source import Pacer, ReplaySource
from tui.feed import Sink
from tui.sources import IDLE_S, BaseSource, sorted_batch, time_slices

SLICE_NS = 50_000_000  # pace by 50 ms of event time: the UI sees smooth updates, not one jump per chunk
NAP_S = 0.05  # longest sleep between checks of stop/pause/seek
SPEEDS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)


class ReplayFeedSource(BaseSource):
    label = "replay"

    def __init__(self, path: str, speed: Optional[float] = 1.0) -> None:
        super().__init__()
        self.path = path
        self.speed = speed  # None: as fast as possible
        self.replay = ReplaySource(path)  # opened here: a bad file fails before the UI starts
        self.ledger = self.replay.ledger
        self.paused = False
        self.first_ns: Optional[int] = None
        self.position_ns = 0
        self.finished = False
        self._seek_s = 0.0
        self._target: Optional[int] = None
        self._pacer = Pacer(speed)

    # ---- controls (the UI's requests, served between batches: flags only) ------------------------
    def set_paused(self, paused: bool) -> bool:
        self.paused = paused
        return True

    def set_speed(self, factor: float) -> Optional[float]:
        current = self.speed or SPEEDS[-1]
        self.speed = min(SPEEDS[-1], max(SPEEDS[0], current * factor))
        return self.speed

    def seek(self, delta_s: float) -> bool:
        self._seek_s += delta_s
        return True

    def comm(self, pid: int) -> str:
        return self.replay.comm(pid)

    def detail(self) -> str:
        pos = (self.position_ns - (self.first_ns or self.position_ns)) / 1e9
        speed = "max" if self.speed is None else f"{self.speed:g}x"
        state = "paused" if self.paused else "end of recording" if self.finished else "playing"
        if self._target is not None:
            state = "seeking"
        return f"{state} {speed} at {pos:.1f} s"

    # ---- worker --------------------------------------------------------------------------------
    def run(self, sink: Sink, stop: StopFlag) -> None:
        while not stop.stopped:
            back = self._play(sink, stop)
            if back is None:
                self.finished = True
                sink.end()
                back = self._idle(sink, stop)
            if back is None:
                return
            self._restart(sink, back)

    def _restart(self, sink: Sink, target: int) -> None:
        self.replay = ReplaySource(self.path)
        self.ledger = self.replay.ledger
        self.finished = False
        self._target = target
        self.position_ns = self.first_ns or 0
        sink.restart()

    def _idle(self, sink: Sink, stop: StopFlag) -> Optional[int]:
        """At the end: wait for a seek back (its target) or stop (None)."""
        while not stop.stopped:
            if self._seek_s < 0:
                return self._take_seek()
            self._seek_s = 0.0
            sink([])
            time.sleep(IDLE_S)
        return None

    def _play(self, sink: Sink, stop: StopFlag) -> Optional[int]:
        """Read to the end (None) or until a seek back (its target ts)."""
        for batch in self.replay.batches():
            for part in time_slices(sorted_batch(batch), SLICE_NS):
                if stop.stopped:
                    return None
                back = self._pace(part, sink, stop)
                if back is not None:
                    return back
                sink(part)
        return None

    def _pace(self, part: List[Any], sink: Sink, stop: StopFlag) -> Optional[int]:
        ts = next((int(x.ts_ns) for x in part if x.ts_ns), 0)
        if not ts:
            return None
        if self.first_ns is None:
            self.first_ns = ts
        self.position_ns = ts
        while not stop.stopped:
            if self._seek_s:
                target = self._take_seek()
                if target < ts:
                    return target
                self._target = target
            if self._target is not None and ts < self._target:
                return None  # fast forward: no waiting
            self._target = None
            if not self._wait(ts, sink):
                return None
        return None

    def _take_seek(self) -> int:
        delta, self._seek_s = self._seek_s, 0.0
        return max(self.first_ns or 0, self.position_ns + int(delta * 1e9))

    def _wait(self, ts: int, sink: Sink) -> bool:
        """Sleep (in naps, posting nothing new) until `ts` is due; True when something changed first."""
        if self.paused:
            self._pacer = Pacer(self.speed)
            sink([])
            time.sleep(IDLE_S)
            return True
        pacer = self._pacer
        if pacer.speed != self.speed:
            pacer = self._pacer = Pacer(self.speed)
        if pacer.speed is None or pacer.first_ts is None:
            pacer.wait_for(ts)
            return False
        delay = pacer.started + (ts - pacer.first_ts) / 1e9 / pacer.speed - time.monotonic()
        if delay <= 0:
            return False
        time.sleep(min(delay, NAP_S))
        sink([])
        return delay > NAP_S
