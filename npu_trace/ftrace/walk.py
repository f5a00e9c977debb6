"""The page walker: one CPU's ring-buffer pages in, one column per record property out (numpy): how every
consumer reads pages.

The walk does not decode: for each event record, in record order, it gives its timestamp, its event id and
where its payload (from common_type on) lies in the caller's buffer. A block then takes the fixed part of one
event type's records at once (`gather`) and views it as a numpy structured array
(`npu_trace.ftrace.columns`); `RecordDecoder.decode(buf, offset, length)` decodes one record exactly.

The rules are the page framing of `npu_trace.ftrace.framing` (time deltas, time extends, absolute stamps with
the MSB rule, padding, long records, a commit beyond the page, short pages, the missed-events flags,
`backwards`), and so are the reasons a page or record is malformed: each is a Loss of kind
"malformed:<reason>" at its place. Which records are decodable is judged by `wanted`: it maps each event id
to a `Want` (its decoder's minimum payload size and where its dynamic fields' locators are:
`wants(decoders)`); records of other ids are skipped and counted, or, with `keep_unknown` (a consumer that
shows every record: the ids no format describes), handed on as rows of their raw bytes (judged as records not
wanted are: the framing's rules stay one; a fixed-size one running past the commit is cut there; one stamped
past 2**63 - 1 is malformed, as a decoded one is).

Timestamps are exact (Python integers) in `WalkState.last_ts` and in the losses. `Walk.ts` holds them as
int64: a record stamped past 2**63 - 1 (only a corrupt page makes one) is malformed ("ts_overflow"): dropped,
counted, its loss stamped 2**63 - 1 (as every loss past it).

Two implementations, identical in every result: the C extension `npu_trace.ftrace._walk` (a whole batch per
call, built by the package's install where a compiler is) and `walk_py` / `gather_py` in pure Python.
`walk` and `gather` are the C ones when the extension imports; `IMPLEMENTATION` says which ("c" or "python").
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any, Callable, Dict, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from npu_trace.events import Loss
from npu_trace.ftrace.decode import RecordDecoder
from npu_trace.ftrace.format import DATA_LOC, REL_LOC, PageHeader
from npu_trace.ftrace.framing import (
    COMMIT_MASK,
    MALFORMED,
    MISSED_EVENTS,
    MISSED_STORED,
    TS_MAX,
    TS_SHIFT,
    TYPE_PADDING,
    TYPE_TIME_EXTEND,
    TYPE_TIME_STAMP,
    abs_ts,
    malformed_kind,
)

try:
    from npu_trace.ftrace import _walk
except ImportError:  # installed where no compiler was: the pure-Python walk, with the same results
    _walk = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _walk is not None else "python"
NTYPES = 1 << 16  # event ids are u16
MASK64 = (1 << 64) - 1
LOSS_KINDS = ("page_missed", *map(malformed_kind, MALFORMED))  # the C walker's loss codes

Buffer = Union[bytes, bytearray, memoryview]
Pages = Union[Sequence[Tuple[int, int]], npt.NDArray[np.int64]]


class Want(NamedTuple):
    """What makes a record of a wanted event decodable (RecordDecoder can decode it): at least `size` payload bytes,
    and the data of each dynamic field inside the record. `dynamic`: one (where, base) per __data_loc or
    __rel_loc field, `where` its u32 locator's offset in the payload, `base` what the locator's offset counts
    from (0; for __rel_loc the end of the field)."""

    size: int  # -2 (RAW): no format describes the event, its records are handed on as raw bytes
    dynamic: Tuple[Tuple[int, int], ...] = ()


RAW = Want(-2)  # the C walker's KEEP_RAW


def wants(decoders: Mapping[int, RecordDecoder]) -> Dict[int, Want]:
    """The `wanted` table that makes `walk` judge records as these decoders would (decodable or malformed)."""
    return {eid: _want(dec) for eid, dec in decoders.items()}


def _want(dec: RecordDecoder) -> Want:
    shift = 4 - dec.fmt.field("common_pid").offset  # RecordDecoder reads the fields from the payload's byte 4
    dynamic = tuple(
        (f.offset + shift, f.offset + f.size if f.kind == REL_LOC else 0)
        for f in dec.fmt.fields
        if f.kind in (DATA_LOC, REL_LOC)
    )
    return Want(dec.size, dynamic)


@dataclass
class WalkState:
    """One CPU's walk, carried from call to call."""

    last_ts: int = 0  # the last record's timestamp (exact)
    backwards: int = 0  # times a page or an absolute stamp went back before the previous record
    pages: int = 0
    skipped: int = 0  # records of events not wanted
    malformed: int = 0


