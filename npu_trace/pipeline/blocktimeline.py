"""The timeline: a source's batches in, every item in one time order out, as Blocks (what every consumer reads).

`BlockTimeline` takes the batches (raw pages per CPU, the channels' items, marks), sets the watermarks, and
releases by the ordered merge's rules (`npu_trace.pipeline.merge`: bounds, the late-item rule), with no object
per record (tests/reference/timeline.py holds the per-item merge it is held equal to). Each CPU's
pages are walked in compiled code (`npu_trace.ftrace.walk`: timestamps, event ids, offsets), each record stays
where it lies in the batch's bytes until a `Block` gathers its format's fixed fields as numpy columns
(`npu_trace.pipeline.blocks`); only the channels' items and the losses are objects.

Why the sequence is the merge's. Pushes, watermarks, bounds and the late rule run per batch, as the merge
runs them; only the moving of rows waits. Let R_p be the merge's release point after batch p (its `released`:
the running maximum of the bounds). An item pushed in batch p that is not late has ts >= R_{p-1}, so it leaves
in the first release whose R exceeds its stamp: which release an item leaves in is a function of its stamp
alone. Everything released by now is then the rows stamped before R, and the concatenated releases are those
rows sorted by (ts, stream key, arrival): one stable sort by stamp of the rows laid out stream by stream. The
items a release puts at its front (untimed items, losses that came late, the "late" losses) go where that
release began: after every item stamped before R_{p-1}. `take()` hands over, in one Block, all that the releases
since the last call released, in the merge's order, whatever the number of batches in between (`check` takes
large blocks, a live view one per read); a batch costs the walk and a few comparisons.

The bounds are the merge's (`release_bound`): the lag bound from the watermarks, the count bound from the
number of rows held, counted from the rows (only when the rows not yet taken could exceed it).

Two ways in: `add(batch)` for a live read (its pages copied into the arena's segments and walked), and
`add_chunk(chunk)` for a recorded chunk: each CPU's pages of the chunk walked in place in one call, where each
page ended noted (`Walker.walk_paged`), then the chunk's reads replayed one by one as add() would take them,
each a few comparisons; a read's rows join the CPU's view of the chunk unless some are late or untimed.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

from npu_trace.events import Loss, LossLedger
from npu_trace.ftrace.columns import FormatColumns
from npu_trace.ftrace.decode import RecordDecoder
from npu_trace.ftrace.format import PageHeader
from npu_trace.ftrace.walk import Walk, Walker, WalkState, wants
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS, Batch, Mark
from npu_trace.pipeline.blocks import OBJECT, Block, build_block, empty_block
from npu_trace.pipeline.merge import CHANNELS, MAX_HELD, MAX_LAG_NS, late_key, release_bound

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


class Chunk(Protocol):
    """A recorded chunk as `npu_trace.recording.schema.Chunk` holds it: its pages in read order, the marks of
    the reads (number of the chunk's pages read before each), and the pages' bytes one after the other."""

    @property
    def pages(self) -> Sequence[Tuple[int, bytes]]: ...

    @property
    def marks(self) -> List[Tuple[int, Mark]]: ...

    @property
    def raw(self) -> bytes: ...
SEGMENT = 4 << 20  # bytes of pages per arena segment: a block's records lie in few buffers


def _i64(value: float) -> int:
    """An item's stamp for the int64 column (one past the range, only a corrupt one, at its end)."""
    return I64_MAX if value > I64_MAX else I64_MIN if value < I64_MIN else int(value)


def _below(ts: np.ndarray, point: float) -> np.ndarray:
    """Which stamps lie before `point` (exact: a point may lie past the int64 range, or be infinite)."""
    if point > I64_MAX:
        return np.ones(len(ts), dtype=bool)
    if point <= I64_MIN:
        return np.zeros(len(ts), dtype=bool)
    return ts < int(point)


def _cut_at(ts: np.ndarray, point: float) -> int:
    """How many of sorted stamps lie before `point` (exact, as _below)."""
    if point > I64_MAX:
        return len(ts)
    if point <= I64_MIN:
        return 0
    return int(np.searchsorted(ts, int(point), side="left"))


class _Rows:
    """Rows of one stream pushed in one batch (or what is left of them). Columns `ts`, `etype` (OBJECT for an
    object), `ref` (a record's offset in its buffer, an object's id) and `length`; `cpu` and `buf` (the arena
    buffer of its records) one number for the whole chunk or a column. `ordered`: the stamps never go back
    (a CPU's walk without a backwards step), so `first`/`last` are its ends."""

    __slots__ = ("base", "buf", "cpu", "etype", "first", "last", "length", "ordered", "ref", "start", "ts")

    def __init__(self, ts: np.ndarray, etype: np.ndarray, ref: np.ndarray, length: np.ndarray, cpu: Any, buf: Any,
                 ordered: bool, base: Any = None, start: int = 0,
                 ends: Optional[Tuple[int, int]] = None) -> None:  # fmt: skip
        self.ts, self.etype, self.ref, self.length, self.cpu, self.buf = ts, etype, ref, length, cpu, buf
        self.ordered = ordered
        self.base, self.start = base, start  # a view of base's columns from `start` (rows a chunk walk made)
        if ends is not None:
            self.first, self.last = ends
        elif not len(ts):
            self.first, self.last = I64_MAX, I64_MIN
        elif ordered:
            self.first, self.last = int(ts[0]), int(ts[-1])
        else:
            self.first, self.last = int(ts.min()), int(ts.max())

    def __len__(self) -> int:
        return len(self.ts)

    def select(self, mask: Any) -> _Rows:
        """The rows of a boolean mask or a slice (a slice of ordered rows stays ordered, and a view)."""
        cpu = self.cpu if isinstance(self.cpu, int) else self.cpu[mask]
        buf = self.buf if isinstance(self.buf, int) else self.buf[mask]
        base, start = (self.base, self.start + (mask.start or 0)) if isinstance(mask, slice) else (None, 0)
        return _Rows(self.ts[mask], self.etype[mask], self.ref[mask], self.length[mask], cpu, buf, self.ordered,
                     base, start)  # fmt: skip

    def follows(self, prev: _Rows) -> bool:
        """These rows continue `prev` in the same walk's columns (they can be held as one view)."""
        return self.base is not None and prev.base is self.base and prev.start + len(prev) == self.start

    def joined(self, prev: _Rows) -> _Rows:
        """prev and these rows as one view (see follows)."""
        ordered = prev.ordered and self.ordered and prev.last <= self.first
        ts, etype, ref, length = (col[prev.start : self.start + len(self)] for col in self.base.cols)
        return _Rows(ts, etype, ref, length, self.cpu, self.buf, ordered, self.base, prev.start,
                     (min(prev.first, self.first), max(prev.last, self.last)))  # fmt: skip

    def column(self, name: str, dtype: Any) -> np.ndarray:
        value = getattr(self, name)
        return np.full(len(self.ts), value, dtype) if isinstance(value, int) else value


def _concat(parts: Sequence[_Rows]) -> _Rows:
    if len(parts) == 1:
        return parts[0]
    return _Rows(np.concatenate([p.ts for p in parts]), np.concatenate([p.etype for p in parts]),
                 np.concatenate([p.ref for p in parts]), np.concatenate([p.length for p in parts]),
                 _joined(parts, "cpu", np.int16), _joined(parts, "buf", np.int32), False)  # fmt: skip


def _joined(parts: Sequence[_Rows], name: str, dtype: Any) -> np.ndarray:
    """A per-chunk-or-per-row column of many chunks as one column (the per-chunk values repeated at once)."""
    values = [getattr(p, name) for p in parts]
    if all(isinstance(v, int) for v in values):
        return np.repeat(np.array(values, dtype=dtype), [len(p) for p in parts])
    return np.concatenate([p.column(name, dtype) for p in parts])


class _Arena:
    """Where the batches' pages are kept while their records are held: fixed-size segments filled in turn
    (never resized, so the columns and decoders may look into them), a large batch in a buffer of its own."""

    def __init__(self) -> None:
        self.buffers: Dict[int, Any] = {}
        self._next_id = 0
        self._segment: Optional[bytearray] = None
        self._segment_id = -1
        self._used = 0

    def put(self, pages: Sequence[bytes]) -> Tuple[int, Any, List[int]]:
        """(buffer id, buffer, each page's offset in it)."""
        size = sum(len(p) for p in pages)
        if size > SEGMENT // 4:
            bid = self._new(b"".join(pages))
            return bid, self.buffers[bid], _offsets([len(p) for p in pages], 0)
        if self._segment is None or self._used + size > SEGMENT:
            self._segment = bytearray(SEGMENT)
            self._segment_id = self._new(self._segment)
            self._used = 0
        seg, start = self._segment, self._used
        pos = start
        for page in pages:
            seg[pos : pos + len(page)] = page
            pos += len(page)
        self._used = pos
        return self._segment_id, seg, _offsets([len(p) for p in pages], start)

    def keep(self, buffer: Any) -> int:
        """A buffer the caller already holds the pages in (a recorded chunk): its id, nothing copied."""
        return self._new(buffer)

    def _new(self, buffer: Any) -> int:
        bid = self._next_id
        self._next_id += 1
        self.buffers[bid] = buffer
        return bid

    def keep_only(self, used: Iterable[int]) -> None:
        """Forget the buffers no held row lies in (the blocks handed over keep their own references)."""
        keep = set(used)
        keep.add(self._segment_id)
        for bid in [b for b in self.buffers if b not in keep]:
            del self.buffers[bid]


def _local_ids(buf: np.ndarray, records: np.ndarray) -> Tuple[List[int], np.ndarray]:
    """The arena buffers the records lie in (ascending ids) and each row's index among them (0 for objects): a
    block's ids span few consecutive values, so a count over their range does what a sort would."""
    local: np.ndarray = np.zeros(len(buf), dtype=np.int32)
    rb = buf[records]
    if not len(rb):
        return [], local
    lo = int(rb.min())
    span = int(rb.max()) - lo + 1
    if span > 4 * len(rb) + 1024:  # ids far apart (never seen in practice): the sort
        ids, inverse = np.unique(rb, return_inverse=True)
        local[records] = inverse
        return ids.tolist(), local
    present = np.bincount(rb - lo, minlength=span) > 0
    local[records] = (np.cumsum(present) - 1)[rb - lo]
    return (np.flatnonzero(present) + lo).tolist(), local


def _nondecreasing(ts: np.ndarray) -> bool:
    return len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all())


