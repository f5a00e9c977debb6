"""The memory detector's changes of a block drawn as columns (npu_trace.export.drawing): the mapper's
memory()."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export.parts import Part
from npu_trace.export.pieces import COUNTER, SUBKEYS, Pieces, factorize
from npu_trace.pipeline.order import stable_order

if TYPE_CHECKING:
    from npu_trace.export.drawing import BlockDrawing


class Memory(Part):
    """The memory detector's changes: live bytes per device and per process as counters (the mapper's memory).
    A device's first change inside the window (its live bytes carried in first) goes one by one."""

    domain = "memory"

    def __init__(self, owner: BlockDrawing, changes: Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                 base: int, pieces: Pieces) -> None:  # fmt: skip
        super().__init__(owner, pieces)
        self.ts, self.dev, self.pid, self.delta = changes
        self.base = base
        inside = self.inside(self.ts)
        self._carried = self._carry_points(inside)
        self.keys = (base + np.arange(len(self.ts))) * SUBKEYS
        self.shown = inside & (self.dev >= 0) & self._wanted(self.dev)

    def _wanted(self, dev: np.ndarray) -> np.ndarray:
        devices = self.m.devices
        return np.ones(len(dev), dtype=bool) if devices is None else np.isin(dev, sorted(devices))

    def _carry_points(self, inside: np.ndarray) -> np.ndarray:
        """The changes drawn one by one: each device's first inside the window, when not carried yet."""
        can = inside & (self.dev >= 0) & self._wanted(self.dev)
        at = np.flatnonzero(can)
        _, first = factorize([self.dev[at]])
        points = [i for i in at[first].tolist() if int(self.dev[i]) not in self.m.mem_carried]
        return np.array(sorted(points), dtype=np.int64)

    def first_shown(self, upto: int) -> Optional[int]:
        stop = int(np.searchsorted(self.keys, upto))
        shown = self.shown[self.at : stop].copy()
        carried = self._carried[(self._carried >= self.at) & (self._carried < stop)]
        shown[carried - self.at] = False
        first = np.flatnonzero(shown)
        return int(self.ts[self.at + first[0]]) if len(first) else None

    def alone_calls(self) -> List[Tuple[int, Tuple[str, ...], Callable[[], None]]]:
        out: List[Tuple[int, Tuple[str, ...], Callable[[], None]]] = []
        for i in self._carried.tolist():
            args = ([int(self.ts[i])], [int(self.dev[i])], [int(self.pid[i])], [int(self.delta[i])])
            out.append(((self.base + i) * SUBKEYS, ("memory",), _memory_call(self.m, args)))
        return out

    def run(self, upto: Optional[int]) -> None:
        stop = len(self.keys) if upto is None else int(np.searchsorted(self.keys, upto))
        while self.at < stop:
            later = self._carried[self._carried >= self.at]
            if len(later) and int(later[0]) < stop:  # drawn by its call, in its turn: skipped here
                cut = int(later[0])
                if cut > self.at:
                    self.draw(self.at, cut)
                self.at = cut + 1
            else:
                self.draw(self.at, stop)
                self.at = stop

    def draw(self, lo: int, hi: int) -> None:
        d, p, n = self.dev[lo:hi], self.pid[lo:hi], self.delta[lo:hi]
        live = _running(self.m.dev_live, [d], n)
        mine = _running(self.m.pid_live, [d, p], n)
        sel = np.flatnonzero(self.shown[lo:hi])
        if not len(sel):
            return
        self.opened(self.ts[lo:hi][sel])
        ts, keys = self.ts[lo:hi][sel], self.keys[lo:hi][sel]
        live_track, own_track = self._tracks(d[sel], p[sel])
        self.pieces.add(keys, COUNTER, live_track, ts, vals=[live[sel]])
        self.pieces.add(keys + 1, COUNTER, own_track, ts, vals=[mine[sel]])

    def _tracks(self, dev: np.ndarray, pid: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The track codes of each change's device total and process total (looked up once per pair)."""
        groups, first = factorize([dev, pid])
        code, m = self.o.track_code, self.m
        codes = [(code(m._live_track(d)), code(m._process_track(d, p)))
                 for d, p in zip(dev[first].tolist(), pid[first].tolist())]  # fmt: skip
        table: np.ndarray = np.array(codes, dtype=np.int64).reshape(-1, 2)
        return table[groups, 0], table[groups, 1]


def _running(live: Dict[Any, int], keys: Sequence[np.ndarray], delta: np.ndarray) -> np.ndarray:
    """After each change: its key's total so far (from `live`, updated to the totals at the end): one running
    sum in key order, each key's sums taken from where its rows begin."""
    if not len(delta):
        return np.zeros(0, dtype=np.int64)
    groups, first = factorize(keys)
    names: List[Any] = [tuple(int(k[f]) for k in keys) for f in first.tolist()]
    names = [n if len(n) > 1 else n[0] for n in names]
    order = stable_order(groups)
    g = groups[order]
    sums = np.cumsum(delta[order])
    begins = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])  # each key's first row in key order
    before = np.array([live.get(name, 0) for name in names], dtype=np.int64)
    before[g[begins]] -= sums[begins] - delta[order][begins]  # the running sum before each key's rows
    out: np.ndarray = np.empty(len(delta), dtype=np.int64)
    out[order] = sums + before[g]
    ends = np.r_[begins[1:], len(g)] - 1
    for code, total in zip(g[ends].tolist(), out[order][ends].tolist()):
        live[names[code]] = total
    return out


def _memory_call(m: Any, args: Tuple[List[int], ...]) -> Callable[[], None]:
    """The change drawn one by one: the mapper's memory() of it alone."""
    return lambda: m.memory(*args)
