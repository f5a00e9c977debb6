"""The columnar timeline: `Timeline`'s batches in, `Timeline`'s items in `Timeline`'s order out, as Blocks.

`BlockTimeline` is the fast path's twin of `npu_trace.pipeline.timeline.Timeline`: the same batches (raw
pages per CPU, the channels' items, marks), the same watermarks, bounds and late-item rule as the ordered
merge (`npu_trace.pipeline.merge`), and the same released sequence, but no object per record. Each CPU's
pages are walked in compiled code (`npu_trace.ftrace.walk`: timestamps, event ids, offsets), each record stays
where it lies in the batch's bytes until a `Block` gathers its format's fixed fields as numpy columns
(`npu_trace.pipeline.blocks`); only the channels' items and the losses are objects.

Why the sequence is the merge's. Every push and every release happens per batch, as the merge does them;
what is deferred is only the moving of rows. Let R_p be the merge's release point after batch p (its
`released`: the running maximum of the bounds). An item pushed in batch p that is not late has ts >= R_{p-1},
so it leaves in the first release whose R exceeds its ts: which release an item leaves in is a function of
its stamp alone, and the concatenated releases are the held items with ts < R sorted by (ts, stream key,
arrival), which is one stable sort by stamp of the rows laid out stream by stream. The items a release puts
at its front (untimed items, the "late" losses) go where that release began: after every item stamped before
R_{p-1}. `take()` therefore hands over, in one Block, all that the releases since the last call released, in
the order the merge would have, whatever the number of batches in between (`check` takes large blocks, a
live view takes one per read).

The merge's bounds are the merge's: the lag bound from the watermarks, the count bound (`max_held`) from the
number of rows held, counted exactly as the merge counts its items, and its cut from the held rows' stamps.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from npu_trace.events import Loss, LossLedger
from npu_trace.ftrace.columns import FormatColumns
from npu_trace.ftrace.decode import RecordDecoder
from npu_trace.ftrace.format import PageHeader
from npu_trace.ftrace.walk import WalkState, walk, wants
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS, Batch, Mark
from npu_trace.pipeline.blocks import OBJECT, Block, build_block, empty_block
from npu_trace.pipeline.merge import CHANNELS, MAX_HELD, MAX_LAG_NS, late_key, release_bound

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
SEGMENT = 4 << 20  # bytes of pages per arena segment: a block's records lie in few buffers


def _i64(value: float) -> int:
    """A release point or a stamp as an int64 (the infinities at the ends of the range)."""
    if value == math.inf:
        return I64_MAX
    if value == -math.inf:
        return I64_MIN
    v = int(value) & ((1 << 64) - 1)
    return v - (1 << 64) if v >> 63 else v


class _Rows:
    """Rows of one stream pushed in one batch (or what is left of them): columns, the stream key, and the
    stamps' range (to release whole chunks without looking at their rows)."""

    __slots__ = ("bid", "buf", "cpu", "etype", "first", "last", "length", "ref", "ts")

    def __init__(self, ts: np.ndarray, etype: np.ndarray, ref: np.ndarray, length: np.ndarray, buf: np.ndarray,
                 cpu: np.ndarray, bid: int = -1) -> None:  # fmt: skip
        self.ts, self.etype, self.ref, self.length, self.buf, self.cpu = ts, etype, ref, length, buf, cpu
        self.bid = bid  # the one buffer its records lie in (-1: none, or several)
        self.first = int(ts.min()) if len(ts) else I64_MAX
        self.last = int(ts.max()) if len(ts) else I64_MIN

    def __len__(self) -> int:
        return len(self.ts)

    def select(self, mask: np.ndarray) -> _Rows:
        return _Rows(self.ts[mask], self.etype[mask], self.ref[mask], self.length[mask], self.buf[mask],
                     self.cpu[mask], self.bid)  # fmt: skip


def _concat(parts: Sequence[_Rows]) -> _Rows:
    if len(parts) == 1:
        return parts[0]
    return _Rows(*(np.concatenate([getattr(p, name) for p in parts])
                   for name in ("ts", "etype", "ref", "length", "buf", "cpu")))  # fmt: skip


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
            return bid, self.buffers[bid], _offsets(pages, 0)
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
        return self._segment_id, seg, _offsets(pages, start)

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


def _offsets(pages: Sequence[bytes], start: int) -> List[int]:
    out, pos = [], start
    for page in pages:
        out.append(pos)
        pos += len(page)
    return out