def _offsets(lens: Sequence[int], start: int) -> List[int]:
    out, pos = [], start
    for n in lens:
        out.append(pos)
        pos += n
    return out


def _layout(pages: Sequence[Tuple[int, bytes]]) -> Tuple[List[int], List[int]]:
    """The CPU and the length of each of a chunk's pages (a decoded chunk's `Pages` know them without slicing
    the pages out of its data: npu_trace.recording.schema)."""
    known: Any = pages
    if getattr(known, "lens", None) is not None:
        return list(known.cpus), list(known.lens)
    return [cpu for cpu, _ in pages], [len(page) for _, page in pages]


class BlockTimeline:
    def __init__(
        self,
        header: Optional[PageHeader],
        decoders: Mapping[int, RecordDecoder],
        plans: Mapping[int, FormatColumns],
        *,
        byteorder: str = sys.byteorder,
        margin_ns: int = COMMIT_MARGIN_NS,
        ledger: Optional[LossLedger] = None,
        cpus: Iterable[int] = (),
        channels: bool = False,
        max_held: int = MAX_HELD,
        max_lag_ns: int = MAX_LAG_NS,
        keep_unknown: bool = False,
    ) -> None:
        """`decoders`: the record decoders of the events to decode (the others are stepped over and counted);
        `plans`: their column plans; `keep_unknown`: the records of ids no decoder describes come as raw rows
        instead (a consumer that shows every record). `cpus`, `channels`: the streams that exist from the
        start (nothing is released before each has told its progress). No `header`: a timeline of the
        channels' items only (BPF's), no pages."""
        self.header = header
        self.plans = plans
        self.byteorder = byteorder
        self.walker = Walker(header, wants(decoders), byteorder, keep_unknown=keep_unknown) if header else None
        self.margin_ns = margin_ns
        self.ledger = ledger if ledger is not None else LossLedger()
        self.max_held = max_held
        self.max_lag_ns = max_lag_ns
        self.states: Dict[int, WalkState] = {}
        self.events = 0  # trace records walked (losses not counted)
        self.ended = False
        self.forced = 0  # releases that went past a stream's watermark (a bound was reached)
        self.late: Dict[Tuple[str, int], int] = {}  # every late item dropped, by (source, cpu)
        self._wm: Dict[int, float] = {}
        # stream key -> its rows not yet taken, in arrival order: those stamped before the release point have
        # been released (the merge let them go), the others are held
        self._rows: Dict[int, List[_Rows]] = {}
        self._listed = 0  # rows in _rows: at least the merge's count of held items
        self._released: float = -math.inf
        self._fronts: List[Tuple[float, _Rows]] = []  # (the release point before them, rows) since the last take
        self._front_rows = 0
        self._objects: Dict[int, Any] = {}
        self._next_object = 0
        self._arena = _Arena()
        for key in (*cpus, *((CHANNELS,) if channels else ())):
            self._wm[key] = -math.inf

    # ---- Timeline's interface ------------------------------------------------------------------------------
    @property
    def now(self) -> Optional[int]:
        return int(self._released) if math.isfinite(self._released) else None

    @property
    def pending_rows(self) -> int:
        """Rows not yet taken (released or still held): what the next take() hands over at most."""
        return self._listed + self._front_rows

    @property
    def held(self) -> int:
        """Items held (pushed, not released): the merge's count."""
        return sum(_count_from(rows, self._released) for part in self._rows.values() for rows in part)

    def holds(self, buffer: Any) -> bool:
        """Whether a row not yet taken lies in this buffer (one the blocks taken so far name): the next blocks
        may name it too."""
        return any(held is buffer for held in self._arena.buffers.values())

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.states.values())

    @property
    def malformed(self) -> int:
        return sum(s.malformed for s in self.states.values())

    def push(self, batch: Batch) -> Block:
        """Take one batch; returns what it released (`take()`)."""
        self.add(batch)
        return self.take()

    def flush(self) -> Block:
        self._release(math.inf)
        self.ended = True
        return self.take()

    def add(self, batch: Batch) -> None:
        """Take one batch: push, advance and release as the merge does; the released rows wait for take()."""
        late: Dict[Tuple[str, int], int] = {}
        front: List[_Rows] = []
        if batch.pages:
            self._walk(batch.pages, late, front)
        if batch.events:
            self._push(CHANNELS, self._object_rows(batch.events), late, front)
        if batch.mark is not None:
            self._mark(batch.mark)
        self._end_batch(late, front, batch.final)

    def add_chunk(self, chunk: Chunk) -> None:
        """A recorded chunk: exactly add() of each read it holds (the batches its marks cut, see
        ReplaySource.batches), with each CPU's pages walked in place by one call."""
        cpus, lens = _layout(chunk.pages)
        if not cpus or len(chunk.raw) != sum(lens):
            for batch in chunk_batches(chunk):
                self.add(batch)
            return
        bid = self._arena.keep(chunk.raw)
        offsets = _offsets(lens, 0)
        walks = {cpu: self._walk_chunk(chunk.raw, bid, cpu, [(offsets[i], lens[i]) for i, c in enumerate(cpus)
                                                              if c == cpu])
                 for cpu in dict.fromkeys(cpus)}  # fmt: skip
        wm = self._wm
        for lo, hi, mark in _reads(chunk):  # thousands per chunk: the common read's steps kept inline
            late: Dict[Tuple[str, int], int] = {}  # only a read with late or untimed rows fills them
            front: List[_Rows] = []
            counts: Dict[int, int] = {}
            for cpu in cpus[lo:hi]:  # the CPUs of this read, in the order the read found them
                counts[cpu] = counts.get(cpu, 0) + 1
            for cpu, n in counts.items():
                walk = walks[cpu]
                r0, r1, ordered, last_ts, low, high = walk.advance(n)
                if r1 > r0:
                    if low < self._released or not low:  # the rare read with late or untimed rows
                        self._held_view(walk)
                        self._push(cpu, walk.rows(r0, r1, ordered), late, front)
                    else:  # the common read: the chunk's view of this CPU grows, nothing else moves
                        walk.extend(r0, r1, ordered, low, high)
                        self._listed += r1 - r0
                        if cpu not in wm:
                            wm[cpu] = -math.inf
                if last_ts > wm.get(cpu, -math.inf):  # _advance
                    wm[cpu] = last_ts
            if mark is not None:
                self._mark(mark)
            if self._listed > self.max_held:  # the count bound looks at the rows: hold the views first
                for walk in walks.values():
                    self._held_view(walk)
            if late or front:
                self._end_batch(late, front, False)
            else:  # _end_batch of a read with nothing late and no front
                self._release(self._bound())
        for walk in walks.values():
            self._held_view(walk)

    def _held_view(self, walk: _PagedRows) -> None:
        """A CPU's reads of a chunk so far, taken into its stream's rows as one view (after its held rows)."""
        rows = walk.take_view()
        if rows is None:
            return
        held = self._rows.setdefault(walk.cpu, [])
        if held and rows.follows(held[-1]):
            held[-1] = rows.joined(held[-1])
        else:
            held.append(rows)

    def _walk_chunk(self, raw: bytes, bid: int, cpu: int, index: List[Tuple[int, int]]) -> _PagedRows:
        state = self.states.get(cpu)
        if state is None:
            state = self.states[cpu] = WalkState()
        before = state.backwards
        assert self.walker is not None, "a chunk with pages needs a page header"
        got = self.walker.walk_paged(raw, index, cpu, state)
        walk = got.walk
        self.events += len(walk.ts)
        ts, etype, ref, length = walk.ts, walk.etype, walk.offset, walk.length
        row_end = got.page_end
        if walk.losses:
            for _, loss in walk.losses:
                self.ledger.add(loss)
            ts, etype, ref, length = self._interleave(walk)
            row_end = row_end + np.searchsorted(np.array(got.loss_page, dtype=np.int64), np.arange(len(index)),
                                                side="right")  # fmt: skip
        return _PagedRows(ts, etype, ref, length, cpu, bid, row_end, got.page_ts, got.page_backwards, before)

    def _end_batch(self, late: Dict[Tuple[str, int], int], front: List[_Rows], final: bool) -> None:
        """The end of one batch, as the merge ends it: the late items' losses, the front, the release."""
        if late:
            base = int(self._released) if math.isfinite(self._released) else 0
            losses = [Loss(source, cpu, "late", n, base) for (source, cpu), n in sorted(late.items())]
            for loss in losses:
                self.ledger.add(loss)
                self.late[(loss.source, loss.cpu)] = self.late.get((loss.source, loss.cpu), 0) + loss.lost
            front.append(self._object_rows(losses))
        if front:
            rows = _concat(front)
            self._fronts.append((self._released, rows))
            self._front_rows += len(rows)
        self._release(math.inf if final else self._bound())
        if final:
            self.ended = True

    def take(self) -> Block:
        """Everything released since the last call, in the merge's order, as one Block."""
        out = self._take_released()
        if not out and not self._fronts:
            return empty_block()
        released = sum(len(r) for r in out)
        rows = _concat([*out, *(front for _, front in self._fronts)])  # the fronts' rows after the released
        if not self._fronts and (rows.ordered or _nondecreasing(rows.ts)):
            # already in time order (one stream wrote, or the streams did not interleave): what a stable sort
            # gives, without the sort and its gathers
            etype: np.ndarray = rows.etype.astype(np.int32)
            ts, ref, length = rows.ts, rows.ref, rows.length
            buf, cpu = rows.column("buf", np.int32), rows.column("cpu", np.int16)
        else:
            # stream by stream, each mostly in order: a merge of few runs (numpy's stable sort is a timsort)
            order = np.argsort(rows.ts[:released], kind="stable")
            if self._fronts:
                order = self._with_fronts(rows.ts[:released], order)
            ts, etype, ref = rows.ts[order], rows.etype[order].astype(np.int32), rows.ref[order]
            length = rows.length[order]
            buf, cpu = rows.column("buf", np.int32)[order], rows.column("cpu", np.int16)[order]
        self._fronts, self._front_rows = [], 0
        objects: List[Any] = []
        is_obj = etype == OBJECT
        if is_obj.any():
            at = np.flatnonzero(is_obj)
            objects = [self._objects.pop(i) for i in ref[at].tolist()]
            ref = ref.copy()  # the rows' own column when they were in order
            ref[at] = np.arange(len(at))
        bufs = self._arena.buffers
        ids, local = _local_ids(buf, ~is_obj)
        block = build_block(ts, cpu, etype, ref, length, local, [bufs[b] for b in ids], self.plans, objects,
                            self.byteorder)
        self._arena.keep_only(r.buf for part in self._rows.values() for r in part if isinstance(r.buf, int))
        return block

    def _take_released(self) -> List[_Rows]:
        """The released rows out of the streams' lists (stream by stream, in key order, each in arrival order)."""
        point = self._released
        out: List[_Rows] = []
        for key in sorted(self._rows):
            kept: List[_Rows] = []
            for rows in self._rows[key]:
                if rows.last < point:
                    out.append(rows)
                elif rows.first >= point:
                    kept.append(rows)
                elif rows.ordered:
                    cut = _cut_at(rows.ts, point)
                    out.append(rows.select(slice(None, cut)))
                    kept.append(rows.select(slice(cut, None)))
                else:
                    below = _below(rows.ts, point)
                    out.append(rows.select(below))
                    kept.append(rows.select(~below))
            if kept:
                self._rows[key] = kept
            else:
                del self._rows[key]
        self._listed = sum(len(r) for part in self._rows.values() for r in part)
        return out

    def _with_fronts(self, released: np.ndarray, order: np.ndarray) -> np.ndarray:
        """The order of the released rows (stamps `released`, their time order `order`) and, after them in
        the rows, the fronts: each release's front placed where that release began."""
        stamps = released[order]
        pieces, base = [], len(stamps)
        start = 0
        for point, front in self._fronts:
            at = max(_cut_at(stamps, point), start)
            pieces.append(order[start:at])
            pieces.append(np.arange(base, base + len(front)))
            base += len(front)
            start = at
        pieces.append(order[start:])
        return np.concatenate(pieces).astype(np.int64)

    # ---- pushing ---------------------------------------------------------------------------------------------
    def _walk(self, pages: Sequence[Tuple[int, bytes]], late: Dict[Tuple[str, int], int], front: List[_Rows]) -> None:
        assert self.walker is not None, "a batch with pages needs a page header"
        walker = self.walker
        bid, buffer, offsets = self._arena.put([page for _, page in pages])
        per_cpu: Dict[int, List[Tuple[int, int]]] = {}
        for (cpu, page), offset in zip(pages, offsets):
            per_cpu.setdefault(cpu, []).append((offset, len(page)))
        for cpu, index in per_cpu.items():
            state = self.states.get(cpu)
            if state is None:
                state = self.states[cpu] = WalkState()
            backwards = state.backwards
            got = walker.walk(buffer, index, cpu, state)
            self.events += len(got.ts)
            ts, etype, ref, length = got.ts, got.etype, got.offset, got.length
            if got.losses:
                for _, loss in got.losses:
                    self.ledger.add(loss)
                ts, etype, ref, length = self._interleave(got)
            # a CPU's stamps only add up unless the walk stepped back (the merge's own test: its decoder's)
            self._push(cpu, _Rows(ts, etype, ref, length, cpu, bid, state.backwards == backwards), late, front)
            self._advance(cpu, state.last_ts)

    def _interleave(self, got: Walk) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The walk's losses put back among its records, where the page decoder emits them."""
        objs = self._object_rows([loss for _, loss in got.losses])
        at = np.array([i for i, _ in got.losses], dtype=np.int64)
        n = len(got.ts) + len(at)
        pos = at + np.arange(len(at))
        is_rec: np.ndarray = np.ones(n, dtype=bool)
        is_rec[pos] = False

        def mix(records: np.ndarray, losses: np.ndarray, dtype: Any) -> np.ndarray:
            col = np.empty(n, dtype=dtype)
            col[is_rec] = records
            col[pos] = losses
            return col

        return (mix(got.ts, objs.ts, np.int64), mix(got.etype, objs.etype, np.int32),
                mix(got.offset, objs.ref, np.int64), mix(got.length, objs.length, np.int64))  # fmt: skip

    def _object_rows(self, items: Sequence[Any]) -> _Rows:
        n = len(items)
        ids = np.arange(self._next_object, self._next_object + n, dtype=np.int64)
        for i, item in zip(ids.tolist(), items):
            self._objects[i] = item
        self._next_object += n
        ts = np.array([_i64(item.ts_ns) for item in items], dtype=np.int64)
        cpu = np.array([int(getattr(item, "cpu", -1)) for item in items], dtype=np.int16)
        return _Rows(ts, np.full(n, OBJECT, np.int32), ids, np.zeros(n, np.int64), cpu, -1, False)

    def _push(self, key: int, rows: _Rows, late: Dict[Tuple[str, int], int], front: List[_Rows]) -> None:
        """The merge's push: untimed rows go to the front, rows older than the release point are dropped and
        counted but losses, which go to the front too (the merge's test: the first row of an ordered push, the
        earliest of another)."""
        if not len(rows):
            return
        released = self._released
        if rows.first < released or not rows.first:
            untimed = rows.ts == 0
            dropped = ~untimed & _below(rows.ts, released)
            losses = self._losses(rows, dropped)
            if losses is not None:
                untimed, dropped = untimed | losses, dropped & ~losses
            if untimed.any():
                front.append(rows.select(untimed))
            if dropped.any():
                self._count_late(key, rows, dropped, late)
            rows = rows.select(~untimed & ~dropped)
            if not len(rows):
                return
        held = self._rows.setdefault(key, [])
        if held and rows.follows(held[-1]) and rows.cpu == held[-1].cpu and rows.buf == held[-1].buf:
            held[-1] = rows.joined(held[-1])  # a chunk's next read: the same view, longer
        else:
            held.append(rows)
        self._listed += len(rows)
        if key not in self._wm:
            self._wm[key] = -math.inf

    def _losses(self, rows: _Rows, among: np.ndarray) -> Optional[np.ndarray]:
        """Which of the rows `among` are losses (None: none is)."""
        objects = among & (rows.etype == OBJECT)
        if not objects.any():
            return None
        at = np.flatnonzero(objects)
        losses: np.ndarray = np.zeros(len(rows), dtype=bool)
        losses[at] = [isinstance(self._objects[i], Loss) for i in rows.ref[at].tolist()]
        return losses if losses.any() else None

    def _count_late(self, key: int, rows: _Rows, dropped: np.ndarray, late: Dict[Tuple[str, int], int]) -> None:
        objects = dropped & (rows.etype == OBJECT)
        items = [self._objects.pop(i) for i in rows.ref[objects].tolist()]
        if key < CHANNELS:  # a CPU's: counted by that CPU, records and losses alike
            late[("tracefs", key)] = late.get(("tracefs", key), 0) + int(dropped.sum())
            return
        for item in items:
            where = late_key(key, item)
            late[where] = late.get(where, 0) + 1

    def _advance(self, key: int, watermark: float) -> None:
        if watermark > self._wm.get(key, -math.inf):
            self._wm[key] = watermark

    def _mark(self, mark: Mark) -> None:
        floor = mark.read_ns - self.margin_ns
        wm = self._wm
        for cpu in mark.caught_up:  # _advance, once per read of a chunk: inline
            if floor > wm.get(cpu, -math.inf):
                wm[cpu] = floor
        if mark.channels_ns is not None:
            self._advance(CHANNELS, mark.channels_ns)

    # ---- releasing: the merge's release point; the rows move at take() -----------------------------------
    def _bound(self) -> float:
        # the count bound needs the held count only when the rows listed could exceed it
        held = self.held if self._listed > self.max_held else 0
        low, forced = release_bound(list(self._wm.values()), self._released, self.max_lag_ns, held, self.max_held,
                                    self._cut)  # fmt: skip
        self.forced += forced
        return low

    def _cut(self, count: int) -> float:
        stamps = np.concatenate([r.ts for part in self._rows.values() for r in part])
        stamps = np.sort(stamps[~_below(stamps, self._released)])
        return int(stamps[min(count, len(stamps)) - 1]) + 1 if len(stamps) else self._released

    def _release(self, upto: float) -> None:
        if upto > self._released:
            self._released = upto


