"""The replay source: a recording read back as the batches the live pipeline received, for the same timeline.

A recording keeps the raw pages in the order they were read, each read's mark (which CPUs were caught up, the
channels' watermark) and the other channels' events before the pages they preceded. `batches()` rebuilds the
live batches from them (`parts()`: the same with each chunk whole), so the timeline (`block_timeline()`) walks
and orders exactly as it did live, and the analysis finds what the live session found. As a pump `Source`,
`read()` hands over one batch at a time, paced (real time, N x, or as fast as possible) by the reads' own
times, without ever blocking (an empty batch while the next is not due), so a consumer answers its UI
meanwhile; pause, speed and fast-forward are controls of this pace (the TUI's replay).

Recordings written before marks existed have none: their timeline orders by the bounds alone (count, lag).
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

from npu_trace.device.profiles import PROFILES
from npu_trace.events import Loss, LossLedger
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.decode import RecordDecoder, StructLayouts
from npu_trace.ftrace.format import PageHeader
from npu_trace.pipeline.batch import Batch, empty_batch
from npu_trace.pipeline.blocktimeline import BlockTimeline, chunk_batches
from npu_trace.pipeline.scope import Scope, ScopeFilter
from npu_trace.recording.reader import RecordingReader, open_decoder
from npu_trace.recording.schema import Chunk, event_losses
from npu_trace.sources.procs import snapshot_from_header


class ReplaySource:
    def __init__(
        self,
        path: str,
        layouts: Optional[StructLayouts] = None,
        *,
        only: Optional[Set[str]] = None,
        speed: Optional[float] = None,
    ) -> None:
        self.reader = RecordingReader(path)
        profile = PROFILES.get(str(self.reader.header.get("profile", "")))
        self.layouts = layouts if layouts is not None or profile is None else profile.layouts
        self.only = only  # decode just these events ("system:name"); the others are counted, not decoded
        self.ledger = LossLedger()
        self.comms: Dict[int, str] = dict(_comms(self.reader.header.get("extra", {})))
        # the tasks when tracing began: thread -> its process, and the processes (None: an older recording's)
        self.tasks, self.processes = snapshot_from_header(self.reader.header.get("extra"))
        self.scope = Scope.from_header(self.reader.header.get("scope"))  # what was traced (a bad entry: InputError)
        self.channel_events_read = 0  # NpuEvents of the other channels (kmsg, uevents, npu-smi)
        self.pages_read = 0
        self.pacer = Pacer(speed)
        self.paused = False
        self.first_ns: Optional[int] = None  # the first batch's time
        self.position_ns = 0  # the time of the last batch handed over
        self.target_ns: Optional[int] = None  # fast forward up to this time
        self._timeline: Optional[BlockTimeline] = None
        self._batches: Optional[Iterator[Batch]] = None
        self._next: Optional[Batch] = None
        self._waiting = False
        self._done = False

    @property
    def header(self) -> Dict[str, Any]:
        return self.reader.header

    def block_timeline(self, keep_unknown: bool = False) -> BlockTimeline:
        """The timeline that walks this recording's pages (with its own formats) and orders them, as Blocks
        (made once; `keep_unknown`: see BlockTimeline)."""
        if self._timeline is None:
            page_header, table = self.decoder_table()
            columns = plans([dec.fmt for dec in table.values()], self.reader.byteorder, self.layouts)
            self._timeline = BlockTimeline(page_header, table, columns, byteorder=self.reader.byteorder,
                                           ledger=self.ledger, cpus=self.trace_cpus(),
                                           channels=self.had_channels(), keep_unknown=keep_unknown)  # fmt: skip
        return self._timeline

    def decoder_table(self) -> Tuple[PageHeader, Dict[int, RecordDecoder]]:
        page_header, table = open_decoder(self.reader, self.layouts)
        if self.only is not None:
            table = {eid: dec for eid, dec in table.items() if dec.fmt.full_name in self.only}
        return page_header, table

    def trace_cpus(self) -> List[int]:
        cpus = self.header.get("trace_cpus")
        return [c for c in cpus if isinstance(c, int)] if isinstance(cpus, list) else []

    @property
    def window(self) -> Optional[Dict[str, Any]]:
        """A flight recorder's dump is a window of a longer session: its header's `window` (what triggered it,
        where it starts) with, once the trailer was read, the trailer's (where it ends, why); None otherwise."""
        entry = self.header.get("window")
        if not isinstance(entry, dict):
            return None
        trailer = self.reader.trailer
        totals = trailer.get("totals") if isinstance(trailer, dict) else None
        end = totals.get("window") if isinstance(totals, dict) else None
        return {**entry, **end} if isinstance(end, dict) else dict(entry)

    def had_channels(self) -> bool:
        """The header says other channels ran beside ftrace (kmsg, uevents, npu-smi, BPF)."""
        extra = self.header.get("extra")
        channels = extra.get("channels") if isinstance(extra, dict) else None
        return isinstance(channels, dict) and bool(channels.get("running"))

    @property
    def events_read(self) -> int:
        """Trace records read: walked by the timeline, or stepped over (not in `only`)."""
        if self._timeline is None:
            return 0
        return self._timeline.events + self.events_skipped

    @property
    def events_released(self) -> int:
        """Trace records read and released in time order: read, less those dropped as late (counted lost: a stamp
        behind what was already released, as a damaged page's can be)."""
        if self._timeline is None:
            return 0
        late = sum(n for (source, _), n in self._timeline.late.items() if source == "tracefs")
        return self.events_read - late

    @property
    def events_skipped(self) -> int:
        return self._timeline.skipped if self._timeline is not None else 0

    def batches(self) -> Iterator[Batch]:
        """The live batches, rebuilt in file order: a chunk's pages cut at its marks, the channels' events,
        the loss records (untimed); then a final batch."""
        for part in self.parts():
            if isinstance(part, Batch):
                yield part
            else:
                yield from chunk_batches(part)

    def parts(self) -> Iterator[Union[Batch, Chunk]]:
        """batches(), with each chunk whole (its reads cut by BlockTimeline.add_chunk, pages walked in place)."""
        for kind, item in self.reader.records():
            if kind == "chunk":
                self.pages_read += len(item.pages)
                yield item
            elif kind == "loss":
                self.ledger.add(item)
                yield Batch([], [item])
            elif kind == "events":  # the other channels' events (kmsg, uevents, npu-smi), normalized
                for loss in event_losses(item):
                    self.ledger.add(loss)
                self.channel_events_read += len(item)
                yield Batch([], item)
            elif kind == "note":
                self.comms.update(_comms(item))
        yield Batch([], [], None, final=True)

    # ---- the pump's side: paced, never blocking -----------------------------------------------------------
    def read(self) -> Batch:
        """The next batch once it is due (the recorded pace x speed); an empty batch while it is not (or while
        paused): the pump then waits a poll interval (`idle`)."""
        self._waiting = self.paused
        if self.paused:
            return empty_batch()
        if self._next is None:
            if self._batches is None:
                self._batches = self.batches()
            self._next = next(self._batches, None) or Batch([], [], None, final=True)
        batch = self._next
        stamp = None if batch.final else batch_time(batch, self.reader.byteorder)
        if stamp is not None and not self._due(stamp):
            self._waiting = True
            return empty_batch()
        self._next = None
        self._done = batch.final
        return batch

    def _due(self, stamp: int) -> bool:
        if self.first_ns is None:
            self.first_ns = stamp
        if self.target_ns is not None and stamp < self.target_ns:  # seeking forward: no waiting
            self.position_ns = stamp
            return True
        self.target_ns = None
        if self.pacer.due_in(stamp) > 0:
            return False
        self.position_ns = stamp
        return True

    def idle(self) -> bool:
        return self._waiting

    def done(self) -> bool:
        return self._done

    def finish(self) -> Batch:
        """The final batch (the rest of the recording is not read), unless read() handed it over already."""
        if self._done:
            return empty_batch()
        self._done = True
        return Batch([], [], None, final=True)

    # ---- pace controls (the TUI's replay) ---------------------------------------------------------------
    def set_paused(self, paused: bool) -> None:
        if self.paused and not paused:
            self.pacer = Pacer(self.pacer.speed)  # resume at the recorded pace from where it stopped
        self.paused = paused

    def set_speed(self, speed: Optional[float]) -> None:
        self.pacer = Pacer(speed)

    def fast_forward(self, to_ns: int) -> None:
        """Read without waiting until the batches reach `to_ns`, then at the pace again."""
        self.target_ns = to_ns
        self.pacer = Pacer(self.pacer.speed)

    def reader_position(self) -> int:
        """Bytes of the file consumed so far (approximate: chunks read x average), for progress displays."""
        return self.reader.position()

    def comm(self, pid: int) -> str:
        return "<idle>" if pid == 0 else self.comms.get(pid, "<...>")

    def scope_filter(self) -> ScopeFilter:
        """The pipeline's part of the recording's scope, as the live session applied it (the task names from
        the recording's process names)."""
        return ScopeFilter(self.scope, self.comm)


