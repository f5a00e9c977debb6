"""The replay source: a recording's pages decoded exactly as the live source decodes them.

Batches come one chunk at a time, in the order the pages were read live (so analysis sees the same sequence
live and in replay). Pacing (real time, N x, or as fast as possible) follows the events' own timestamps.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

from npu_trace.events import Loss, LossLedger, TraceEvent
from npu_trace.ftrace.decode import CpuDecoders, StructLayouts
from npu_trace.profiles import PROFILES
from npu_trace.recording.format import event_losses
from npu_trace.recording.reader import RecordingReader, open_decoder


class ReplaySource:
    def __init__(self, path: str, layouts: Optional[StructLayouts] = None) -> None:
        self.reader = RecordingReader(path)
        profile = PROFILES.get(str(self.reader.header.get("profile", "")))
        self.layouts = layouts if layouts is not None or profile is None else profile.layouts
        self.ledger = LossLedger()
        self.comms: Dict[int, str] = dict(_comms(self.reader.header.get("extra", {})))
        self.events_read = 0
        self.events_skipped = 0  # events read but not decoded (batches(only=...))
        self.channel_events_read = 0  # NpuEvents of the other channels (kmsg, uevents, npu-smi)
        self.pages_read = 0

    @property
    def header(self) -> Dict[str, Any]:
        return self.reader.header

    def batches(self, only: Optional[Set[str]] = None) -> Iterator[List[Any]]:
        """Lists of TraceEvent and Loss items, one per chunk (and one per loss record), in file order; the other
        channels' events come as lists of NpuEvents (one per "ev" record), never mixed with the others.

        `only`: decode just these events ("system:name"); the others are counted in `events_skipped` (and in
        `events_read`) without being decoded, as a consumer that ignores them (check's analysis) wants."""
        page_header, table = open_decoder(self.reader, self.layouts)
        if only is not None:
            table = {eid: dec for eid, dec in table.items() if dec.fmt.full_name in only}
        decoders = CpuDecoders(page_header, table, self.reader.byteorder, self.ledger)
        for kind, item in self.reader.records():
            if kind == "chunk":
                out: List[Any] = []
                before = decoders.skipped
                self.events_read += decoders.decode(item.pages, out)
                skipped = decoders.skipped - before
                self.events_skipped += skipped
                self.events_read += skipped
                self.pages_read += len(item.pages)
                yield out
            elif kind == "loss":
                self.ledger.add(item)
                yield [item]
            elif kind == "events":  # the other channels' events (kmsg, uevents, npu-smi), normalized
                for loss in event_losses(item):
                    self.ledger.add(loss)
                self.channel_events_read += len(item)
                yield item
            elif kind == "note":
                self.comms.update(_comms(item))

    def reader_position(self) -> int:
        """Bytes of the file consumed so far (approximate: chunks read x average), for progress displays."""
        return self.reader.position()

    def comm(self, pid: int) -> str:
        return "<idle>" if pid == 0 else self.comms.get(pid, "<...>")


def _comms(mapping: Any) -> Dict[int, str]:
    comms = mapping.get("comms") if isinstance(mapping, dict) else None
    if not isinstance(comms, dict):
        return {}
    return {int(k): str(v) for k, v in comms.items() if str(k).isdigit() and isinstance(v, str)}


class Pacer:
    """Sleeps so that events come out at `speed` x the rate they were recorded (speed None: no waiting)."""

    def __init__(self, speed: Optional[float], clock: Callable[[], float] = time.monotonic) -> None:
        self.speed = speed
        self.clock = clock
        self.first_ts: Optional[int] = None
        self.started = 0.0

    def wait_for(self, ts_ns: int) -> None:
        if self.speed is None:
            return
        if self.first_ts is None:
            self.first_ts, self.started = ts_ns, self.clock()
            return
        due = self.started + (ts_ns - self.first_ts) / 1e9 / self.speed
        delay = due - self.clock()
        if delay > 0:
            time.sleep(delay)


def first_event_ts(batch: List[Any]) -> Optional[int]:
    for item in batch:
        if isinstance(item, TraceEvent) or (isinstance(item, Loss) and item.ts_ns):
            return int(item.ts_ns)
    return None
