"""stable_order is argsort(kind="stable") exactly, whatever the keys (few or many distinct values, narrow or
the whole int64 range); KeyPacking packs equal keys equal and different keys apart."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.pipeline import order
from npu_trace.pipeline.order import KeyPacking, stable_order

INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(0, 5), max_size=300), st.lists(st.integers(-(10**6), 10**6), max_size=300),
                 st.lists(INT64, max_size=300), st.lists(st.integers(2**40, 2**40 + 70000), max_size=300)))  # fmt: skip
def test_stable_order_is_the_stable_argsort(keys: List[int]) -> None:
    key = np.array(keys, dtype=np.int64)
    for compiled in (order._order, None):  # the counting sort in C, and its numpy twin
        with patched(compiled):
            assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


def test_stable_order_takes_each_way() -> None:
    rng = np.random.default_rng(3)
    strided = rng.integers(-5, 300, 12000)[::3]  # a view, not contiguous
    for key in (rng.integers(0, 40, 5000), rng.integers(0, 1 << 40, 5000), rng.integers(-(2**62), 2**62, 5000),
                rng.integers(0, 70000, 5000), strided):  # fmt: skip
        for compiled in (order._order, None):
            with patched(compiled):
                assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


def test_the_counting_sort_is_compiled_here_and_refuses_a_key_outside_its_range() -> None:
    """scripts/setup installs gcc: the C sort runs here; a key it was not told the range of is an error, not a
    write outside the counters."""
    assert order.IMPLEMENTATION == "c"
    out = np.empty(3, dtype=np.int64)
    with pytest.raises(ValueError, match="outside"):
        order._order.counting_order(np.array([1, 9, 2], dtype=np.int64), 0, 5, out)
    with pytest.raises(ValueError, match="as many"):
        order._order.counting_order(np.array([1, 2], dtype=np.int64), 0, 5, out)


def previous_one_by_one(keys: List[int]) -> Any:
    """The reference: each row's previous row of its key and whether it is its key's last, a dict of keys seen."""
    seen: Dict[int, int] = {}
    prev, last = [], [True] * len(keys)
    for i, k in enumerate(keys):
        prev.append(seen.get(k, -1))
        if k in seen:
            last[seen[k]] = False
        seen[k] = i
    return prev, last


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(0, 5), max_size=300), st.lists(INT64, max_size=300),
                 st.lists(st.integers(0, 2000), min_size=200, max_size=600)))  # fmt: skip
def test_previous_of_is_each_rows_previous_of_its_key(keys: List[int]) -> None:
    """Both ways (the C table, grown past its first 64 slots by the wide keys; the numpy twin) give the rows one by
    one gives."""
    key = np.array(keys, dtype=np.int64)
    want_prev, want_last = previous_one_by_one(keys)
    for compiled in (order._order, None):
        with patched(compiled):
            prev, last = order.previous_of(key)
        assert prev.tolist() == want_prev and last.tolist() == want_last
        assert prev.dtype == np.int64 and last.dtype == bool


def test_previous_of_refuses_arrays_of_other_sizes() -> None:
    assert order.IMPLEMENTATION == "c"
    with pytest.raises(ValueError, match="as many"):
        order._order.previous(np.zeros(3, dtype=np.int64), np.empty(2, dtype=np.int64), np.empty(3, dtype=np.uint8))


@contextmanager
def patched(compiled: Any) -> Iterator[None]:
    saved, order._order = order._order, compiled
    try:
        yield
    finally:
        order._order = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 7), st.sampled_from([0, 1, 2**62, 2**63 - 1, -(2**63)]), INT64),
                min_size=1, max_size=60))  # fmt: skip
def test_key_packing_groups_exactly(rows: List[tuple]) -> None:
    cols = np.array(rows, dtype=np.int64).T
    packing = KeyPacking(cols)
    probe = [(d + 1, v, k) for d, v, k in rows] + [(-2, 0, 0)]  # keys in and out of the block's ranges
    assert packing.within(np.array(probe, dtype=np.int64).T).tolist() == [packing.fits(p) for p in probe]
    packed = packing.pack(cols).tolist()
    for i, a in enumerate(rows):
        assert packing.fits(a)
        for j, b in enumerate(rows):
            assert (packed[i] == packed[j]) == (a == b)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.lists(st.integers(-3, 5), max_size=80), st.lists(INT64, max_size=80)),
       st.one_of(st.lists(st.integers(-3, 5), max_size=20), st.lists(INT64, max_size=20)))  # fmt: skip
def test_distinct_and_member_are_numpys_unique_and_isin(values: List[int], among: List[int]) -> None:
    a, b = np.array(values, dtype=np.int64), np.array(among, dtype=np.int64)
    assert np.array_equal(order.sorted_distinct(a), np.unique(a))
    assert np.array_equal(order.member_of(a, b), np.isin(a, b))
    rows = np.array(values[: len(values) // 2 * 2], dtype=np.int64).reshape(-1, 2)
    assert np.array_equal(order.sorted_distinct_rows(rows), np.unique(rows, axis=0).reshape(-1, 2))