class BlockTimeline:
    def __init__(
        self,
        header: PageHeader,
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
    ) -> None:
        """`decoders`: the record decoders of the events to decode (the others are stepped over and counted,
        as a PageDecoder over them does); `plans`: their column plans. `cpus`, `channels`: the streams that
        exist from the start (see Timeline)."""
        self.header = header
        self.plans = plans
        self.byteorder = byteorder
        self.wanted = wants(decoders)
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
        self._held: Dict[int, List[_Rows]] = {}  # stream key -> its rows not yet released, in arrival order
        self.held = 0  # rows held (the merge's count of items held)
        self._released: float = -math.inf
        self._out: List[_Rows] = []  # rows released since the last take(), by stream, in key order per release
        self._fronts: List[Tuple[int, _Rows]] = []  # (the release point before them, rows) since the last take
        self._out_rows = 0
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
    def released_rows(self) -> int:
        """Rows released and not yet taken."""
        return self._out_rows

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
            self._push_objects(CHANNELS, list(batch.events), late, front)
        if batch.mark is not None:
            self._mark(batch.mark)
        if late:
            base = int(self._released) if math.isfinite(self._released) else 0
            losses = [Loss(source, cpu, "late", n, base) for (source, cpu), n in sorted(late.items())]
            for loss in losses:
                self.ledger.add(loss)
                self.late[(loss.source, loss.cpu)] = self.late.get((loss.source, loss.cpu), 0) + loss.lost
            front.append(self._object_rows(losses))
        if front:
            rows = _concat(front)
            self._fronts.append((_i64(self._released), rows))
            self._out_rows += len(rows)
        if batch.final:
            self.ended = True
            self._release(math.inf)
        else:
            self._release(self._bound())

    def take(self) -> Block:
        """Everything released since the last call, in the merge's order, as one Block."""
        if not self._out and not self._fronts:
            return empty_block()
        rows = _concat(self._out) if self._out else None
        order = np.argsort(rows.ts, kind="stable") if rows is not None else np.zeros(0, np.int64)
        if self._fronts:
            rows, order = self._with_fronts(rows, order)
        assert rows is not None
        self._out, self._fronts, self._out_rows = [], [], 0
        ts, etype, ref = rows.ts[order], rows.etype[order], rows.ref[order]
        length, buf, cpu = rows.length[order], rows.buf[order], rows.cpu[order]
        objects: List[Any] = []
        is_obj = etype == OBJECT
        if is_obj.any():
            at = np.flatnonzero(is_obj)
            objects = [self._objects.pop(i) for i in ref[at].tolist()]
            ref = ref.copy()
            ref[at] = np.arange(len(at))
        bufs = self._arena.buffers
        ids = np.unique(buf[~is_obj]).tolist() if len(buf) else []
        local = np.zeros(len(buf), dtype=np.int32)
        for i, b in enumerate(ids):
            local[buf == b] = i
        block = build_block(ts, cpu, etype, ref, length, local, [bufs[b] for b in ids], self.plans, objects)
        self._arena.keep_only(rows_.bid for part in self._held.values() for rows_ in part)
        return block

    def _with_fronts(self, rows: Optional[_Rows], order: np.ndarray) -> Tuple[_Rows, np.ndarray]:
        """The released rows with each release's front placed where that release began."""
        stamps = rows.ts[order] if rows is not None else np.zeros(0, np.int64)
        n = len(stamps)
        parts, pieces, base = [], [], n
        start = 0
        for point, front in self._fronts:
            at = int(np.searchsorted(stamps, point, side="left")) if point != I64_MIN else 0
            at = max(at, start)
            pieces.append(order[start:at])
            pieces.append(np.arange(base, base + len(front)))
            parts.append(front)
            base += len(front)
            start = at
        pieces.append(order[start:])
        all_rows = _concat([*([rows] if rows is not None else []), *parts])
        return all_rows, np.concatenate(pieces).astype(np.int64)

    # ---- pushing ---------------------------------------------------------------------------------------------
    def _walk(self, pages: Sequence[Tuple[int, bytes]], late: Dict[Tuple[str, int], int], front: List[_Rows]) -> None:
        bid, buffer, offsets = self._arena.put([page for _, page in pages])
        per_cpu: Dict[int, List[Tuple[int, int]]] = {}
        for (cpu, page), offset in zip(pages, offsets):
            per_cpu.setdefault(cpu, []).append((offset, len(page)))
        for cpu, index in per_cpu.items():
            state = self.states.get(cpu)
            if state is None:
                state = self.states[cpu] = WalkState()
            backwards = state.backwards
            got = walk(buffer, index, self.header, cpu, state, self.wanted, self.byteorder)
            self.events += len(got.ts)
            n = len(got.ts)
            rows = _Rows(got.ts, got.etype.astype(np.int32), got.offset, got.length.astype(np.int64),
                         np.full(n, bid, np.int32), np.full(n, cpu, np.int16), bid)  # fmt: skip
            if got.losses:
                for _, loss in got.losses:
                    self.ledger.add(loss)
                rows = self._interleave(rows, got.losses)
            ordered = state.backwards == backwards and _ascending(rows.ts)
            self._push(cpu, rows, ordered, late, front)
            self._advance(cpu, state.last_ts)

    def _interleave(self, rows: _Rows, losses: List[Tuple[int, Loss]]) -> _Rows:
        """The walk's losses put back among its records, where the page decoder emits them."""
        objs = self._object_rows([loss for _, loss in losses])
        at = np.array([i for i, _ in losses], dtype=np.int64)
        n = len(rows) + len(at)
        is_obj = np.zeros(n, dtype=bool)
        pos = at + np.arange(len(at))
        is_obj[pos] = True
        def mix(name: str) -> np.ndarray:
            col = np.empty(n, dtype=getattr(rows, name).dtype)
            col[~is_obj] = getattr(rows, name)
            col[pos] = getattr(objs, name)
            return col

        return _Rows(mix("ts"), mix("etype"), mix("ref"), mix("length"), mix("buf"), mix("cpu"), rows.bid)

    def _push_objects(self, key: int, items: List[Any], late: Dict[Tuple[str, int], int], front: List[_Rows]) -> None:
        self._push(key, self._object_rows(items), False, late, front)

    def _object_rows(self, items: Sequence[Any]) -> _Rows:
        n = len(items)
        ids = np.arange(self._next_object, self._next_object + n, dtype=np.int64)
        for i, item in zip(ids.tolist(), items):
            self._objects[i] = item
        self._next_object += n
        ts = np.array([_i64(item.ts_ns) for item in items], dtype=np.int64)
        cpu = np.array([int(getattr(item, "cpu", -1)) for item in items], dtype=np.int16)
        return _Rows(ts, np.full(n, OBJECT, np.int32), ids, np.zeros(n, np.int64), np.full(n, -1, np.int32), cpu)

    def _push(self, key: int, rows: _Rows, ordered: bool, late: Dict[Tuple[str, int], int],
              front: List[_Rows]) -> None:  # fmt: skip
        """The merge's push: untimed rows go to the front, rows older than the release point are dropped and
        counted (the merge's test: the first row of an ordered push, the earliest of another)."""
        if not len(rows):
            return
        first = int(rows.ts[0]) if ordered else rows.first
        released = self._released
        if first < released or not first:
            untimed = rows.ts == 0
            dropped = ~untimed & (rows.ts < _i64(released))
            if untimed.any():
                front.append(rows.select(untimed))
            if dropped.any():
                self._count_late(key, rows, dropped, late)
            rows = rows.select(~untimed & ~dropped)
            if not len(rows):
                return
        self._held.setdefault(key, []).append(rows)
        self.held += len(rows)
        if key not in self._wm:
            self._wm[key] = -math.inf

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
        for cpu in mark.caught_up:
            self._advance(cpu, floor)
        if mark.channels_ns is not None:
            self._advance(CHANNELS, mark.channels_ns)

    # ---- releasing -----------------------------------------------------------------------------------------
    def _bound(self) -> float:
        low, forced = release_bound(list(self._wm.values()), self._released, self.max_lag_ns, self.held,
                                    self.max_held, self._cut)  # fmt: skip
        self.forced += forced
        return low

    def _cut(self, count: int) -> float:
        stamps = np.sort(np.concatenate([r.ts for part in self._held.values() for r in part]))
        return int(stamps[min(count, len(stamps)) - 1]) + 1 if len(stamps) else self._released

    def _release(self, upto: float) -> None:
        if upto <= self._released and upto != math.inf:
            return
        if upto > self._released:
            self._released = upto
        point = _i64(upto)
        released = 0
        for key in sorted(self._held):
            kept: List[_Rows] = []
            for rows in self._held[key]:
                if rows.last < point or upto == math.inf:
                    self._out.append(rows)
                    released += len(rows)
                elif rows.first >= point:
                    kept.append(rows)
                else:
                    below = rows.ts < point
                    self._out.append(rows.select(below))
                    kept.append(rows.select(~below))
                    released += int(below.sum())
            if kept:
                self._held[key] = kept
            else:
                del self._held[key]
        self.held -= released
        self._out_rows += released


def _ascending(ts: np.ndarray) -> bool:
    return bool(len(ts) < 2 or (ts[1:] >= ts[:-1]).all())


def block_timeline(decoders: Any, layouts: Any = None, **kwargs: Any) -> BlockTimeline:
    """A BlockTimeline over the same formats and page header as `decoders` (a CpuDecoders)."""
    from npu_trace.ftrace.columns import plans

    table = decoders.decoders
    return BlockTimeline(decoders.header, table, plans([d.fmt for d in table.values()], decoders.byteorder, layouts),
                         byteorder=decoders.byteorder, ledger=decoders.ledger, **kwargs)  # fmt: skip