def _count_from(rows: _Rows, point: float) -> int:
    """How many of the rows are stamped at or after `point`."""
    if rows.first >= point:
        return len(rows)
    if rows.last < point:
        return 0
    if rows.ordered:
        return len(rows) - _cut_at(rows.ts, point)
    return int((~_below(rows.ts, point)).sum())


class _PagedRows:
    """One CPU's rows of a chunk, walked at once, handed out read by read (`take(pages)`)."""

    def __init__(self, ts: np.ndarray, etype: np.ndarray, ref: np.ndarray, length: np.ndarray, cpu: int, bid: int,
                 row_end: np.ndarray, page_ts: List[int], page_backwards: List[int], before: int) -> None:  # fmt: skip
        self.cols = (ts, etype, ref, length)
        self.cpu, self.bid = cpu, bid
        self.row_end, self.page_ts, self.page_backwards = row_end.tolist(), page_ts, page_backwards
        # the stamps of each page's first row and of its last (those of a page without rows are not read)
        starts = np.minimum(np.concatenate([[0], row_end[:-1]]), max(len(ts) - 1, 0)).astype(np.int64)
        self.first_ts = ts[starts].tolist() if len(ts) else []
        self.last_ts = ts[np.maximum(row_end - 1, 0)].tolist() if len(ts) else []
        self.backwards = before  # the walk's backwards count before the next page
        self.page = 0
        self.row = 0
        self.view: Optional[Tuple[int, int, bool, int, int]] = None  # rows held but not yet listed: start, end,
        # ordered, earliest and latest stamp
    def advance(self, pages: int) -> Tuple[int, int, bool, int, int, int]:
        """The next `pages` pages: their rows (start, end), ordered (unless one of them stepped back), the
        walk's time after them, and the rows' earliest and latest stamps (the first and the last of ordered
        rows; the earliest is the merge's test stamp; both 0 when there are no rows)."""
        first, last = self.page, self.page + pages - 1
        start, end = self.row, self.row_end[last]
        ordered = self.page_backwards[last] == self.backwards
        self.page, self.row, self.backwards = last + 1, end, self.page_backwards[last]
        if end <= start:
            return start, end, ordered, self.page_ts[last], 0, 0
        if ordered:  # rows [start, end) begin with the first page's first row, end with the last page's last
            return start, end, ordered, self.page_ts[last], self.first_ts[first], self.last_ts[last]
        stamps = self.cols[0][start:end]
        return start, end, ordered, self.page_ts[last], int(stamps.min()), int(stamps.max())

    def rows(self, start: int, end: int, ordered: bool) -> _Rows:
        ts, etype, ref, length = (col[start:end] for col in self.cols)
        return _Rows(ts, etype, ref, length, self.cpu, self.bid, ordered, self, start)

    def extend(self, start: int, end: int, ordered: bool, low: int, high: int) -> None:
        """Rows [start, end) (their earliest and latest stamps: advance's) join the pending view (they follow
        it: reads of one CPU come in order)."""
        if self.view is None or self.view[1] != start:
            self.view = (start, end, ordered, low, high)
            return
        v_start, _, v_ordered, v_low, v_last = self.view
        self.view = (v_start, end, v_ordered and ordered and v_last <= low, min(v_low, low), max(v_last, high))

    def take_view(self) -> Optional[_Rows]:
        """The pending view as rows (None when there is none); the next reads start a new one."""
        if self.view is None:
            return None
        start, end, ordered, low, high = self.view
        self.view = None
        ts, etype, ref, length = (col[start:end] for col in self.cols)
        return _Rows(ts, etype, ref, length, self.cpu, self.bid, ordered, self, start, (low, high))


