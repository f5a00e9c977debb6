"""The lanes of a group of slices (a device's calls, one stream's tasks, one interrupt line): each slice on the
first lane where it nests properly with what is there, so that overlapping slices land on separate tracks.

`Lane` keeps the outermost slices given to it lately; `LanePacker` places a group's slices in the order of their
ends, one at a time (`place`, what the mapper calls: npu_trace.export.track_map) or many at once (`place_many`,
what the columnar drawing calls: npu_trace.export.parts); `add_runs` gives many groups' first lanes a run of
slices each (Lane.add_run) at once. Two implementations of `place_many` and `add_runs`, identical in every lane
and lane number: the C extension `npu_trace.export._lanes` (built by the package's install where a compiler
is), which runs the loops on the lanes' roots as int64 values, and `place_many_py`, `add_runs_py` in numpy and
Python. `IMPLEMENTATION` says which runs ("c" or "python").
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Callable, List, Sequence, Tuple

import numpy as np

from npu_trace.export.tracks import Track

try:
    from npu_trace.export import _lanes
except ImportError:  # installed where no compiler was: the Python twin, with the same results
    _lanes = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _lanes is not None else "python"
MAX_ROOTS = 256  # slices a lane remembers to check the nesting of the next (see Lane)
_MIN = -(1 << 63)


class Lane:
    """One track of a lane group: the outermost slices given to it lately (`roots`: disjoint, in time order,
    so their begins and their ends both ascend: kept as two arrays of int64, searched by bisection).

    A new slice [b, e] (e at least every end before) nests properly there when every root that ends after b
    starts after b (the new slice then contains it). Ties are decided by the file order a stable sort keeps:
    a root ending at b is closed before the new slice opens; a root starting at b is refused (it would open
    first). Roots older than the last MAX_ROOTS are forgotten: a slice starting before the end of one
    forgotten (`floor`) is refused rather than risked."""

    __slots__ = ("begins", "ends", "floor", "last_end", "track")

    def __init__(self, track: Track) -> None:
        self.track = track
        self.begins = array("q")
        self.ends = array("q")
        self.floor = -(1 << 63)
        self.last_end = -(1 << 63)

    @property
    def roots(self) -> List[Tuple[int, int]]:
        return list(zip(self.begins, self.ends))

    def fits(self, begin: int, end: int) -> bool:
        if end < self.last_end or begin < self.floor:
            return False
        after = bisect_right(self.ends, begin)  # the roots ending after `begin` follow
        return after == len(self.ends) or self.begins[after] > begin

    def add(self, begin: int, end: int) -> None:
        keep = bisect_right(self.ends, begin)  # the others are nested in the new slice
        del self.begins[keep:], self.ends[keep:]
        self.begins.append(begin)
        self.ends.append(end)
        self._forget(end)

    def add_run(self, begins: np.ndarray, ends: np.ndarray) -> None:
        """add() of slices each beginning at or after the end of every root and of the slice before it (none
        nests another): all appended (the last MAX_ROOTS + 1 of them say all that is kept)."""
        self.begins.extend(begins[-MAX_ROOTS - 1 :].tolist())
        self.ends.extend(ends[-MAX_ROOTS - 1 :].tolist())
        self._forget(int(ends[-1]))

    def _forget(self, last_end: int) -> None:
        """The roots past MAX_ROOTS forgotten, the floor at the end of the last of them."""
        extra = len(self.ends) - MAX_ROOTS
        if extra > 0:
            self.floor = self.ends[extra - 1]
            del self.begins[:extra], self.ends[:extra]
        self.last_end = last_end


def add_runs(lanes: Sequence[Lane], begins: np.ndarray, ends: np.ndarray, starts: np.ndarray,
             stops: np.ndarray) -> None:  # fmt: skip
    """Lane.add_run of slices starts[k] .. stops[k] on lanes[k], for each k in turn (each run holds a slice at
    least): the compiled loop where it is built."""
    if _lanes is None:
        add_runs_py(lanes, begins, ends, starts, stops)
        return
    b, e = np.ascontiguousarray(begins, np.int64), np.ascontiguousarray(ends, np.int64)
    lo, hi = np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(stops, np.int64)
    _lanes.add_runs(list(lanes), b, e, lo, hi, MAX_ROOTS)


def add_runs_py(lanes: Sequence[Lane], begins: np.ndarray, ends: np.ndarray, starts: np.ndarray,
                stops: np.ndarray) -> None:  # fmt: skip
    """add_runs() in Python: each lane's run given to it in turn."""
    for lane, lo, hi in zip(lanes, np.asarray(starts).tolist(), np.asarray(stops).tolist()):
        lane.add_run(begins[lo:hi], ends[lo:hi])


class LanePacker:
    """Slices of one group (a device's calls, one stream's tasks, one interrupt line) given in the order of
    their ends: each on the first lane it fits (`Lane`), a new lane when none does."""

    def __init__(self, new_track: Callable[[int], Track]) -> None:
        self.new_track = new_track
        self.lanes: List[Lane] = []

    def place(self, begin: int, end: int) -> Track:
        for lane in self.lanes:
            if lane.fits(begin, end):
                lane.add(begin, end)
                return lane.track
        lane = self._new_lane()
        lane.add(begin, end)
        return lane.track

    def _new_lane(self) -> Lane:
        lane = Lane(self.new_track(len(self.lanes)))
        self.lanes.append(lane)
        return lane

    def place_many(self, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """place() of each slice in turn (ends in order): the lane number of each (see place_many_py; the
        compiled loop where it is built, a lane added each time it stops at a slice no lane fits)."""
        if _lanes is None:
            return self.place_many_py(begins, ends)
        b, e = np.ascontiguousarray(begins, np.int64), np.ascontiguousarray(ends, np.int64)
        lanes: np.ndarray = np.zeros(len(b), dtype=np.int64)
        at = _lanes.place_many(self.lanes, b, e, lanes, 0, MAX_ROOTS)
        while at < len(b):
            self._new_lane()
            at = _lanes.place_many(self.lanes, b, e, lanes, at, MAX_ROOTS)
        return lanes

    def place_many_py(self, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """place_many() in Python: the lane number of each slice (ends in order). A slice that begins at or
        after every end before it fits the first lane (what place() finds there: every root ends before it);
        runs of those are added to it at once, the others placed one by one."""
        n = len(begins)
        lanes: np.ndarray = np.zeros(n, dtype=np.int64)
        if not n:
            return lanes
        top = max((lane.last_end for lane in self.lanes), default=None)
        before: np.ndarray = np.empty(n, dtype=np.int64)
        before[0] = _MIN if top is None else top
        before[1:] = np.maximum.accumulate(ends[:-1])
        if top is not None:
            before[1:] = np.maximum(before[1:], top)
        simple = begins >= before
        if not self.lanes:
            simple[0] = False  # the first lane is made by place()
        others = np.flatnonzero(~simple).tolist()
        at = 0
        for i in [*others, n]:
            if i > at:
                self.lanes[0].add_run(begins[at:i], ends[at:i])
            if i < n:
                track = self.place(int(begins[i]), int(ends[i]))
                lanes[i] = next(k for k, lane in enumerate(self.lanes) if lane.track is track)
            at = i + 1
        return lanes

    def first(self) -> Track:
        """The group's first lane (instants of the group go there)."""
        if not self.lanes:
            self.lanes.append(Lane(self.new_track(0)))
        return self.lanes[0].track