class Walk(NamedTuple):
    """One call's records, for one CPU's pages, in record order."""

    ts: npt.NDArray[np.int64]  # each event record's timestamp
    etype: npt.NDArray[np.uint16]  # its event id (common_type)
    offset: npt.NDArray[np.int64]  # where its payload (common_type first) starts in the buffer
    length: npt.NDArray[np.uint32]  # the payload's length in bytes
    losses: List[Tuple[int, Loss]]  # (index of the first event record after it, the loss)


Layout = Tuple[int, int, int]  # ts_offset, commit_size, data_offset


def layout(header: PageHeader) -> Layout:
    """The page header as the walk reads it (the commit word right after the timestamp: framing.py)."""
    if header.commit_offset != header.ts_offset + 8 or header.commit_size not in (4, 8):
        raise ValueError(f"unsupported page header: {header}")
    if header.ts_offset < 0 or header.commit_offset + header.commit_size > header.data_offset:
        raise ValueError(f"unsupported page header: {header}")
    return header.ts_offset, header.commit_size, header.data_offset


def pairs(pages: Pages) -> npt.NDArray[np.int64]:
    """`pages` as a contiguous (n, 2) int64 array of (offset, length)."""
    if isinstance(pages, np.ndarray):
        return np.ascontiguousarray(pages, dtype=np.int64).reshape(-1, 2)
    flat = np.fromiter(chain.from_iterable(pages), dtype=np.int64)  # a quarter of np.asarray's time
    if flat.size != 2 * len(pages):
        raise ValueError("pages: (offset, length) pairs expected")
    return flat.reshape(-1, 2)


def page_index(buf: Buffer, pages: Pages) -> npt.NDArray[np.int64]:
    """`pages` as a contiguous (n, 2) int64 array of (offset, length), each page inside `buf`."""
    index = pairs(pages)
    size = memoryview(buf).nbytes
    if index.size and ((index < 0).any() or (index[:, 0] > size - index[:, 1]).any()):
        raise ValueError("pages: a page lies outside the buffer")
    return index


# ---- the compiled walk --------------------------------------------------------------------------------------
def walk_c(
    buf: Buffer,
    pages: Pages,
    header: PageHeader,
    cpu: int,
    state: WalkState,
    wanted: Optional[Mapping[int, Want]] = None,
    byteorder: str = sys.byteorder,
    source: str = "tracefs",
) -> Walk:
    """`walk_py` by the C extension, a whole batch per call (ImportError where the extension was not built)."""
    return Walker(header, wanted, byteorder, source).walk_c(buf, pages, cpu, state)


