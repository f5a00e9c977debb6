"""The interrupt handlers' pairing (npu_trace.export.handlers): the compiled checks and pairs give what their numpy
twins give, and both what a stack per line gives one row at a time (the mapper's rule), whatever the rows, the
entries held before the block and the lines that go one by one."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.export import handlers

compiled = pytest.mark.skipif(handlers.IMPLEMENTATION != "c", reason="the compiled pairing is not built here")
MAX_OPEN = 3

Rows = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _rows(rows: List[Tuple[int, bool, bool, bool]], held: List[int]) -> Rows:
    line = np.array([r[0] % len(held) for r in rows], dtype=np.int64)
    entry, ok, named = (np.array([r[k] for r in rows], dtype=bool) for k in (1, 2, 3))
    return line, entry, ok, named, np.array(held, dtype=np.int64)


def _one_by_one(line: np.ndarray, entry: np.ndarray, ok: np.ndarray, named: np.ndarray,
                held: np.ndarray) -> Tuple[Any, ...]:  # fmt: skip
    """The reference: each line's stack, row after row."""
    lines = len(held)
    bad = [False] * lines
    first_named, first_exit = [-1] * lines, [-1] * lines
    depth = held.tolist()
    for i, (ln, en, good, name) in enumerate(zip(line.tolist(), entry.tolist(), ok.tolist(), named.tolist())):
        bad[ln] |= not good or (depth[ln] >= MAX_OPEN if en else depth[ln] <= 0)
        if name and first_named[ln] < 0:
            first_named[ln] = i
        if not en and first_exit[ln] < 0:
            first_exit[ln] = i
        depth[ln] += 1 if en else -1
    stacks: Dict[int, List[int]] = {ln: [-1] * int(held[ln]) for ln in range(lines)}
    pairs, held_exits = [], []
    for i, (ln, en) in enumerate(zip(line.tolist(), entry.tolist())):
        if bad[ln]:
            continue
        if en:
            stacks[ln].append(i)
        elif stacks[ln][-1] < 0:
            stacks[ln].pop()
            held_exits.append(i)
        else:
            pairs.append((stacks[ln].pop(), i))
    opened = sorted(i for stack in stacks.values() for i in stack if i >= 0)
    return bad, first_named, first_exit, pairs, held_exits, opened


def _results(checks: Any, pairs: Any, rows: Rows) -> Tuple[Any, ...]:
    line, entry, ok, named, held = rows
    bad, first_named, first_exit = checks(line, entry, ok, named, held, MAX_OPEN)
    found, held_exits, opened = pairs(line, entry, bad, held)
    return (bad.tolist(), first_named.tolist(), first_exit.tolist(), [tuple(p) for p in found.T.tolist()],
            held_exits.tolist(), opened.tolist())  # fmt: skip


ROWS = st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 30).map(lambda v: v > 0), st.booleans()),
                max_size=80)  # fmt: skip
HELD = st.lists(st.integers(0, MAX_OPEN), min_size=1, max_size=4)


@settings(max_examples=400, deadline=None)
@given(ROWS, HELD)
def test_the_numpy_pairing_is_the_stack_s(rows: List[Tuple[int, bool, bool, bool]], held: List[int]) -> None:
    got = _rows(rows, held)
    assert _results(handlers.checks_py, handlers.pairs_py, got) == _one_by_one(*got)


@compiled
@settings(max_examples=400, deadline=None)
@given(ROWS, HELD)
def test_the_compiled_pairing_is_the_numpy_pairing(rows: List[Tuple[int, bool, bool, bool]], held: List[int]) -> None:
    got = _rows(rows, held)
    assert _results(handlers.checks, handlers.pairs, got) == _results(handlers.checks_py, handlers.pairs_py, got)


@compiled
def test_the_compiled_pairing_refuses_what_does_not_agree() -> None:
    line, entry, ok, named, held = _rows([(0, True, True, True), (1, False, True, False)], [0, 0])
    with pytest.raises(ValueError):  # a line past the held counts' lines
        handlers.checks(line, entry, ok, named, held[:1], MAX_OPEN)
    with pytest.raises(ValueError):  # an exit with nothing open on a line said to be good
        handlers.pairs(line, entry, np.zeros(2, dtype=bool), held)
    with pytest.raises(ValueError):
        handlers.pairs(line, entry, np.zeros(2, dtype=bool), np.array([0, -1], dtype=np.int64))
