"""What the columnar drawing of a block (npu_trace.sinks.drawing) is made of: a `Part` draws one hot kind as
columns, in key order, keeping the mapper's state as the mapper does; the helpers its kinds share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

import numpy as np

from npu_trace.sinks.pieces import INT as INT_ARG
from npu_trace.sinks.pieces import Pieces
from npu_trace.sinks.rowargs import ArgSet

if TYPE_CHECKING:
    from npu_trace.sinks.drawing import BlockDrawing
    from npu_trace.sinks.timeline import LanePacker

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


def _keep(n: int, *bad: np.ndarray) -> np.ndarray:
    ok: np.ndarray = np.ones(n, dtype=bool)
    for b in bad:
        ok[b] = False
    return ok


def _track_codes(owner: BlockDrawing, packer: LanePacker, lanes: np.ndarray) -> np.ndarray:
    """The track code of each lane number."""
    codes = np.array([owner.track_code(lane.track) for lane in packer.lanes], dtype=np.int64)
    return codes[lanes]