class Walker:
    """A walk's configuration (page header, wanted events, byte order) prepared once, for a caller that walks
    batch after batch: `walk()` then costs the C call and the columns (the pure-Python walk where the
    extension was not built, with the same results)."""

    def __init__(self, header: PageHeader, wanted: Optional[Mapping[int, Want]] = None, byteorder: str = sys.byteorder,
                 source: str = "tracefs", keep_unknown: bool = False) -> None:  # fmt: skip
        if keep_unknown and wanted is not None:
            wanted = Unknown(wanted)
        self.header, self.wanted, self.byteorder, self.source = header, wanted, byteorder, source
        self.layout = layout(header)
        self.table = _table(None if wanted is None else tuple(sorted(wanted.items())), keep_unknown)
        self.swap = byteorder != "little"

    def walk(self, buf: Buffer, pages: Pages, cpu: int, state: WalkState) -> Walk:
        if _walk is None:
            return walk_py(buf, pages, self.header, cpu, state, self.wanted, self.byteorder, self.source)
        return self.walk_c(buf, pages, cpu, state)

    def walk_c(self, buf: Buffer, pages: Pages, cpu: int, state: WalkState) -> Walk:
        return self._walk_c(buf, pages, cpu, state, False).walk

    def walk_paged(self, buf: Buffer, pages: Pages, cpu: int, state: WalkState) -> Paged:
        """walk() and where each page ended, so that a caller may cut the walk at page boundaries (a whole
        recorded chunk walked at once, then handed on read by read) as if each read had been walked alone."""
        if _walk is None:
            return walk_py_paged(buf, pages, self.header, cpu, state, self.wanted, self.byteorder, self.source)
        return self._walk_c(buf, pages, cpu, state, True)

    def _walk_c(self, buf: Buffer, pages: Pages, cpu: int, state: WalkState, per_page: bool) -> Paged:
        if _walk is None:
            raise ImportError("npu_trace.ftrace._walk was not built (no compiler where npu-trace was installed)")
        last, before = state.last_ts, state.backwards
        cols = _walk.walk(buf, pairs(pages), self.layout, last >> 64, last & MASK64, self.table, self.swap, per_page)
        ts, etype, offset, length, raw_losses, (hi, lo, backwards, npages, skipped, malformed), ends = cols
        state.last_ts = hi << 64 | lo
        state.backwards += backwards
        state.pages += npages
        state.skipped += skipped
        state.malformed += malformed
        source = self.source
        losses = [(i, Loss(source, cpu, LOSS_KINDS[kind], lost, min(ts_hi << 64 | ts_lo, TS_MAX)))
                  for i, kind, lost, ts_hi, ts_lo, _ in raw_losses]  # fmt: skip
        walk = Walk(np.frombuffer(ts, np.int64), np.frombuffer(etype, np.uint16), np.frombuffer(offset, np.int64),
                    np.frombuffer(length, np.uint32), losses)  # fmt: skip
        if ends is None:
            return Paged(walk, np.zeros(0, np.int64), [], [], [])
        table = np.frombuffer(ends, dtype=PAGE_END)
        page_ts = [h << 64 | low for h, low in zip(table["ts_hi"].tolist(), table["ts_lo"].tolist())]
        return Paged(walk, table["end"].copy(), page_ts, (table["backwards"] + before).tolist(),
                     [page for *_, page in raw_losses])  # fmt: skip


PAGE_END = np.dtype([("end", np.int64), ("ts_hi", np.uint64), ("ts_lo", np.uint64), ("backwards", np.int64)])


class Paged(NamedTuple):
    """A walk and where each of its pages ended."""

    walk: Walk
    page_end: npt.NDArray[np.int64]  # event records walked up to the end of each page
    page_ts: List[int]  # the walk's time at the end of each page (exact): WalkState.last_ts then
    page_backwards: List[int]  # WalkState.backwards at the end of each page
    loss_page: List[int]  # the page each of the walk's losses was found on


def _column(raw: bytearray, dtype: Any) -> Any:
    return np.frombuffer(raw, dtype=dtype)


class Unknown(Dict[int, Want]):
    """A `wanted` table whose other ids are RAW (no format describes them: handed on as raw bytes)."""

    def get(self, eid: int, default: Optional[Want] = None) -> Optional[Want]:  # type: ignore[override]
        return super().get(eid, RAW)


