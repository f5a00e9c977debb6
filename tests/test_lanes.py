"""The lanes (npu_trace.export.lanes): the compiled place_many puts every slice on the lane the Python twin
does and leaves the lanes as it leaves them (roots, floor, last end), whatever the slices, the calls' cuts, the
lanes the group already has and how many roots a lane remembers; and refuses what does not fit."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.export import lanes
from npu_trace.export.lanes import LanePacker
from npu_trace.export.tracks import SLICES, Track

compiled = pytest.mark.skipif(lanes.IMPLEMENTATION != "c", reason="the compiled lanes are not built here")


def _packer() -> LanePacker:
    return LanePacker(lambda i: Track(100 + i, f"lane {i}", SLICES))


def _state(packer: LanePacker) -> List[Tuple[Any, int, int]]:
    return [(lane.roots, lane.floor, lane.last_end) for lane in packer.lanes]


def _slices(spans: List[Tuple[int, int]], start: int) -> Tuple[np.ndarray, np.ndarray]:
    """Slices whose ends ascend (from `start`), each beginning up to its span before its end."""
    ends = start + np.cumsum([e for _, e in spans]).astype(np.int64) if spans else np.zeros(0, np.int64)
    begins = np.array([int(end) - b for (b, _), end in zip(spans, ends.tolist())], dtype=np.int64)
    return begins, ends


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=50), min_size=1, max_size=4),
       st.integers(1, 6), st.integers(0, 3))  # fmt: skip
def test_the_compiled_placement_is_the_python_placement(calls: List[List[Tuple[int, int]]], roots: int,
                                                        first: int) -> None:  # fmt: skip
    """Call after call on the same lanes (the first `first` slices placed one by one before), a lane
    remembering `roots` roots: the same lane numbers, the same lanes."""
    c, py = _packer(), _packer()
    at = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lanes, "MAX_ROOTS", roots)
        for k, spans in enumerate(calls):
            begins, ends = _slices(spans, at)
            if k == 0 and first:
                for b, e in zip(begins[:first].tolist(), ends[:first].tolist()):
                    c.place(b, e), py.place(b, e)
                begins, ends = begins[first:], ends[first:]
            assert c.place_many(begins, ends).tolist() == py.place_many_py(begins, ends).tolist()
            assert _state(c) == _state(py)
            at = int(ends[-1]) if len(ends) else at


@compiled
def test_the_compiled_placement_refuses_what_does_not_fit() -> None:
    packer = _packer()
    packer.place(0, 10)
    b, e, out = np.zeros(3, np.int64), np.full(3, 20, np.int64), np.zeros(3, np.int64)
    with pytest.raises(ValueError):
        lanes._lanes.place_many(packer.lanes, b, e[:2], out, 0, 4)
    with pytest.raises(ValueError):
        lanes._lanes.place_many(packer.lanes, b, e, out, 4, 4)
    packer.lanes[0].ends.append(30)  # ends and begins of two lengths
    with pytest.raises(ValueError):
        lanes._lanes.place_many(packer.lanes, b + 5, e, out, 0, 4)
    packer.lanes[0].ends = [10]  # roots not of int64
    with pytest.raises(TypeError):
        lanes._lanes.place_many(packer.lanes, b + 5, e, out, 0, 4)


@compiled
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_placement_is_the_python_placement_over_long_runs(seed: int) -> None:
    """Thousands of slices on few lanes remembering few roots (the roots forgotten are taken off the lists a
    thousand at a time), nested, overlapping and apart."""
    rng = np.random.default_rng(seed)
    spans = list(zip(rng.integers(0, 40, 6000).tolist(), rng.integers(0, 12, 6000).tolist()))
    c, py = _packer(), _packer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lanes, "MAX_ROOTS", 3)
        begins, ends = _slices(spans, 0)
        for lo, hi in ((0, 2500), (2500, 2600), (2600, 6000)):
            assert (
                c.place_many(begins[lo:hi], ends[lo:hi]).tolist()
                == py.place_many_py(begins[lo:hi], ends[lo:hi]).tolist()
            )
            assert _state(c) == _state(py)
    assert len(c.lanes) > 2


@compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.integers(0, 3)),
                min_size=1, max_size=5),
       st.integers(1, 6))  # fmt: skip
def test_the_compiled_runs_are_the_python_runs(groups: List[Tuple[List[int], int]], roots: int) -> None:
    """Runs of slices apart (each beginning at the end before it) given to the first lanes of several groups at
    once, a group's lane holding `first` roots before, remembering `roots`: the same lanes."""
    c, py = [_packer() for _ in groups], [_packer() for _ in groups]
    spans, starts, stops = [], [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lanes, "MAX_ROOTS", roots)
        for k, (gaps, first) in enumerate(groups):
            for i in range(first):
                c[k].place(10 * i, 10 * i + 5), py[k].place(10 * i, 10 * i + 5)
            if not first:
                c[k].first(), py[k].first()
            starts.append(len(spans))
            spans += [(gap, 1) for gap in gaps]
            stops.append(len(spans))
        ends = 100 + np.cumsum([g + 1 for g, _ in spans]).astype(np.int64)
        begins = ends - 1
        lo, hi = np.array(starts, np.int64), np.array(stops, np.int64)
        lanes.add_runs([p.lanes[0] for p in c], begins, ends, lo, hi)
        lanes.add_runs_py([p.lanes[0] for p in py], begins, ends, lo, hi)
    assert [_state(p) for p in c] == [_state(p) for p in py]


@compiled
def test_the_compiled_runs_refuse_what_does_not_fit() -> None:
    packer = _packer()
    packer.place(0, 10)
    b, e = np.arange(3, dtype=np.int64) + 20, np.arange(3, dtype=np.int64) + 21
    for starts, stops in (([0], [4]), ([1], [1]), ([0, 1], [1, 2]), ([-1], [2])):
        with pytest.raises(ValueError):
            lanes._lanes.add_runs(packer.lanes, b, e, np.array(starts, np.int64), np.array(stops, np.int64), 4)
    assert _state(packer) == [([(0, 10)], -(1 << 63), 10)]
