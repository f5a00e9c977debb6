"""What the columnar drawing of a block (npu_trace.export.drawing) is made of: a `Part` draws one hot kind as
columns, in key order, keeping the mapper's state as the mapper does; the helpers its kinds share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple, Union

import numpy as np

from npu_trace.export.lanes import add_runs
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.pieces import Pieces
from npu_trace.export.rowargs import ArgSet
from npu_trace.pipeline.order import stable_order

if TYPE_CHECKING:
    from npu_trace.export.drawing import BlockDrawing
    from npu_trace.export.track_map import LanePacker

MIN = -(1 << 63)


class Part:
    """Things of one kind drawn as columns, in key order: `run(upto)` draws those keyed before `upto` (None:
    all the rest); `rows` are the block's rows it takes (the others of its kind go one by one); `domain`
    names the mapper's state it shares with things drawn one by one (see _DOMAINS); `keys` and `ts` are
    those of what it shows."""

    domain = ""

    def __init__(self, owner: BlockDrawing, pieces: Pieces) -> None:
        self.o = owner
        self.m = owner.m
        self.pieces = pieces
        self.rows: np.ndarray = np.zeros(0, np.int64)
        self.keys: np.ndarray = np.zeros(0, np.int64)
        self.at = 0

    def run(self, upto: Optional[int]) -> None:
        stop = len(self.keys) if upto is None else int(np.searchsorted(self.keys, upto))
        if stop > self.at:
            self.draw(self.at, stop)
            self.at = stop

    def draw(self, lo: int, hi: int) -> None:
        raise NotImplementedError

    def first_shown(self, upto: int) -> Optional[int]:
        """The stamp of the first thing not drawn yet that it shows, keyed before `upto` (None: none)."""
        if self.at < len(self.keys) and self.keys[self.at] < upto:
            return int(self.begins[self.at])
        return None

    @property
    def begins(self) -> np.ndarray:
        return self.b  # type: ignore[attr-defined]

    def window(self, begin: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(shown, span begin, span end, clipped) of [begin, end] cut to the window (the mapper's _span)."""
        lo, hi = self.m.lo, self.m.hi
        shown = ~((end < lo) | (begin >= hi) | (end < begin))
        b, e = np.maximum(begin, lo), np.minimum(end, hi)
        return shown, b, e, (b != begin) | (e != end)

    def inside(self, ts: np.ndarray) -> np.ndarray:
        return (ts >= self.m.lo) & (ts < self.m.hi)

    def opened(self, ts: np.ndarray) -> None:
        if len(ts) and not self.m.opened:
            self.o.open_at(int(ts[0]))


def _int_arg(sets: Sequence[ArgSet], name: str, n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, present, usable) of an argument that must be an integer column or absent to be drawn as
    columns (usable False where it is something else)."""
    values: np.ndarray = np.zeros(n, np.int64)
    present: np.ndarray = np.zeros(n, bool)
    usable: np.ndarray = np.ones(n, bool)
    for s in sets:
        got = s.value(name)
        if got is None:
            continue
        kind, v = got
        if kind == INT_ARG:
            values[s.at], present[s.at] = v, True
        else:
            usable[s.at] = False
    return values, present, usable


Chosen = Union[np.ndarray, slice]


def chosen(ok: np.ndarray) -> Chosen:
    """The positions where `ok`, to index columns with: every position as a slice (each column indexed by it
    is itself, not a copy of it: nearly every row of a block is drawn)."""
    sel = np.flatnonzero(ok)
    return slice(None) if len(sel) == len(ok) else sel


def picked(vals: np.ndarray, sel: Chosen) -> np.ndarray:
    """The value rows' columns `sel` (`chosen`'s), each row's values side by side (vals[:, sel] of positions is
    not: a copy of each row when the pieces are written, and slower to make)."""
    if isinstance(sel, slice):
        return vals[:, sel]
    out: np.ndarray = vals.take(sel, axis=1)
    return out


def _keep(n: int, *bad: np.ndarray) -> np.ndarray:
    ok: np.ndarray = np.ones(n, dtype=bool)
    for b in bad:
        ok[b] = False
    return ok


def place(owner: BlockDrawing, packers: Sequence[LanePacker], group: np.ndarray, begins: np.ndarray,
          ends: np.ndarray) -> np.ndarray:  # fmt: skip
    """The track code of each slice placed on its group's lanes (`group`: a number into `packers`; within a
    group the slices in key order, their ends in order): what LanePacker.place() gives each in turn. A slice
    that begins at or after the end of the one before it in its group (and of every lane of its group, for the
    first) fits the first lane: the groups all of those are added to theirs at once (add_runs); the others,
    slice by slice."""
    order = stable_order(group)
    g, b, e = group[order], begins[order], ends[order]
    head: np.ndarray = np.ones(len(g), dtype=bool)
    head[1:] = g[1:] != g[:-1]
    before: np.ndarray = np.empty(len(g), dtype=np.int64)
    before[1:] = e[:-1]
    starts = np.flatnonzero(head)
    firsts = g[starts].tolist()
    tops = [max((lane.last_end for lane in packers[k].lanes), default=None) for k in firsts]
    before[starts] = [MIN if t is None else t for t in tops]
    simple = b >= before
    simple[starts] = simple[starts] & np.array([t is not None for t in tops], dtype=bool)
    codes: np.ndarray = np.empty(len(g), dtype=np.int64)
    bounds = np.append(starts, len(g))
    edges = bounds.tolist()
    first_lane_only = np.logical_and.reduceat(simple, starts).tolist() if len(g) else []
    for k, simple_run in enumerate(first_lane_only):
        packer, lo, hi = packers[firsts[k]], edges[k], edges[k + 1]
        if simple_run:
            codes[lo:hi] = owner.track_code(packer.lanes[0].track)
        else:
            codes[lo:hi] = _track_codes(owner, packer, packer.place_many(b[lo:hi], e[lo:hi]))
    whole = np.flatnonzero(first_lane_only)
    if len(whole):
        first_lanes = [packers[firsts[k]].lanes[0] for k in whole.tolist()]
        add_runs(first_lanes, b, e, bounds[whole], bounds[whole + 1])
    out: np.ndarray = np.empty(len(g), dtype=np.int64)
    out[order] = codes
    return out


def _track_codes(owner: BlockDrawing, packer: LanePacker, lanes: np.ndarray) -> np.ndarray:
    """The track code of each lane number."""
    codes = np.array([owner.track_code(lane.track) for lane in packer.lanes], dtype=np.int64)
    return codes[lanes]