@lru_cache(maxsize=64)
def _table(wanted: Optional[Tuple[Tuple[int, Want], ...]], keep_unknown: bool = False) -> bytes:
    """The C walker's table: need[65536] (minimum size, -1: not wanted, -2: kept raw), dyn[65536] (0, or where
    this id's dynamic fields are listed: a count, then (where, base) pairs), then those lists; int32, native
    order."""
    other = 0 if wanted is None else RAW.size if keep_unknown else -1
    table = array("i", [other]) * NTYPES + array("i", [0]) * NTYPES
    for eid, want in wanted or ():
        _check_want(eid, want)
        table[eid] = want.size
        if want.dynamic:
            table[NTYPES + eid] = len(table)
            table.append(len(want.dynamic))
            table.extend(v for pair in want.dynamic for v in pair)
    return table.tobytes()


def _check_want(eid: int, want: Want) -> None:
    if want is RAW:
        return
    values = (want.size, *(v for pair in want.dynamic for v in pair))
    if not 0 <= eid < NTYPES or any(not 0 <= v < 1 << 31 for v in values) or any(len(p) != 2 for p in want.dynamic):
        raise ValueError(f"wanted: event id {eid}: {want} is not a valid Want")


def gather_c(buf: Buffer, offset: npt.ArrayLike, size: int) -> bytes:
    """`gather` by the C extension."""
    if _walk is None:
        raise ImportError("npu_trace.ftrace._walk was not built (no compiler where npu-trace was installed)")
    return _walk.gather(buf, np.ascontiguousarray(offset, dtype=np.int64), size)


# ---- the pure-Python walk -----------------------------------------------------------------------------------
class _Everything:
    """`wanted=None`: every event id, no minimum size."""

    ANY = Want(0)

    def get(self, eid: int) -> Want:
        return self.ANY


def walk_py(
    buf: Buffer,
    pages: Pages,
    header: PageHeader,
    cpu: int,
    state: WalkState,
    wanted: Optional[Mapping[int, Want]] = None,
    byteorder: str = sys.byteorder,
    source: str = "tracefs",
) -> Walk:
    """Walk one CPU's pages (`pages`: the (offset, length) of each in `buf`) by framing.py's rules, and
    move `state` on. Records of ids not in `wanted` (None: every id, no minimum size) are skipped and counted.
    The pure-Python walk; `walk_c` gives the same results (see the module docstring)."""
    return walk_py_paged(buf, pages, header, cpu, state, wanted, byteorder, source).walk


def walk_py_paged(
    buf: Buffer,
    pages: Pages,
    header: PageHeader,
    cpu: int,
    state: WalkState,
    wanted: Optional[Mapping[int, Want]] = None,
    byteorder: str = sys.byteorder,
    source: str = "tracefs",
) -> Paged:
    """walk_py and where each page ended (Walker.walk_paged's pure-Python twin)."""
    if wanted is not None:
        for eid, want in wanted.items():
            _check_want(eid, want)
    view = memoryview(buf).cast("B")
    walker = _PyWalker(layout(header), wanted if wanted is not None else _Everything(), byteorder, state)
    ends, page_ts, page_backwards = [], [], []
    for offset, length in page_index(buf, pages).tolist():
        walker.page(view[offset : offset + length], offset)
        walker.page_no += 1
        ends.append(len(walker.ts))
        page_ts.append(state.last_ts)
        page_backwards.append(state.backwards)
    losses = [(i, Loss(source, cpu, kind, lost, min(ts, TS_MAX))) for i, kind, lost, ts, _ in walker.losses]
    walk = Walk(np.frombuffer(walker.ts, np.int64), np.frombuffer(walker.etype, np.uint16),
                np.frombuffer(walker.offset, np.int64), np.frombuffer(walker.length, np.uint32), losses)  # fmt: skip
    return Paged(walk, np.array(ends, dtype=np.int64), page_ts, page_backwards, [loss[4] for loss in walker.losses])