def _comms(mapping: Any) -> Dict[int, str]:
    comms = mapping.get("comms") if isinstance(mapping, dict) else None
    if not isinstance(comms, dict):
        return {}
    # a pid's decimal digits, ASCII ones only ("²" is a digit to str.isdigit, not to int)
    return {int(k): v for k, v in comms.items() if re.fullmatch(r"[0-9]{1,10}", str(k)) and isinstance(v, str)}


class Pacer:
    """Sleeps so that events come out at `speed` x the rate they were recorded (speed None: no waiting)."""

    def __init__(self, speed: Optional[float], clock: Callable[[], float] = time.monotonic) -> None:
        self.speed = speed
        self.clock = clock
        self.first_ts: Optional[int] = None
        self.started = 0.0

    def due_in(self, ts_ns: int) -> float:
        """Seconds until `ts_ns` is due (the first time asked sets the origin)."""
        if self.speed is None:
            return 0.0
        if self.first_ts is None:
            self.first_ts, self.started = ts_ns, self.clock()
            return 0.0
        return self.started + (ts_ns - self.first_ts) / 1e9 / self.speed - self.clock()


def batch_time(batch: Batch, byteorder: str = "little") -> Optional[int]:
    """When the batch was read live: its mark's read time, else its first page's or event's time."""
    if batch.mark is not None:
        return batch.mark.read_ns
    if batch.pages:
        return int.from_bytes(batch.pages[0][1][:8], byteorder) or None  # type: ignore[arg-type]
    for item in batch.events:
        if not isinstance(item, Loss) or item.ts_ns:
            return int(item.ts_ns) or None
    return None
