"""The reference page decoder: each CPU's pages decoded record by record into TraceEvents and Losses
(`PageDecoder`, `CpuDecoders`), by the rules of `npu_trace.ftrace.framing`, and a recording's items in file
order (`iter_events`). The page walkers (`npu_trace.ftrace.walk`: C and Python) are held equal to it, record
for record, loss for loss."""

from __future__ import annotations

import struct
import sys
from itertools import accumulate, repeat
from operator import and_, rshift
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from npu_trace.events import Loss, LossLedger, RawRecord, TraceEvent
from npu_trace.ftrace.decode import RecordDecoder, StructLayouts, TailDecoder
from npu_trace.ftrace.format import PageHeader
from npu_trace.ftrace.framing import (
    COMMIT_MASK,
    MISSED_EVENTS,
    MISSED_STORED,
    TS_MAX,
    TS_MSB,
    TS_SHIFT,
    TYPE_PADDING,
    TYPE_TIME_EXTEND,
    TYPE_TIME_STAMP,
    malformed_kind,
)
from npu_trace.recording.reader import RecordingReader, open_decoder
from npu_trace.recording.schema import event_losses

BULK_MIN_RUN = 8  # records: below this, the scalar loop is as fast
BULK_MIN_BYTES = 128  # bytes left in the page before a bulk run is tried
_TL_BYTES = [bytes([i]) for i in range(32)]


