"""A block's pieces (npu_trace.export.pieces) as one int64 matrix, a row per piece, in key order.

Each part the drawing adds is a list of columns (the key first; each column n values, or one int for every
row). `key_ordered(parts)` orders every piece by its key (stable: the parts in the order added, each part's
pieces in theirs) and writes each piece's columns into its row, then zeros up to the widest part's width.
Given a `Room`, the matrix is laid in its memory, kept from block to block: a fresh matrix (~10 MB a block of
64 Ki rows) costs its pages' first touch each time (measured on the 1 M-event recording's 14 blocks: the
rows 25-30 ms of CPU in fresh matrices, 20-24 in one room).

`dense(values, low, span)` numbers integer keys (npu_trace.export.pieces.factorize's, in a small range) by
their rank among those present, with the first row of each.

Two implementations of each, identical in every result: the C extension `npu_trace.export._rows` (built by
the package's install where a compiler is), which writes each part's columns straight into their rows and
ranks the keys through one table over their range, and `key_ordered_py`, `dense_py` in numpy (a matrix of
each part, its rows scattered; a table of the values present, its running count). `IMPLEMENTATION` says which
runs ("c" or "python").
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

try:
    from npu_trace.export import _rows
except ImportError:  # installed where no compiler was: the numpy twin, with the same results
    _rows = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _rows is not None else "python"
Column = Union[np.ndarray, int]
Part = Tuple[int, Sequence[Column]]  # (its pieces, its columns)


class Room:
    """The memory a block's matrix is laid in, grown when a block needs more (see the module docstring): a
    matrix `rows` gives is written over by the next one."""

    def __init__(self) -> None:
        self._memory: np.ndarray = np.empty(0, dtype=np.int64)

    def rows(self, n: int, width: int) -> np.ndarray:
        """A matrix of n rows of `width` int64 values (what they hold: anything)."""
        need = n * width
        if len(self._memory) < need:
            self._memory = np.empty(need + need // 4, dtype=np.int64)
        return self._memory[:need].reshape(n, width)


def key_ordered(parts: Sequence[Part], room: Optional[Room] = None) -> np.ndarray:
    """See the module docstring."""
    if _rows is None:
        return key_ordered_py(parts, room)
    where, width = _where(parts)
    rows = _matrix_for(len(where), width, room)
    at = 0
    for n, cols in parts:
        _rows.fill(rows, width, where[at : at + n], tuple(_column(c) for c in cols))
        at += n
    return rows


def key_ordered_py(parts: Sequence[Part], room: Optional[Room] = None) -> np.ndarray:
    """key_ordered() in numpy: each part's matrix, its rows scattered to their places in key order."""
    mats = [_matrix(n, cols) for n, cols in parts]
    where, width = _where(parts)
    rows = _matrix_for(len(where), width, room)
    at = 0
    for p in mats:  # each part's rows straight to their place in key order
        mine = where[at : at + len(p)]
        rows[mine, : p.shape[1]] = p
        if p.shape[1] < width:
            rows[mine, p.shape[1] :] = 0
        at += len(p)
    return rows


def dense(values: np.ndarray, low: int, span: int) -> Tuple[np.ndarray, np.ndarray]:
    """(code of each value, first row of each code) of int64 values all in [low, low + span): a value's code
    is its rank among the values present."""
    if _rows is None:
        return dense_py(values, low, span)
    codes: np.ndarray = np.empty(len(values), dtype=np.int64)
    firsts: np.ndarray = np.empty(len(values), dtype=np.int64)
    count = _rows.dense(np.ascontiguousarray(values, dtype=np.int64), low, span, codes, firsts)
    return codes, firsts[:count]


def dense_py(values: np.ndarray, low: int, span: int) -> Tuple[np.ndarray, np.ndarray]:
    """dense() in numpy: the values present marked in a table over the range, their running count the codes."""
    shifted: np.ndarray = values.astype(np.int64) - low
    if span < 1 or (len(values) and (int(shifted.min()) < 0 or int(shifted.max()) >= span)):
        raise ValueError("the values, their range or the outputs do not agree")
    present: np.ndarray = np.zeros(span, dtype=bool)
    present[shifted] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    codes = rank[shifted]
    firsts: np.ndarray = np.zeros(int(rank[-1]) + 1 if len(values) else 0, dtype=np.int64)
    firsts[codes[::-1]] = np.arange(len(values) - 1, -1, -1)
    return codes, firsts


def _where(parts: Sequence[Part]) -> Tuple[np.ndarray, int]:
    """The row of each piece (the parts' pieces one after the other) in key order, and the rows' width."""
    keys = np.concatenate([np.asarray(cols[0]).astype(np.int64, copy=False) for _, cols in parts])
    order = np.argsort(keys, kind="stable")
    where: np.ndarray = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    return where, max(len(cols) for _, cols in parts)


def _matrix_for(n: int, width: int, room: Optional[Room]) -> np.ndarray:
    """The matrix the rows are written in: in the room when one is given."""
    if room is None:
        return np.empty((n, width), dtype=np.int64)
    return room.rows(n, width)


def _matrix(n: int, cols: Sequence[Column]) -> np.ndarray:
    rows: np.ndarray = np.zeros((n, len(cols)), dtype=np.int64)
    for at, value in enumerate(cols):
        rows[:, at] = value
    return rows


def _column(value: Column) -> Column:
    """An int for a value the same in every row, else n int64 values side by side."""
    if np.ndim(value) == 0:
        return int(value)
    return np.ascontiguousarray(value, dtype=np.int64)