def _reads(chunk: Chunk) -> Iterator[Tuple[int, int, Optional[Mark]]]:
    """The reads of a chunk as (first page, end page, mark): cut at its marks, the pages after the last one
    without a mark (as chunk_batches cuts them)."""
    start = 0
    for index, mark in chunk.marks:
        yield start, index, mark
        start = index
    if start < len(chunk.pages):
        yield start, len(chunk.pages), None


def chunk_batches(chunk: Chunk) -> Iterator[Batch]:
    """A chunk's pages as the live batches they were read in: cut where the live reads ended (their marks);
    pages after the last mark (the chunk was full before the read ended) come without one."""
    for lo, hi, mark in _reads(chunk):
        yield Batch(list(chunk.pages[lo:hi]), [], mark)


def block_timeline(header: PageHeader, decoders: Mapping[int, RecordDecoder], layouts: Any = None,
                   byteorder: str = sys.byteorder, **kwargs: Any) -> BlockTimeline:  # fmt: skip
    """A BlockTimeline of pages with this header, of the events `decoders` describe (their column plans made
    with the struct layouts given)."""
    from npu_trace.ftrace.columns import plans

    return BlockTimeline(header, decoders, plans([d.fmt for d in decoders.values()], byteorder, layouts),
                         byteorder=byteorder, **kwargs)  # fmt: skip


