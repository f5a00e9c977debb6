"""The pieces' rows (npu_trace.export.rows): the compiled fill makes the matrix the numpy twin makes, for any
parts (keys tied within and across parts, columns of any width, constants, other integer dtypes), and refuses
what does not fit before writing anything."""

from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.export import rows
from npu_trace.export.rows import Part, key_ordered, key_ordered_py

compiled = pytest.mark.skipif(rows.IMPLEMENTATION != "c", reason="the compiled rows are not built here")
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def parts(draw: Any) -> List[Part]:
    out: List[Part] = []
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 12))
        cols: List[Any] = [np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=np.int64)]
        for _ in range(draw(st.integers(0, 14))):
            kind = draw(st.sampled_from(["int64", "int32", "bool", "const", "view"]))
            if kind == "const":
                cols.append(draw(_I64))
            elif kind == "view":  # a row of a wider matrix, as the parts pass their values
                wide = np.array(draw(st.lists(_I64, min_size=2 * n, max_size=2 * n)), dtype=np.int64)
                cols.append(wide.reshape(2, n)[1])
            else:
                values = draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n))
                cols.append(np.array(values).astype(kind))
        out.append((n, cols))
    return out


@compiled
@settings(max_examples=300, deadline=None)
@given(parts())
def test_the_compiled_rows_are_the_numpy_ones(got: List[Part]) -> None:
    want = key_ordered_py(got)
    made = key_ordered(got)
    assert made.dtype == want.dtype and made.shape == want.shape
    assert (made == want).all()


@compiled
def test_ties_keep_the_parts_order() -> None:
    one: Part = (2, [np.array([5, 1]), 7])
    two: Part = (2, [np.array([1, 5]), 8, np.array([3, 4])])
    assert key_ordered([one, two]).tolist() == [[1, 7, 0], [1, 8, 3], [5, 7, 0], [5, 8, 4]]


@compiled
def test_what_does_not_fit_is_refused() -> None:
    out = np.full((2, 3), 9, dtype=np.int64)
    fill = rows._rows.fill
    with pytest.raises(ValueError, match="out of the rows"):
        fill(out, 3, np.array([0, 2], np.int64), (1,))
    with pytest.raises(ValueError, match="length"):
        fill(out, 3, np.array([0, 1], np.int64), (np.zeros(3, np.int64),))
    with pytest.raises(ValueError, match="do not agree"):
        fill(out, 3, np.array([0, 1], np.int64), (1, 2, 3, 4))
    with pytest.raises(OverflowError):
        fill(out, 3, np.array([0, 1], np.int64), (1 << 64,))
    assert (out == 9).all()  # nothing written


@settings(max_examples=60, deadline=None)
@given(st.lists(parts(), min_size=1, max_size=4))
def test_rows_laid_in_a_room_are_those_of_a_fresh_matrix(blocks: List[List[Part]]) -> None:
    """One room for block after block (larger, smaller: its memory grown or partly used, holding the last
    block's values): each block's matrix is the fresh one's, by both implementations."""
    room, twin_room = rows.Room(), rows.Room()
    for got in blocks:
        want = key_ordered_py(got)
        for made in (key_ordered(got, room), key_ordered_py(got, twin_room)):
            assert made.dtype == want.dtype and made.shape == want.shape
            assert (made == want).all()


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 40), max_size=60), st.integers(-(1 << 62), 1 << 62), st.integers(0, 5))
def test_the_compiled_dense_codes_are_the_numpy_ones(values: List[int], shift: int, room: int) -> None:
    """Keys anywhere in int64 (shifted), ties, gaps, a range wider than the keys: the same codes (ranks) and
    first rows."""
    keys = np.array(values, dtype=np.int64) + shift
    low = (int(keys.min()) if len(keys) else shift) - room
    span = (int(keys.max()) if len(keys) else low) - low + 1 + room
    got, want = rows.dense(keys, low, span), rows.dense_py(keys, low, span)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert len(set(values)) == len(got[1]) and all(keys[got[1]][got[0]] == keys)


@compiled
def test_the_compiled_dense_codes_refuse_a_value_out_of_the_range() -> None:
    codes, firsts = np.full(3, 7, np.int64), np.full(3, 7, np.int64)
    for values, low, span in (([1, 2, 9], 1, 5), ([1, 2, 3], 2, 5), ([1, 2, 3], 1, 0)):
        for fn in (rows._rows.dense, None):
            with pytest.raises(ValueError):
                if fn is None:
                    rows.dense_py(np.array(values, np.int64), low, span)
                else:
                    fn(np.array(values, np.int64), low, span, codes, firsts)
    assert (codes == 7).all() and (firsts == 7).all()  # nothing written
