"""The distinct byte strings of many rows: which rows of a block hold the same value of a string field that lies
in the records' bytes (a __data_loc string: an interrupt handler's name), so that each value is decoded once.

`distinct(bufs, buf, start, length)` -> (groups, firsts): row i's value is `bufs[buf[i]][start[i]:start[i] +
length[i]]` without the NULs that end it ("ab" and "ab\\0" are one value); `groups[i]` is its group, the groups
numbered as they first occur, and `firsts` the first row of each. A value outside its buffer is a ValueError.
`distinct_rows(matrix)` groups the rows of a matrix of bytes alike (in any order).

Two implementations of `distinct`, identical in every result: the C extension `npu_trace.export._texts` (built by
the package's install where a compiler is), one pass through a hash table of the values seen, the GIL released
while it runs; and `distinct_py` in numpy, which gathers every value into a matrix of bytes and groups its rows.
`IMPLEMENTATION` says which runs ("c" or "python").
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import numpy as np

from npu_trace.pipeline.order import sorted_distinct

try:
    from npu_trace.export import _texts
except ImportError:  # installed where no compiler was: the numpy twin, with the same results
    _texts = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _texts is not None else "python"


def distinct(bufs: Sequence[Any], buf: np.ndarray, start: np.ndarray,
             length: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """See the module docstring."""
    if _texts is None:
        return distinct_py(bufs, buf, start, length)
    groups: np.ndarray = np.empty(len(buf), dtype=np.int64)
    firsts = _texts.distinct(tuple(bufs), _ints(buf), _ints(start), _ints(length), groups)
    return groups, np.frombuffer(firsts, dtype=np.int64)


def distinct_py(bufs: Sequence[Any], buf: np.ndarray, start: np.ndarray,
                length: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """distinct() in numpy: each value gathered into a row of a fixed width, zeros past its length."""
    buf, start, length = _ints(buf), _ints(start), _ints(length)
    sizes = np.array([len(memoryview(b)) for b in bufs] or [0], dtype=np.int64)
    if len(buf) and ((buf < 0).any() or (buf >= len(bufs)).any() or (start < 0).any() or (length < 0).any()
                     or (start + length > sizes[np.clip(buf, 0, len(sizes) - 1)]).any()):  # fmt: skip
        raise ValueError("a value lies outside its buffer")
    if not len(buf):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    width = max(int(length.max()), 1)
    raw: np.ndarray = np.zeros((len(buf), width), dtype=np.uint8)
    for b in sorted_distinct(buf).tolist():
        mine = np.flatnonzero(buf == b)
        raw[mine] = _windows(np.frombuffer(bufs[b], dtype=np.uint8), start[mine], width)
    raw[np.arange(width) >= length[:, None]] = 0  # past each value's length
    groups, first = distinct_rows(raw)
    order = np.argsort(first, kind="stable")  # the groups as they first occur
    rank: np.ndarray = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[groups], first[order].astype(np.int64)


def distinct_rows(rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) of a matrix of bytes: by a hash of each row's 8-byte words,
    checked against the rows (np.unique over the rows' bytes where two differ under one hash)."""
    n, width = rows.shape
    words: np.ndarray = np.zeros((n, -(-width // 8) * 8), dtype=np.uint8)
    words[:, :width] = rows
    packed = words.view(np.uint64)
    h = packed[:, 0].copy()
    for k in range(1, packed.shape[1]):
        h = h * np.uint64(0x9E3779B97F4A7C15) ^ packed[:, k]
    _, first, groups = np.unique(h, return_index=True, return_inverse=True)
    groups = groups.reshape(-1)
    if not (packed == packed[first][groups]).all():
        _, first, groups = np.unique(words.view(f"V{words.shape[1]}").reshape(-1), return_index=True,
                                     return_inverse=True)  # fmt: skip
        groups = groups.reshape(-1)
    return groups, first


def _windows(data: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes of `data` from each start, a row each (a window that passes the end reads the last
    byte again: only bytes past the value's length, cleared by the caller)."""
    if not len(data):  # an empty buffer: values of no length only
        return np.zeros((len(start), width), dtype=np.uint8)
    if len(data) >= width:
        view = np.lib.stride_tricks.sliding_window_view(data, width)
        out: np.ndarray = view[np.minimum(start, len(data) - width)]
        late = np.flatnonzero(start > len(data) - width)
        if not len(late):
            return out
    else:
        late = np.arange(len(start))
        out = np.zeros((len(start), width), dtype=np.uint8)
    index = start[late, None] + np.arange(width)
    out[late] = data[np.minimum(index, len(data) - 1)]
    return out


def _ints(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)