TAKE_ROWS = 1 << 16  # a live consumer takes a block once this many rows are pending...
TAKE_EVERY_S = 0.05  # ...or this long after its last take


class LiveBlocks:
    """A live consumer's side of a BlockTimeline: every read added, and what the merge released taken as one
    block once `rows` are pending, or `every_s` after the last take (on the clock given: pure logic), or at
    the end. The columnar analysis costs per block as well as per row: at a busy rate this hands over blocks
    of tens of thousands of rows instead of one per read (the pump reads every few ms), while a quiet session
    still gets its block, and its watermark, every `every_s`."""

    def __init__(self, timeline: BlockTimeline, clock: Any, rows: int = TAKE_ROWS,
                 every_s: float = TAKE_EVERY_S) -> None:  # fmt: skip
        self.timeline, self.clock, self.rows, self.every_s = timeline, clock, rows, every_s
        self._last = clock()

    def push(self, batch: Batch) -> Optional[Block]:
        """Add one read; the block to analyse now, or None (nothing taken: the watermark stays where the rows
        taken so far end, so a consumer advances time only with the rows before it)."""
        timeline = self.timeline
        timeline.add(batch)
        now = self.clock()
        if timeline.ended or timeline.pending_rows >= self.rows or now - self._last >= self.every_s:
            self._last = now
            return timeline.take()
        return None
