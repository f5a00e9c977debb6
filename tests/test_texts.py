"""The distinct byte strings of many rows (npu_trace.export.texts): the compiled distinct groups the rows as
the numpy twin does (values equal but for the NULs that end them are one, groups numbered as they first
occur), for any values in any buffers, and refuses a value outside its buffer."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.export import texts
from npu_trace.export.texts import distinct, distinct_py

compiled = pytest.mark.skipif(texts.IMPLEMENTATION != "c", reason="the compiled texts are not built here")


@st.composite
def rows(draw: Any) -> Tuple[List[Any], np.ndarray, np.ndarray, np.ndarray]:
    """Buffers (bytes and bytearrays) holding a few values, some ending in NULs, and rows pointing at them."""
    words = draw(st.lists(st.binary(max_size=12), min_size=1, max_size=5))
    words += [w + b"\0" * draw(st.integers(1, 3)) for w in words[:2]]
    bufs: List[Any] = []
    where: List[Tuple[int, int, int]] = []
    for b in range(draw(st.integers(1, 3))):
        data = bytearray(draw(st.binary(max_size=7)))
        for w in draw(st.lists(st.sampled_from(words), min_size=1, max_size=6)):
            where.append((b, len(data), len(w)))
            data += w + draw(st.binary(max_size=3))
        bufs.append(bytes(data) if b % 2 else data)
    picks = draw(st.lists(st.sampled_from(where), max_size=40))
    buf, start, length = (np.array([p[k] for p in picks], dtype=np.int64) for k in range(3))
    return bufs, buf, start, length


@compiled
@settings(max_examples=300, deadline=None)
@given(rows())
def test_the_compiled_groups_are_the_numpy_groups(case: Tuple[List[Any], np.ndarray, np.ndarray, np.ndarray]) -> None:
    bufs, buf, start, length = case
    got, want = distinct(bufs, buf, start, length), distinct_py(bufs, buf, start, length)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    values = [bytes(memoryview(bufs[b])[s : s + n]).rstrip(b"\0") for b, s, n in zip(buf, start, length)]
    for i, g in enumerate(got[0].tolist()):  # one group per value, numbered as they first occur
        assert values[i] == values[int(got[1][g])]
    assert sorted(set(got[0].tolist()), key=got[0].tolist().index) == list(range(len(got[1])))
    assert len(got[1]) == len(set(values))


@pytest.mark.parametrize("implementation", [distinct, distinct_py])
def test_a_value_outside_its_buffer_is_refused(implementation: Any) -> None:
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError):
        implementation([b"abcd"], one, one + 2, one + 3)
    with pytest.raises(ValueError):
        implementation([b"abcd"], one + 1, one, one)
    assert implementation([b"abcd"], one, one + 1, one + 3)[1].tolist() == [0]


@compiled
@pytest.mark.parametrize("values", [1, 63, 64, 65, 200, 5000])
def test_the_compiled_groups_hold_many_values(values: int) -> None:
    """The compiled table grows as values come (from 64 groups on): as many values as the numpy twin finds."""
    rng = np.random.default_rng(values)
    data = bytearray()
    spans = []
    for k in range(values):
        word = f"irq-{k}".encode() + b"\0" * int(rng.integers(0, 3))
        spans.append((len(data), len(word)))
        data += word
    picks = rng.integers(0, values, 4 * values + 7)
    start = np.array([spans[p][0] for p in picks], dtype=np.int64)
    length = np.array([spans[p][1] for p in picks], dtype=np.int64)
    buf = np.zeros(len(picks), dtype=np.int64)
    got, want = distinct([bytes(data)], buf, start, length), distinct_py([bytes(data)], buf, start, length)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert len(got[1]) == len(set(picks.tolist()))
