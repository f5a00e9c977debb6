"""stable_order is argsort(kind="stable") exactly, whatever the keys (few or many distinct values, narrow or
the whole int64 range); KeyPacking packs equal keys equal and different keys apart."""

from __future__ import annotations

from typing import List

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.pipeline.order import KeyPacking, stable_order

INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(0, 5), max_size=300), st.lists(st.integers(-(10**6), 10**6), max_size=300),
                 st.lists(INT64, max_size=300), st.lists(st.integers(2**40, 2**40 + 70000), max_size=300)))  # fmt: skip
def test_stable_order_is_the_stable_argsort(keys: List[int]) -> None:
    key = np.array(keys, dtype=np.int64)
    assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


def test_stable_order_takes_each_way() -> None:
    rng = np.random.default_rng(3)
    for key in (rng.integers(0, 40, 5000), rng.integers(0, 1 << 40, 5000), rng.integers(-(2**62), 2**62, 5000)):
        assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 7), st.sampled_from([0, 1, 2**62, 2**63 - 1, -(2**63)]), INT64),
                min_size=1, max_size=60))  # fmt: skip
def test_key_packing_groups_exactly(rows: List[tuple]) -> None:
    cols = np.array(rows, dtype=np.int64).T
    packing = KeyPacking(cols)
    packed = packing.pack(cols).tolist()
    for i, a in enumerate(rows):
        assert packing.fits(a)
        for j, b in enumerate(rows):
            assert (packed[i] == packed[j]) == (a == b)