class _PyWalker:
    """walk_py's one call: the columns it fills and the state it moves on."""

    def __init__(self, lay: Layout, wanted: Any, byteorder: str, state: WalkState) -> None:
        self.lay = lay
        self.get: Callable[[int], Optional[Want]] = wanted.get
        self.state = state
        self.order: Literal["little", "big"] = "little" if byteorder == "little" else "big"
        end = "<" if byteorder == "little" else ">"
        self.u32 = struct.Struct(end + "I").unpack_from
        self.u16 = struct.Struct(end + "H").unpack_from
        self.head = struct.Struct(end + "Q" + ("Q" if lay[1] == 8 else "I")).unpack_from
        self.ts, self.offset = array("q"), array("q")
        self.etype, self.length = array("H"), array("I")
        self.losses: List[Tuple[int, str, int, int, int]] = []
        self.page_no = 0

    def loss(self, kind: str, lost: int, ts: int) -> None:
        self.losses.append((len(self.ts), kind, lost, ts, self.page_no))

    def malformed(self, ts: int, reason: str) -> None:
        self.state.malformed += 1
        self.loss(malformed_kind(reason), 1, ts)

    def page(self, page: memoryview, base: int) -> None:
        ts_offset, word, data_offset = self.lay
        if len(page) < data_offset:
            self.malformed(self.state.last_ts, "short_page")
            return
        page_ts, commit = self.head(page, ts_offset)
        st = self.state
        st.backwards += page_ts < st.last_ts
        st.pages += 1
        end = data_offset + (commit & COMMIT_MASK)
        if end > len(page):
            self.malformed(page_ts, "commit_past_page")
            end = len(page)
        if commit & MISSED_EVENTS:
            stored = commit & MISSED_STORED and end + word <= len(page)
            self.loss("page_missed", int.from_bytes(page[end : end + word], self.order) if stored else 0, page_ts)
        st.last_ts = self.records(page, base, data_offset, end, page_ts)

    def records(self, page: memoryview, base: int, pos: int, end: int, ts: int) -> int:
        """The page's records from `pos` to `end` (framing.py's rules); the last ts."""
        u32, u16, get, st = self.u32, self.u16, self.get, self.state
        put_ts, put_etype, put_offset, put_length = (
            self.ts.append,
            self.etype.append,
            self.offset.append,
            self.length.append,
        )
        while pos + 6 <= end:
            hdr = u32(page, pos)[0]
            tl = hdr & 31
            if 0 < tl <= 28:
                ts += hdr >> 5
                size = tl << 2
                start = pos + 4
                pos = start + size
                etype = u16(page, start)[0]
                want = get(etype)
                if want is None or want is RAW:
                    if want is None:
                        st.skipped += 1
                    elif ts > TS_MAX:  # kept as its bytes, but stamped past 2**63 - 1
                        self.malformed(TS_MAX, "ts_overflow")
                    else:  # its bytes up to the commit's end at most
                        self.emit(ts, etype, base + start, min(pos, end) - start)
                    continue
            elif tl == 0:
                if pos + 8 > end:
                    break
                ts += hdr >> 5
                size = u32(page, pos + 4)[0] - 4
                start = pos + 8
                pos = start + size
                etype = u16(page, start)[0] if size >= 2 and pos <= end else -1
                want = get(etype) if etype >= 0 else None
                if want is None or want is RAW:
                    if size < 8 or pos > end:
                        self.malformed(ts, "bad_length" if size < 8 else "record_past_commit")
                        break
                    if want is None:
                        st.skipped += 1
                    elif ts > TS_MAX:
                        self.malformed(TS_MAX, "ts_overflow")
                    else:
                        self.emit(ts, etype, base + start, size)
                    continue
            elif pos + 8 > end:  # every remaining kind carries a second word
                if not (tl == TYPE_PADDING and hdr >> 5 == 0):
                    self.malformed(ts, "cut_header")
                break
            elif tl == TYPE_TIME_EXTEND:
                ts += (u32(page, pos + 4)[0] << TS_SHIFT) | (hdr >> 5)
                pos += 8
                continue
            elif tl == TYPE_TIME_STAMP:
                before, ts = ts, abs_ts((u32(page, pos + 4)[0] << TS_SHIFT) | (hdr >> 5), ts)
                st.backwards += ts < before
                pos += 8
                continue
            else:  # padding: delta 0 ends the page, otherwise a discarded record of array[0] bytes
                if hdr >> 5 == 0:
                    break
                pos += 4 + u32(page, pos + 4)[0]
                continue
            if pos > end or size < want.size:
                self.malformed(ts, "record_past_commit" if pos > end else "short_record")
                if pos > end:
                    break
                continue
            if want.dynamic and not self.dynamic_ok(page, start, size, want.dynamic):
                self.malformed(ts, "dynamic_outside")
                continue
            if ts > TS_MAX:
                self.malformed(TS_MAX, "ts_overflow")
                continue
            put_ts(ts)
            put_etype(etype)
            put_offset(base + start)
            put_length(size)
        return ts

    def emit(self, ts: int, etype: int, offset: int, size: int) -> None:
        self.ts.append(ts)
        self.etype.append(etype)
        self.offset.append(offset)
        self.length.append(size)

    def dynamic_ok(self, page: memoryview, start: int, size: int, dynamic: Tuple[Tuple[int, int], ...]) -> bool:
        """Each dynamic field's data inside the record (RecordDecoder raises ValueError otherwise)."""
        for where, base in dynamic:
            if where + 4 > size:
                return False
            loc = self.u32(page, start + where)[0]
            if (loc & 0xFFFF) + base + (loc >> 16) > size:
                return False
        return True


