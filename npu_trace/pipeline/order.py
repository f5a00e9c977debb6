"""Stable orders of integer keys, fast: what the columnar path sorts by (a call's thread and op, a sample's
device and op, a task's key) has few distinct values or few bits, and numpy's stable sort of int64 is a
comparison sort.

`stable_order(key)` is `np.argsort(key, kind="stable")`, exactly (rows of equal keys stay in row order), by
the cheapest way the keys allow:
  * keys within a small range (at most a few times as wide as there are keys): a counting sort, in C
    (npu_trace/pipeline/_order.c, built by the package's install where a compiler is: two passes over the
    keys); its numpy twin ranks each key among the values present (a table over the range) and sorts the
    ranks as uint16 (numpy's stable sort of 16-bit integers is a radix sort), when there are few of them;
  * keys and row numbers that fit together in 63 bits: (key, row) as one integer, each value distinct, so
    any sort gives the stable order (numpy's default sort: introsort);
  * otherwise numpy's stable sort.

`previous_of(key)` gives each row's previous row of its key, and each key's last row (a pairing's steps in row
order, no sort: npu_trace.pipeline.vnormalize).

`sorted_distinct(values)`, `sorted_distinct_rows(rows)` and `member_of(values, among)` are np.unique(values),
np.unique(rows, axis=0) and np.isin(values, among) without numpy 2's check for a masked array in np.unique
(which np.isin calls for keys of a wide range), whose first call imports numpy.ma: ~20 ms of a command's
start-up, or of the first block whose rows need it.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

try:
    from npu_trace.pipeline import _order
except ImportError:  # installed where no compiler was: the numpy twin, with the same results
    _order = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _order is not None else "python"
RANK_TABLE_MAX = 1 << 22  # the largest key range ranked through a table (4 M entries: 4 MiB of bools)


def stable_order(key: np.ndarray) -> np.ndarray:
    """The indices that sort `key` (integers), rows of equal keys in their order: argsort(kind="stable")."""
    n = len(key)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    key = key.astype(np.int64, copy=False)
    low, high = int(key.min()), int(key.max())
    span = high - low + 1
    if span <= min(RANK_TABLE_MAX, max(1 << 16, 4 * n)):  # the table costs no more than the keys
        if _order is not None:
            out: np.ndarray = np.empty(n, dtype=np.int64)
            _order.counting_order(np.ascontiguousarray(key), low, span, out)
            return out
        shifted: np.ndarray = key - low
        present: np.ndarray = np.zeros(span, dtype=bool)
        present[shifted] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        if rank[-1] < 1 << 16:
            return np.argsort(rank[shifted].astype(np.uint16), kind="stable").astype(np.int64, copy=False)
    row_bits = (n - 1).bit_length()
    if (span - 1).bit_length() + row_bits <= 63:
        combined = np.sort(((key - low) << row_bits) | np.arange(n, dtype=np.int64))
        return combined & ((1 << row_bits) - 1)
    return np.argsort(key, kind="stable")


def previous_of(key: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(prev, last) of integer keys: the row before each row with the same key (-1: none), and whether no later
    row has the row's key. In C where it is built (one pass through a table of the keys), else
    `previous_of_py`: the same arrays."""
    if _order is None:
        return previous_of_py(key)
    n = len(key)
    prev: np.ndarray = np.empty(n, dtype=np.int64)
    last: np.ndarray = np.empty(n, dtype=np.uint8)
    _order.previous(np.ascontiguousarray(key, dtype=np.int64), prev, last)
    return prev, last.view(bool)


def previous_of_py(key: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """previous_of() in numpy: each key's rows side by side in the stable order, each row after the one before."""
    n = len(key)
    order = stable_order(np.asarray(key))
    ordered = np.asarray(key)[order]
    same: np.ndarray = ordered[1:] == ordered[:-1]  # sorted row i + 1 has sorted row i's key
    prev: np.ndarray = np.full(n, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    last: np.ndarray = np.ones(n, dtype=bool)
    last[order[:-1][same]] = False
    return prev, last


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending: np.unique(values) (a flat array)."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    if len(ordered) < 2:
        return ordered
    keep: np.ndarray = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def sorted_distinct_rows(rows: np.ndarray) -> np.ndarray:
    """The distinct rows of a 2-d integer array, in lexicographic order: np.unique(rows, axis=0)."""
    if len(rows) < 2:
        return rows.copy()
    ordered = rows[np.lexsort(rows.T[::-1])]
    keep: np.ndarray = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=keep[1:])
    return ordered[keep]


def member_of(values: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Is each of `values` one of `among` (integers): np.isin(values, among)."""
    known = sorted_distinct(among)
    if not len(known):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(known, values), len(known) - 1)
    return np.asarray(known[at] == values)


class KeyPacking:
    """Rows of key columns (one column per key part, int64) packed into one int64 per row, exactly: each
    column's range within the block in bits of its own; where the ranges do not fit in 63 bits, a dense id per
    distinct key of the block instead. Equal keys pack equal, different keys differ (grouping, not order)."""

    def __init__(self, cols: np.ndarray) -> None:
        empty = not cols.shape[1]
        self.low = [0] * len(cols) if empty else cols.min(axis=1).tolist()
        high = self.low if empty else cols.max(axis=1).tolist()
        self.spans = [h - lo + 1 for lo, h in zip(self.low, high)]
        self.bits = [max(1, (span - 1).bit_length()) for span in self.spans]
        self.fit = sum(self.bits) <= 63
        self._ids: Dict[Tuple[int, ...], int] = {}
        if not self.fit:
            self._ids = {tuple(row): i for i, row in enumerate(sorted_distinct_rows(cols.T).tolist())}

    def fits(self, values: Sequence[int]) -> bool:
        """Could a key of these column values be among the block's (each inside the block's range)?"""
        return all(isinstance(v, int) and 0 <= v - lo < span for v, lo, span in zip(values, self.low, self.spans))

    def within(self, cols: np.ndarray) -> np.ndarray:
        """`fits` of many rows of int64 columns (as in the block) at once: which could be among the block's."""
        inside: np.ndarray = np.ones(cols.shape[1], dtype=bool)
        for col, low, span in zip(cols, self.low, self.spans):
            inside &= (col >= low) & (col <= low + span - 1)  # the block's own min and max: no overflow
        return inside

    def pack(self, cols: np.ndarray) -> np.ndarray:
        """The packed keys of rows (columns as in the block; rows outside its ranges only if `fits`)."""
        if not self.fit:
            return np.array([self._ids.get(tuple(row), -1) for row in cols.T.tolist()], dtype=np.int64)
        out = np.zeros(cols.shape[1], dtype=np.int64)
        shift = 0
        for col, lo, bits in zip(cols, self.low, self.bits):
            out |= (col.astype(np.int64) - lo) << shift
            shift += bits
        return out
