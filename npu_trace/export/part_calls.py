"""The calls, submits, allocations and tasks of a block drawn as columns (npu_trace.export.drawing): the
mapper's _call, _submit, _alloc and task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export.parts import MIN, Part, _int_arg, _keep, chosen, picked, place
from npu_trace.export.pieces import CONST, INSTANT, SLICE, SUBKEYS, Pieces, factorize, split
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.rowargs import ArgSet, args_of, merge, put
from npu_trace.export.tracks import INSTANTS, flow_ids
from npu_trace.pipeline.vnormalize import KIND_CODE, NormBlock

if TYPE_CHECKING:
    from npu_trace.export.drawing import BlockDrawing

_SUBMIT = KIND_CODE["submit"]
_MIN = MIN


class Calls(Part):
    """Calls paired with their entry in the block: slices on their device's lanes (the mapper's _call)."""

    domain = "calls"

    def __init__(self, owner: BlockDrawing, nb: NormBlock, rows: np.ndarray, pieces: Pieces) -> None:
        super().__init__(owner, pieces)
        rows = rows[_pairable(nb, rows)]
        begin, end = nb.entry_ts[rows], nb.block.ts[rows]
        shown, b, e, clipped = self.window(begin, end)
        entry = nb.entry_pos[rows]
        ent, bad_e = args_of(nb, entry, owner.d.strings)
        ret, bad_r = args_of(nb, rows, owner.d.strings)
        sets = merge(ent, ret, len(rows))
        sets = put(owner.plain(nb, rows, sets), "clipped", CONST, True, clipped)
        flows, bad_f = _submit_flows(nb, rows, sets, end)
        ok = shown & _keep(len(rows), bad_e, bad_r, bad_f)
        self.rows = rows[_keep(len(rows), bad_e, bad_r, bad_f)]  # not shown: drawn as nothing, by either path
        layout, vals = owner.layout(sets, len(rows))
        sel = chosen(ok)
        self.keys = rows[sel] * SUBKEYS
        self.dev, self.b, self.e, self.layout_ = nb.dev[rows[sel]], b[sel], e[sel], layout[sel]
        self.vals = picked(vals, sel)
        self.name, self.flow = owner.op_names(nb, rows[sel]), flows[sel]

    def draw(self, lo: int, hi: int) -> None:
        self.opened(self.b[lo:hi])
        dev = self.dev[lo:hi]
        groups, first = factorize([dev])
        packers = [self._packer(d) for d in dev[first].tolist()]
        track = place(self.o, packers, groups, self.b[lo:hi], self.e[lo:hi])
        self.pieces.add(self.keys[lo:hi], SLICE, track, self.b[lo:hi], self.name[lo:hi], self.layout_[lo:hi],
                        list(self.vals[:, lo:hi]), self.e[lo:hi], flow_out=self.flow[lo:hi])  # fmt: skip
        self.m.counts["calls"] += hi - lo

    def _packer(self, d: int) -> Any:
        m, dev = self.m, None if d < 0 else d
        return m._packer(("calls", dev), lambda lane: m._calls_track(dev, lane))


class Submits(Part):
    """Submits without a call (a driver's submit tracepoint, a return without its entry): instants on their
    stream (the mapper's _submit)."""

    domain = "streams"

    @property
    def begins(self) -> np.ndarray:
        return self.ts

    def __init__(self, owner: BlockDrawing, nb: NormBlock, rows: np.ndarray, pieces: Pieces) -> None:
        super().__init__(owner, pieces)
        rows = rows[_plain_rows(nb, rows)]
        ts = nb.block.ts[rows]
        sets, bad = args_of(nb, rows, owner.d.strings)
        stream, task = _int_arg(sets, "stream", len(rows)), _int_arg(sets, "task", len(rows))
        dev = nb.dev[rows]
        ok = _keep(len(rows), bad) & stream[2] & task[2]
        self.rows = rows[ok]
        flows = flow_ids("task", (dev, dev >= 0), stream[:2], task[:2], ts)
        layout, vals = owner.layout(owner.plain(nb, rows, sets), len(rows))
        sel = chosen(ok & self.inside(ts))
        self.keys, self.ts, self.dev = rows[sel] * SUBKEYS, ts[sel], dev[sel]
        self.stream = np.where(stream[1], stream[0], _MIN)[sel]
        self.layout_, self.vals, self.flow = layout[sel], picked(vals, sel), flows[sel]
        self.name = owner.op_names(nb, rows[sel], "submit ")

    def draw(self, lo: int, hi: int) -> None:
        self.opened(self.ts[lo:hi])
        track: np.ndarray = np.zeros(hi - lo, dtype=np.int64)
        line = [self.dev[lo:hi], self.stream[lo:hi]]
        groups, first = factorize(line)
        for g, at in enumerate(split(groups, len(first))):
            d, s = (int(c[first[g]]) for c in line)
            got = self.m._stream_first(None if d < 0 else d, None if s == _MIN else s)
            track[at] = self.o.track_code(got)
        self.pieces.add(self.keys[lo:hi], INSTANT, track, self.ts[lo:hi], self.name[lo:hi], self.layout_[lo:hi],
                        list(self.vals[:, lo:hi]), flow_out=self.flow[lo:hi])  # fmt: skip


class Allocs(Part):
    """Allocations: instants on their device's memory track (the mapper's _alloc)."""

    domain = "allocs"

    @property
    def begins(self) -> np.ndarray:
        return self.ts

    def __init__(self, owner: BlockDrawing, nb: NormBlock, rows: np.ndarray, pieces: Pieces) -> None:
        super().__init__(owner, pieces)
        rows = rows[nb.group_of[rows] >= 0]
        ts = nb.block.ts[rows]
        sets, bad = args_of(nb, rows, owner.d.strings)
        ok = _keep(len(rows), bad)
        self.rows = rows[ok]
        layout, vals = owner.layout(owner.plain(nb, rows, sets), len(rows))
        sel = chosen(ok & self.inside(ts) & (nb.dev[rows] >= 0))
        self.keys, self.ts, self.dev = rows[sel] * SUBKEYS, ts[sel], nb.dev[rows[sel]]
        self.layout_, self.vals = layout[sel], picked(vals, sel)
        self.name = owner.d.names.code("alloc")

    def draw(self, lo: int, hi: int) -> None:
        self.opened(self.ts[lo:hi])
        dev = self.dev[lo:hi]
        track: np.ndarray = np.zeros(hi - lo, dtype=np.int64)
        groups, first = factorize([dev])
        for d, at in zip(dev[first].tolist(), split(groups, len(first))):
            track[at] = self.o.track_code(self.m._memory_child(d, "allocations", INSTANTS, 1))
        self.pieces.add(self.keys[lo:hi], INSTANT, track, self.ts[lo:hi], self.name, self.layout_[lo:hi],
                        list(self.vals[:, lo:hi]))  # fmt: skip


class Tasks(Part):
    """Tasks the latency detector paired: slices submit -> completion on their stream's lanes, a flow from their
    submit (the mapper's task)."""

    domain = "streams"

    def __init__(self, owner: BlockDrawing, nb: NormBlock, rows: np.ndarray, submitted: np.ndarray, base: int,
                 pieces: Pieces) -> None:  # fmt: skip
        super().__init__(owner, pieces)
        planned = nb.group_of[rows] >= 0
        sets, bad = args_of(nb, rows[planned], owner.d.strings)
        sets = [ArgSet(np.flatnonzero(planned)[s.at], s.keys) for s in sets]
        bad = np.flatnonzero(planned)[bad]
        stream, task = _int_arg(sets, "stream", len(rows)), _int_arg(sets, "task", len(rows))
        ok = planned & _keep(len(rows), bad) & stream[2] & task[2]
        self.alone = np.flatnonzero(~ok)  # positions drawn one by one
        dev = nb.dev[rows]
        end = nb.block.ts[rows]
        shown, b, e, clipped = self.window(submitted, end)
        shown &= ok & self._wanted(dev)
        sets = put(owner.plain(nb, rows, sets), "clipped", CONST, True, clipped)
        sets = put(sets, "submit_ts_ns", INT_ARG, submitted.astype(np.int64))
        layout, vals = owner.layout(sets, len(rows))
        flows = flow_ids("task", (dev, dev >= 0), stream[:2], task[:2], submitted)
        sel = np.flatnonzero(shown)
        self.keys = (base + sel) * SUBKEYS
        self.b, self.e, self.dev, self.layout_ = b[sel], e[sel], dev[sel], layout[sel]
        self.vals = picked(vals, sel)
        self.stream = np.where(stream[1], stream[0], _MIN)[sel]
        self.flow = flows[sel]
        self.name = owner.d.names.code("task")

    def _wanted(self, dev: np.ndarray) -> np.ndarray:
        devices = self.m.devices
        return np.ones(len(dev), dtype=bool) if devices is None else (dev >= 0) & np.isin(dev, sorted(devices))

    def draw(self, lo: int, hi: int) -> None:
        self.opened(self.b[lo:hi])
        line = [self.dev[lo:hi], self.stream[lo:hi]]
        groups, first = factorize(line)
        packers = []
        for d, s in zip(line[0][first].tolist(), line[1][first].tolist()):
            dev, stream = None if d < 0 else d, None if s == _MIN else s
            packers.append(self.m._packer(("stream", dev, stream), _stream_lanes(self.m, dev, stream)))
        track = place(self.o, packers, groups, self.b[lo:hi], self.e[lo:hi])
        self.pieces.add(self.keys[lo:hi], SLICE, track, self.b[lo:hi], self.name, self.layout_[lo:hi],
                        list(self.vals[:, lo:hi]), self.e[lo:hi], flow_in=self.flow[lo:hi])  # fmt: skip
        self.m.counts["tasks"] += hi - lo


def _pairable(nb: NormBlock, rows: np.ndarray) -> np.ndarray:
    """Calls whose latency is the pairing's, with their entry in the block, both of planned formats that carry
    no latency of their own."""
    ok = nb.paired[rows] & (nb.group_of[rows] >= 0) & (nb.entry_pos[rows] >= 0)
    ok[ok] = nb.group_of[nb.entry_pos[rows[ok]]] >= 0
    return ok & _no_pairing_args(nb, rows) & _no_pairing_args(nb, np.where(ok, nb.entry_pos[rows], rows))


def _plain_rows(nb: NormBlock, rows: np.ndarray) -> np.ndarray:
    """Rows of planned formats, not paired, carrying no latency of their own."""
    return (nb.group_of[rows] >= 0) & ~nb.paired[rows] & _no_pairing_args(nb, rows)


def _no_pairing_args(nb: NormBlock, rows: np.ndarray) -> np.ndarray:
    """Rows of no format that carries a pairing argument itself (every row when no format of the block does)."""
    carrying = nb.carrying_latency()
    if not carrying.any():
        return np.ones(len(rows), dtype=bool)
    return ~carrying[nb.group_of[rows]]


def _submit_flows(nb: NormBlock, rows: np.ndarray, sets: Sequence[ArgSet],
                  end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The flow each submitting call starts (kind submit with a stream: 0 for the others) and the positions
    whose stream or task is not an integer (drawn one by one)."""
    stream, task = _int_arg(sets, "stream", len(rows)), _int_arg(sets, "task", len(rows))
    submit = nb.kind[rows] == _SUBMIT
    has = np.flatnonzero(submit & stream[1])  # the ids of those only
    dev = nb.dev[rows[has]]
    flows: np.ndarray = np.zeros(len(rows), dtype=np.int64)
    flows[has] = flow_ids("task", (dev, dev >= 0), (stream[0][has], stream[1][has]), (task[0][has], task[1][has]),
                          end[has])  # fmt: skip
    return flows, np.flatnonzero(submit & ~(stream[2] & task[2]))


def _stream_lanes(m: Any, dev: Optional[int], stream: Any) -> Callable[[int], Any]:
    """The tracks of a stream's lanes (the mapper's _stream_track)."""
    return lambda lane: m._stream_track(dev, stream, lane)