def gather_py(buf: Buffer, offset: npt.ArrayLike, size: int) -> bytes:
    """The first `size` bytes of each record at `offset` (int64 offsets into `buf`), concatenated: the fixed
    part of one event type's records, for `numpy.frombuffer` with a structured dtype. ValueError when one lies
    outside `buf`. In pure Python; `gather_c` gives the same bytes."""
    offsets = np.ascontiguousarray(offset, dtype=np.int64).reshape(-1)
    view = memoryview(buf).cast("B")
    if size < 0:
        raise ValueError("gather: int64 offsets and a size >= 0 expected")
    if offsets.size and (offsets.min() < 0 or offsets.max() > len(view) - size):
        raise ValueError("gather: a record lies outside the buffer")
    return b"".join([view[o : o + size] for o in offsets.tolist()])


def gather_rows_c(bufs: Sequence[Buffer], which: npt.ArrayLike, offset: npt.ArrayLike, size: int) -> bytes:
    """`gather_rows` by the C extension."""
    if _walk is None:
        raise ImportError("npu_trace.ftrace._walk was not built (no compiler where npu-trace was installed)")
    return _walk.gather_rows(tuple(bufs), np.ascontiguousarray(which, dtype=np.int32),
                             np.ascontiguousarray(offset, dtype=np.int64), size)  # fmt: skip


def gather_rows_py(bufs: Sequence[Buffer], which: npt.ArrayLike, offset: npt.ArrayLike, size: int) -> bytes:
    """gather() over several buffers: the first `size` bytes of record i at offset[i] in bufs[which[i]]. In
    pure Python; `gather_rows_c` gives the same bytes."""
    numbers = np.ascontiguousarray(which, dtype=np.int32).reshape(-1)
    offsets = np.ascontiguousarray(offset, dtype=np.int64).reshape(-1)
    if len(numbers) != len(offsets) or size < 0:
        raise ValueError("gather_rows: int32 buffer numbers, int64 offsets, one each, size >= 0")
    if len(numbers) and (numbers.min() < 0 or numbers.max() >= len(bufs)):
        raise ValueError("gather_rows: a buffer number out of range")
    views = [memoryview(b).cast("B") for b in bufs]
    out = []
    for b, o in zip(numbers.tolist(), offsets.tolist()):
        if o < 0 or o > len(views[b]) - size:
            raise ValueError("gather_rows: a record lies outside its buffer")
        out.append(views[b][o : o + size])
    return b"".join(out)


walk = walk_c if _walk is not None else walk_py
gather = gather_c if _walk is not None else gather_py
gather_rows = gather_rows_c if _walk is not None else gather_rows_py
