"""The flight recorder's ring: the newest raw batches of a live session, in memory, compressed, bounded.

A batch is what the live source read (raw ring-buffer pages, the other channels' events, the read's mark): the
ring keeps those a recording keeps (a quiet read's about every 100 ms, `npu_trace.sinks.batch_writer`) as they
came, so a dump writes exactly what `record` would have written for that window. They
are gathered in segments (about a second of reads, or 1 MiB of pages); a full segment is packed and compressed
with zstd, as a recording's chunks are. Two bounds hold the ring: `seconds` of reads (by the marks' trace-clock
times, never the wall clock) and `max_bytes` of memory (the compressed segments plus the one being filled);
the byte bound wins. The oldest segments go first, whole; everything evicted is counted (`RingStats`), and what
the byte bound took while it was younger than `seconds` is counted apart: the ring then holds less than asked.

Each segment may carry annotations the recorder gives it when it opens (`annotate`): the process names the
kernel saw since the previous one and the loss counters then, so that a dump names its processes and states
the losses of its own window. Names of evicted segments fold into a bounded base.

Pure: no I/O and no clock; time is the batches' marks.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import msgpack
import zstandard

from npu_trace.errors import RecordingError
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.recording.schema import decode_events, events_record, pack_mark, unpack_marks
from npu_trace.recording.writer import ZSTD_LEVEL
from npu_trace.sinks.batch_writer import keeps

SEGMENT_RAW = 1 << 20  # a segment is packed once its pages reach this many bytes
SEGMENT_NS = 1_000_000_000  # ... or once its reads span this much trace time
SEGMENT_OVERHEAD = 256  # bytes counted per segment beyond its data (its Python objects)
BATCH_OVERHEAD = 64  # bytes counted per batch of the segment being filled
MAX_BASE_COMMS = 32768  # process names kept for the evicted segments (least recently told go first)
LEVEL = ZSTD_LEVEL  # zstd level: the recordings' own
_LEN = struct.Struct("<I")  # a sealed segment's layout length, before the layout and the pages

Rows = List[List[Any]]  # LossLedger.rows() as lists


@dataclass
class RingStats:
    """What the ring let go: everything, and what the byte bound took before `seconds` were over."""

    segments: int = 0
    batches: int = 0
    pages: int = 0
    events: int = 0
    raw_bytes: int = 0
    bytes: int = 0  # their size in the ring
    early_segments: int = 0  # evicted by the byte bound while younger than `seconds`
    early_bytes: int = 0
    comms_forgotten: int = 0  # process names beyond MAX_BASE_COMMS

    def to_dict(self) -> Dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Segment:
    """About a second of batches: open (a list) while it fills, then packed and compressed (`blob`)."""

    first_ns: Optional[int] = None  # the first and last mark time of its batches
    last_ns: Optional[int] = None
    open: List[Tuple[List[Tuple[int, bytes]], bytes, Optional[Mark]]] = field(default_factory=list)
    blob: Optional[bytes] = None
    batches: int = 0
    pages: int = 0
    events: int = 0
    raw_bytes: int = 0
    size: int = SEGMENT_OVERHEAD
    comms: Dict[str, str] = field(default_factory=dict)  # names told since the previous segment
    ledger: Optional[Rows] = None  # the loss counters when it opened

    def batch_list(self) -> List[Batch]:
        """Its batches, as they came (unpacked from the blob once sealed)."""
        if self.blob is None:
            return [_batch(pages, events, mark) for pages, events, mark in self.open]
        return _unpack(self.blob)


class FlightRing:
    def __init__(
        self,
        seconds_ns: int,
        max_bytes: int,
        *,
        segment_raw: int = SEGMENT_RAW,
        segment_ns: int = SEGMENT_NS,
        level: int = LEVEL,
    ) -> None:
        if seconds_ns <= 0 or max_bytes <= 0:
            raise ValueError("a flight ring needs positive seconds and bytes")
        self.seconds_ns = seconds_ns
        self.max_bytes = max_bytes
        self.segment_raw = segment_raw
        self.segment_ns = segment_ns
        self.segments: Deque[Segment] = deque()
        self.held_bytes = 0  # the sealed segments' sizes (the open one: `current.size`)
        self.stats = RingStats()
        self.base_comms: OrderedDict[str, str] = OrderedDict()  # names of the evicted segments
        self.newest_ns: Optional[int] = None
        self._zstd = zstandard.ZstdCompressor(level=level)
        self._last_ns: Optional[int] = None
        self._kept_mark_ns = 0

    # ---- in ---------------------------------------------------------------------------------------------
    def add(self, batch: Batch) -> bool:
        """Keep one batch, if a recording would (`batch_writer.keeps`: a quiet read's only about every 100 ms);
        True when it opened a new segment (the caller may `annotate` it)."""
        if not keeps(batch, self._kept_mark_ns):
            return False
        if batch.mark is not None:
            self._kept_mark_ns = batch.mark.read_ns
        stamp = batch.mark.read_ns if batch.mark is not None else self._last_ns
        opened = self._room_for(stamp)
        seg = self.segments[-1]
        packed = _pack_events(batch.events)
        seg.open.append((list(batch.pages), packed, batch.mark))
        raw = sum(len(p) for _, p in batch.pages)
        seg.batches += 1
        seg.pages += len(batch.pages)
        seg.events += len(batch.events)
        seg.raw_bytes += raw
        seg.size += raw + len(packed) + BATCH_OVERHEAD
        if stamp is not None:
            seg.first_ns = stamp if seg.first_ns is None else seg.first_ns
            seg.last_ns = stamp
            self._last_ns = self.newest_ns = stamp
        self._evict()
        return opened

    def annotate(self, comms: Optional[Dict[str, str]] = None, ledger: Optional[Rows] = None) -> None:
        """Set the open segment's process names (told since the previous one) and loss counters."""
        seg = self.segments[-1]
        if comms:
            seg.comms.update(comms)
        if ledger is not None:
            seg.ledger = [list(r) for r in ledger]

    def _room_for(self, stamp: Optional[int]) -> bool:
        """Seal the open segment when it is full or spans segment_ns; True when a new one was opened."""
        seg = self.segments[-1] if self.segments else None
        full = seg is not None and (
            seg.raw_bytes >= self.segment_raw
            or (stamp is not None and seg.first_ns is not None and stamp - seg.first_ns >= self.segment_ns)
        )  # fmt: skip
        if seg is not None and not full:
            return False
        if seg is not None:
            self._seal(seg)
        self.segments.append(Segment())
        return True

    def _seal(self, seg: Segment) -> None:
        """Pack and compress the open segment: its layout (each batch's page count, events and mark; each page's
        CPU and length), then its pages, streamed through one compressor (no copy of the pages is made: a
        megabyte-sized temporary per second would fragment the heap until RSS grows with the data, not the
        ring, measured by benchmarks.flight)."""
        rows = [[len(pages), events, None if mark is None else pack_mark(0, mark)] for pages, events, mark in seg.open]
        cpus = [cpu for pages, _, _ in seg.open for cpu, _ in pages]
        lens = [len(page) for pages, _, _ in seg.open for _, page in pages]
        head = msgpack.packb([rows, cpus, lens], use_bin_type=True)
        z = self._zstd.compressobj()
        parts = [z.compress(_LEN.pack(len(head))), z.compress(head)]
        parts += [z.compress(page) for pages, _, _ in seg.open for _, page in pages]
        parts.append(z.flush())
        seg.blob = b"".join(parts)
        seg.open = []
        seg.size = SEGMENT_OVERHEAD + len(seg.blob)
        self.held_bytes += seg.size

    def _evict(self) -> None:
        """Drop the oldest sealed segments beyond either bound (the open one always stays)."""
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_old = self._too_old(oldest)
            too_big = self.bytes > self.max_bytes
            if not (too_old or too_big):
                return
            self.segments.popleft()
            self.held_bytes -= oldest.size
            self._count(oldest, early=too_big and not too_old)

    def _too_old(self, seg: Segment) -> bool:
        newest, last = self.newest_ns, seg.last_ns
        return newest is not None and last is not None and newest - last > self.seconds_ns

    def _count(self, seg: Segment, early: bool) -> None:
        s = self.stats
        s.segments += 1
        s.batches += seg.batches
        s.pages += seg.pages
        s.events += seg.events
        s.raw_bytes += seg.raw_bytes
        s.bytes += seg.size
        if early:
            s.early_segments += 1
            s.early_bytes += seg.size
        for pid, comm in seg.comms.items():
            self.base_comms[pid] = comm
            self.base_comms.move_to_end(pid)
        while len(self.base_comms) > MAX_BASE_COMMS:
            self.base_comms.popitem(last=False)
            s.comms_forgotten += 1

    # ---- out --------------------------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        """Memory the ring holds: the sealed segments and the one being filled."""
        return self.held_bytes + (self.segments[-1].size if self.segments and self.segments[-1].blob is None else 0)

    @property
    def oldest_ns(self) -> Optional[int]:
        for seg in self.segments:
            if seg.first_ns is not None:
                return seg.first_ns
        return None

    def held(self) -> Dict[str, Any]:
        """What the ring holds now: its bounds, its span (trace clock), its size, what it let go."""
        return {
            "seconds_ns": self.seconds_ns, "max_bytes": self.max_bytes, "bytes": self.bytes,
            "segments": len(self.segments), "oldest_ns": self.oldest_ns, "newest_ns": self.newest_ns,
            "evicted": self.stats.to_dict(),
        }  # fmt: skip

    def since(self, from_ns: int) -> Tuple[List[Segment], Dict[str, str], Optional[Rows]]:
        """The segments holding reads at or after `from_ns` (oldest first), the process names told before the
        first of them, and the loss counters when it opened."""
        chosen = [seg for seg in self.segments if seg.last_ns is None or seg.last_ns >= from_ns]
        first = chosen[0] if chosen else None
        comms: Dict[str, str] = dict(self.base_comms)
        for seg in self.segments:
            if seg is first:
                break
            comms.update(seg.comms)
        return chosen, comms, (first.ledger if first is not None else None)

    def batches_since(self, from_ns: int) -> Iterator[Tuple[Segment, Batch]]:
        """Every batch read at or after `from_ns`, with its segment (`window_batches` of `since`'s segments)."""
        return window_batches(self.since(from_ns)[0], from_ns)


def window_batches(segments: Sequence[Segment], from_ns: int) -> Iterator[Tuple[Segment, Batch]]:
    """The segments' batches read at or after `from_ns` (a batch without a mark goes with the one before it),
    each with its segment, oldest first."""
    taking = False
    for seg in segments:
        for batch in seg.batch_list():
            if batch.mark is not None:
                taking = batch.mark.read_ns >= from_ns
            if taking:
                yield seg, batch


# ---- packing ----------------------------------------------------------------------------------------------
def _pack_events(events: Sequence[Any]) -> bytes:
    return bytes(msgpack.packb(events_record(events)["rows"], use_bin_type=True)) if events else b""


def _batch(pages: List[Tuple[int, bytes]], packed: bytes, mark: Optional[Mark]) -> Batch:
    events = decode_events({"rows": msgpack.unpackb(packed, raw=False)}, 0) if packed else []
    return Batch(list(pages), events, mark)


def _unpack(blob: bytes) -> List[Batch]:
    try:
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(blob)
        (n,) = _LEN.unpack_from(raw)
        rows, cpus, lens = msgpack.unpackb(raw[_LEN.size : _LEN.size + n], raw=False)
    except (zstandard.ZstdError, ValueError, struct.error, msgpack.UnpackException) as exc:  # our own bytes: a bug
        raise RecordingError(f"flight ring: a segment does not unpack ({exc})") from None
    out, pos, page = [], _LEN.size + n, 0
    for n_pages, events, packed_mark in rows:
        pages = []
        for cpu, length in zip(cpus[page : page + n_pages], lens[page : page + n_pages]):
            pages.append((cpu, raw[pos : pos + length]))
            pos += length
        page += n_pages
        mark = unpack_marks([packed_mark], 0, "flight ring")[0][1] if packed_mark is not None else None
        out.append(_batch(pages, events, mark))
    return out