class PageDecoder:
    """Decodes whole ring-buffer pages of one CPU into TraceEvents; losses and malformed records are counted.

    Events whose type id is not in `decoders` (not selected, or not wanted by the consumer) are skipped and
    counted in `skipped`; runs of them are stepped over with C-level passes (their timestamps still count).
    With `keep_unknown`, they are RawRecords instead (their bytes; a fixed-size one cut at the commit).
    """

    def __init__(
        self,
        header: PageHeader,
        decoders: Mapping[int, RecordDecoder],
        cpu: int,
        byteorder: str = sys.byteorder,
        source: str = "tracefs",
        ledger: Optional[LossLedger] = None,
        keep_unknown: bool = False,
    ) -> None:
        self.header = header
        self.decoders = dict(decoders)
        self.keep_unknown = keep_unknown
        # event id -> (unpack_from of the fixed part, format, minimum payload size, decoder when fix-ups exist)
        self._fast = {
            eid: (d.struct.unpack_from, d.fmt, d.size, d if d.fixups or isinstance(d, TailDecoder) else None)
            for eid, d in self.decoders.items()
        }
        self._plain = self.decoders
        self._runs: Dict[Tuple[int, int, int], Tuple[struct.Struct, int]] = {}
        self.cpu = cpu
        self.source = source
        self.ledger = ledger if ledger is not None else LossLedger()
        self.byteorder = byteorder
        end = self._end = "<" if byteorder == "little" else ">"
        self._u32 = struct.Struct(end + "I").unpack_from
        self._u16 = struct.Struct(end + "H").unpack_from
        self._hdr = struct.Struct(end + "IH").unpack_from
        self._page = struct.Struct(end + "Q" + ("Q" if header.commit_size == 8 else "I")).unpack_from
        self.skipped = 0
        self.malformed = 0
        self.last_malformed = ""
        self.pages = 0
        self.last_ts = 0
        self.backwards = 0  # times a page or an absolute stamp went back before the previous record (rare)

    def decode(self, page: bytes, out: List[Any]) -> int:
        """Append this page's events (and Loss records) to `out`; returns the number of events appended."""
        h = self.header
        if len(page) < h.data_offset:
            # stamped where the stream stands: it stays in order
            self._malformed(out, self.last_ts, "short_page", "short page")
            return 0
        page_ts, commit = self._page(page, h.ts_offset)
        if page_ts < self.last_ts:
            self.backwards += 1
        self.pages += 1
        length = commit & COMMIT_MASK
        end = h.data_offset + length
        if end > len(page):
            self._malformed(out, page_ts, "commit_past_page", f"commit {length} beyond the page ({len(page)} bytes)")
            end = len(page)
        if commit & MISSED_EVENTS:
            missed = 0  # the kernel did not say how many (it stores the count only when there is room)
            word = h.commit_size  # the count is an unsigned long, the same width as local_t commit
            if commit & MISSED_STORED and end + word <= len(page):
                missed = int.from_bytes(page[end : end + word], "little" if self.byteorder == "little" else "big")
            self._loss(out, Loss(self.source, self.cpu, "page_missed", missed, page_ts))
        first, backwards = len(out), self.backwards
        n = self._records(page, h.data_offset, end, page_ts, out)
        if self.last_ts > TS_MAX or self.backwards != backwards:
            n -= self._past_the_range(out, first)
        return n

    def _past_the_range(self, out: List[Any], first: int) -> int:
        """Records stamped past 2**63 - 1 (only a corrupt page stamp or delta makes one: 292 years of
        nanoseconds) are malformed: each is dropped and counted, its loss stamped 2**63 - 1. Within a page,
        stamps only come back below it by an absolute stamp that goes back (counted in `backwards`), so the
        page's last stamp and that count tell whether to look."""
        dropped = 0
        for i in range(first, len(out)):
            item = out[i]
            if isinstance(item, TraceEvent) and item.ts_ns > TS_MAX:
                self.malformed += 1
                self.last_malformed = "a timestamp past 2**63 - 1"
                out[i] = Loss(self.source, self.cpu, malformed_kind("ts_overflow"), 1, TS_MAX)
                self.ledger.add(out[i])
                dropped += 1
        return dropped

    def _records(self, page: bytes, pos: int, end: int, ts: int, out: List[Any]) -> int:
        # The hot loop: locals only, one struct call per record on the common path (see module docstring).
        u32, hdr_of, fast, cpu = self._u32, self._hdr, self._fast, self.cpu
        new, append, get = tuple.__new__, out.append, fast.get
        n, prev = 0, -1  # prev: the last record's (type_len, event id) as one int; a run starts on a repeat
        while pos + 6 <= end:
            hdr, etype = hdr_of(page, pos)
            tl = hdr & 31
            if 0 < tl <= 28:
                ts += hdr >> 5
                size = tl << 2
                start = pos + 4
                pos = start + size
                entry = get(etype)
                if entry is None and self.keep_unknown:
                    n += self._raw(page, start, min(pos, end), ts, etype, out)
                    continue
                if entry is None:
                    self.skipped += 1
                    same, prev = prev == (etype << 5 | tl), etype << 5 | tl
                    if same and end - pos >= BULK_MIN_BYTES and self._run_ahead(page, pos, end, size + 4, tl, etype):
                        pos, ts, count = self._skip_run(page, pos, end, ts, tl, etype)
                        self.skipped += count
                    continue
                unpack, fmt, need, dec = entry
                if dec is None and size >= need and pos <= end:
                    same, prev = prev == (etype << 5 | tl), etype << 5 | tl
                    if same and end - pos >= BULK_MIN_BYTES and self._run_ahead(page, pos, end, size + 4, tl, etype):
                        done = self._bulk(page, start - 4, end, ts - (hdr >> 5), tl, etype, out)
                        if done is not None:
                            pos, ts, count = done
                            n += count
                            continue
                    vals = unpack(page, start + 4)
                    append(new(TraceEvent, (ts, cpu, vals[0], fmt, vals[1:])))
                    n += 1
                    continue
            elif tl == 0:
                if pos + 8 > end:
                    break
                ts += hdr >> 5
                size = u32(page, pos + 4)[0] - 4
                start = pos + 8
                pos = start + size
                etype = self._u16(page, start)[0] if size >= 2 and pos <= end else -1  # in the page's byte order
                entry = get(etype) if etype >= 0 else None
                if entry is None:
                    if size < 8 or pos > end:
                        why = "bad_length" if size < 8 else "record_past_commit"
                        self._malformed(out, ts, why, f"record length {size} at offset {start - 8}")
                        break
                    if self.keep_unknown:
                        n += self._raw(page, start, pos, ts, etype, out)
                        continue
                    self.skipped += 1
                    continue
                unpack, fmt, need, dec = entry
            elif pos + 8 > end:  # every remaining kind carries a second word
                if not (tl == TYPE_PADDING and hdr >> 5 == 0):
                    self._malformed(out, ts, "cut_header", f"record of type {tl} cut at offset {pos}")
                break
            elif tl == TYPE_TIME_EXTEND:
                ts += (u32(page, pos + 4)[0] << TS_SHIFT) | (hdr >> 5)
                pos += 8
                continue
            elif tl == TYPE_TIME_STAMP:
                before, ts = ts, self._abs_ts((u32(page, pos + 4)[0] << TS_SHIFT) | (hdr >> 5), ts)
                self.backwards += ts < before
                pos += 8
                continue
            else:  # padding: delta 0 ends the page, otherwise a discarded record of array[0] bytes
                if hdr >> 5 == 0:
                    break
                pos += 4 + u32(page, pos + 4)[0]
                continue
            if pos > end or size < need:
                why = "record_past_commit" if pos > end else "short_record"
                self._malformed(out, ts, why, f"{fmt.full_name}: record of {size} bytes, need {need}")
                if pos > end:
                    break
                continue
            try:
                pid, vals = (dec or self._plain[etype]).decode(page, start, size)
            except (struct.error, ValueError, UnicodeError):
                self._malformed(out, ts, "dynamic_outside", f"{fmt.full_name} record undecodable")
                continue
            append(new(TraceEvent, (ts, cpu, pid, fmt, vals)))
            n += 1
        self.last_ts = ts
        return n

    def _raw(self, page: bytes, start: int, end: int, ts: int, etype: int, out: List[Any]) -> int:
        """A record of an event no decoder describes, as its bytes (1); malformed when stamped past the range."""
        if ts > TS_MAX:
            self._malformed(out, TS_MAX, "ts_overflow", "a timestamp past 2**63 - 1")
            return 0
        payload = bytes(page[start:end])
        order = "little" if self.byteorder == "little" else "big"
        pid = int.from_bytes(payload[4:8], order, signed=True) if len(payload) >= 8 else -1
        out.append(RawRecord(ts, self.cpu, pid, etype, payload))
        return 1

    def _run_ahead(self, page: bytes, pos: int, end: int, stride: int, tl: int, etype: int) -> bool:
        """Do the next two records have this record's length and event id? Only then is a bulk run worth its
        one big unpack (in a mixed stream, trying at every record would cost a page-sized unpack each time)."""
        for nxt in (pos, pos + stride):
            if nxt + 6 > end:
                return False
            hdr, other = self._hdr(page, nxt)
            if hdr & 31 != tl or other != etype:
                return False
        return True

    def _bulk(
        self, page: bytes, pos: int, end: int, ts: int, tl: int, etype: int, out: List[Any]
    ) -> Optional[Tuple[int, int, int]]:
        """Decode a run of same-type, same-length records starting at `pos` with C-level passes only.

        One struct call unpacks as many records as fit; the run is cut at the first record whose type_len or
        event id differs (padding, time extends and other events go back to the scalar loop). Returns
        (next position, timestamp of the last record, records decoded), or None when the run is too short.
        """
        stride = 4 + (tl << 2)
        count = (end - pos) // stride
        st, width = self._run_struct(etype, tl, count)
        flat = st.unpack_from(page, pos)
        hdrs = flat[0::width]
        lens = bytes(map(and_, hdrs, repeat(31, count)))
        run = count - len(lens.lstrip(_TL_BYTES[tl]))
        types = flat[1::width][:run]
        if types.count(etype) != run:
            run = next(i for i, t in enumerate(types) if t != etype)
        if run < BULK_MIN_RUN:
            return None
        times = list(accumulate(map(rshift, hdrs[:run], repeat(5, run)), initial=ts))
        del times[0]
        fmt = self.decoders[etype].fmt
        nfields = width - 3
        values = zip(*[flat[3 + i :: width][:run] for i in range(nfields)]) if nfields else repeat((), run)
        rows = zip(times, repeat(self.cpu, run), flat[2::width][:run], repeat(fmt, run), values)
        out.extend(map(tuple.__new__, repeat(TraceEvent, run), rows))
        return pos + run * stride, times[-1], run

    def _skip_run(self, page: bytes, pos: int, end: int, ts: int, tl: int, etype: int) -> Tuple[int, int, int]:
        """Step over a run of same-type, same-length records of an event not decoded (not in `decoders`),
        starting at `pos`, with C-level passes over their headers only: (next position, timestamp of the last
        record stepped over, records stepped over). The run is cut as in `_bulk`."""
        stride = 4 + (tl << 2)
        count = (end - pos) // stride
        key = (-1 - etype, tl, count)
        hit = self._runs.get(key)
        if hit is None:
            hit = self._runs[key] = (struct.Struct(self._end + f"IH{stride - 6}x" * count), 2)
        flat = hit[0].unpack_from(page, pos)
        hdrs = flat[0::2]
        lens = bytes(map(and_, hdrs, repeat(31, count)))
        run = count - len(lens.lstrip(_TL_BYTES[tl]))
        types = flat[1::2][:run]
        if types.count(etype) != run:
            run = next(i for i, t in enumerate(types) if t != etype)
        return pos + run * stride, ts + sum(map(rshift, hdrs[:run], repeat(5, run))), run

    def _run_struct(self, etype: int, tl: int, count: int) -> Tuple[struct.Struct, int]:
        key = (etype, tl, count)
        hit = self._runs.get(key)
        if hit is None:
            dec = self.decoders[etype]
            pid_offset = dec.fmt.field("common_pid").offset
            body = dec.struct.format.lstrip("<>=!@")
            record = f"IH{pid_offset - 2}x{body}{(tl << 2) - dec.size}x"
            hit = self._runs[key] = (struct.Struct(self._end + record * count), 3 + len(dec.fmt.fields))
        return hit

    @staticmethod
    def _abs_ts(abs_ts: int, prev: int) -> int:
        if prev & TS_MSB:
            abs_ts |= prev & TS_MSB
            if abs_ts < prev:
                abs_ts += 1 << 59
        return abs_ts

    def _malformed(self, out: List[Any], ts: int, reason: str, why: str) -> None:
        self.malformed += 1
        self.last_malformed = why
        self._loss(out, Loss(self.source, self.cpu, malformed_kind(reason), 1, ts))

    def _loss(self, out: List[Any], loss: Loss) -> None:
        if loss.ts_ns > TS_MAX:  # a corrupt page stamp: the loss is stamped where every stamp must stay
            loss = loss._replace(ts_ns=TS_MAX)
        self.ledger.add(loss)
        out.append(loss)


class CpuDecoders:
    """One PageDecoder per CPU, made on first use: (cpu, page) pairs in, events and losses out.

    Each CPU's pages must go through its own decoder (timestamps are per-CPU deltas), live and in replay."""

    def __init__(
        self,
        header: PageHeader,
        decoders: Mapping[int, RecordDecoder],
        byteorder: str = sys.byteorder,
        ledger: Optional[LossLedger] = None,
        keep_unknown: bool = False,
    ) -> None:
        self.header = header
        self.decoders = decoders
        self.byteorder = byteorder
        self.ledger = ledger if ledger is not None else LossLedger()
        self.keep_unknown = keep_unknown
        self.by_cpu: Dict[int, PageDecoder] = {}

    def decode(self, pages: Iterable[Tuple[int, bytes]], out: List[Any]) -> int:
        """Append the pages' events (and Loss records) to `out`; returns the number of events."""
        n = 0
        for cpu, page in pages:
            n += self.decoder(cpu).decode(page, out)
        return n

    def decoder(self, cpu: int) -> PageDecoder:
        """CPU `cpu`'s page decoder (made on first use)."""
        dec = self.by_cpu.get(cpu)
        if dec is None:
            dec = self.by_cpu[cpu] = PageDecoder(self.header, self.decoders, cpu, self.byteorder, ledger=self.ledger,
                                                 keep_unknown=self.keep_unknown)  # fmt: skip
        return dec

    @property
    def malformed(self) -> int:
        return sum(d.malformed for d in self.by_cpu.values())

    @property
    def skipped(self) -> int:
        return sum(d.skipped for d in self.by_cpu.values())


def iter_events(
    reader: RecordingReader, layouts: Optional[StructLayouts] = None, ledger: Optional[LossLedger] = None
) -> Iterator[Any]:
    """TraceEvents, Loss items and the other channels' NpuEvents in file order, each CPU's pages decoded by its
    own PageDecoder (as live)."""
    page_header, table = open_decoder(reader, layouts)
    decoders = CpuDecoders(page_header, table, reader.byteorder, ledger)
    out: List[Any] = []
    for kind, item in reader.records():
        if kind == "loss":
            decoders.ledger.add(item)
            yield item
        elif kind == "chunk":
            decoders.decode(item.pages, out)
            yield from out
            out.clear()
        elif kind == "events":
            for loss in event_losses(item):
                decoders.ledger.add(loss)
            yield from item
