"""The interrupt handlers of a block's lines (npu_trace.export.part_irqs): each exit paired with the entry it
closes, as the mapper's stack of each line pairs them one row at a time (TimelineMapper._irq).

A line's rows are its entries and exits in row order; before the block it holds `held` entries open (the
mapper's, from earlier blocks). An exit closes the latest entry open; an entry opens one.

`checks(line, entry, ok, named, held, max_open)` -> (bad, first_named, first_exit), per line: `bad`, a line
whose rows go one by one: an exit with no entry open (none held, none opened), an entry with `max_open` open
already, a row not `ok`; the first row that is `named`, and the first exit (-1: none).

`pairs(line, entry, bad, held)` -> (pairs, held_exits, opened), over the lines not `bad`: the (entry, exit) rows
of each handler the block holds whole, by exit (2 rows of ints); the exits that close an entry held before the
block (the mapper's: they go one by one); the entries still open at the block's end, ascending.

Two implementations of each, identical in every result: the C extension `npu_trace.export._handlers` (built by
the package's install where a compiler is), one pass in row order with a stack per line; and `checks_py`,
`pairs_py` in numpy, which number each row's depth by a running sum and pair an entry with the exit after it at
its depth. `IMPLEMENTATION` says which runs ("c" or "python").
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from npu_trace.pipeline.order import stable_order

try:
    from npu_trace.export import _handlers
except ImportError:  # installed where no compiler was: the numpy twin, with the same results
    _handlers = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _handlers is not None else "python"
Checks = Tuple[np.ndarray, np.ndarray, np.ndarray]
Pairs = Tuple[np.ndarray, np.ndarray, np.ndarray]


def checks(line: np.ndarray, entry: np.ndarray, ok: np.ndarray, named: np.ndarray, held: np.ndarray,
           max_open: int) -> Checks:  # fmt: skip
    """See the module docstring (`line`: each row's line, 0 .. len(held) - 1)."""
    if _handlers is None:
        return checks_py(line, entry, ok, named, held, max_open)
    lines = len(held)
    bad: np.ndarray = np.zeros(lines, dtype=np.uint8)
    first_named: np.ndarray = np.empty(lines, dtype=np.int64)
    first_exit: np.ndarray = np.empty(lines, dtype=np.int64)
    _handlers.checks(_ints(line), _flags(entry), _flags(ok), _flags(named), _ints(held), int(max_open), bad,
                     first_named, first_exit)  # fmt: skip
    return bad.view(bool), first_named, first_exit


def pairs(line: np.ndarray, entry: np.ndarray, bad: np.ndarray, held: np.ndarray) -> Pairs:
    """See the module docstring."""
    if _handlers is None:
        return pairs_py(line, entry, bad, held)
    n = len(line)
    found: np.ndarray = np.empty((2, n), dtype=np.int64)
    held_exits: np.ndarray = np.empty(n, dtype=np.int64)
    opened: np.ndarray = np.empty(n, dtype=np.int64)
    got, closing, left = _handlers.pairs(_ints(line), _flags(entry), _flags(bad), _ints(held), found[0], found[1],
                                         held_exits, opened)  # fmt: skip
    return found[:, :got], held_exits[:closing], opened[:left]


def checks_py(line: np.ndarray, entry: np.ndarray, ok: np.ndarray, named: np.ndarray, held: np.ndarray,
              max_open: int) -> Checks:  # fmt: skip
    """checks() in numpy: each row's depth before it, its line's held entries and the running sum of its line's
    entries (+1) and exits (-1) before it."""
    lines = len(held)
    line = _ints(line)
    order = stable_order(line)  # each line's rows, in row order
    ln, en = line[order], entry[order].astype(bool)
    before = _depths(ln, en, held)[0]
    wrong = (~en & (before <= 0)) | (en & (before >= max_open)) | ~ok[order].astype(bool)
    bad: np.ndarray = np.bincount(ln[wrong], minlength=lines) > 0
    return bad, _first(line, named.astype(bool), lines), _first(line, ~entry.astype(bool), lines)


def pairs_py(line: np.ndarray, entry: np.ndarray, bad: np.ndarray, held: np.ndarray) -> Pairs:
    """pairs() in numpy: each row's depth (an entry's after it, an exit's before it: the level it opens or closes);
    by line and depth, in row order, entries and exits alternate, and an entry followed by an exit is a handler;
    an exit first at a depth held before the block closes a held entry; an entry not followed stays open."""
    line = _ints(line)
    good = np.flatnonzero(~bad.astype(bool)[line])
    at, ln, en = good, line[good], entry[good].astype(bool)
    order = stable_order(ln)
    at, ln, en = at[order], ln[order], en[order]
    before, after = _depths(ln, en, held)
    level = np.where(en, after, before)
    order = np.lexsort((at, level, ln))
    at, ln, en, level = at[order], ln[order], en[order], level[order]
    first: np.ndarray = np.ones(len(at), dtype=bool)
    first[1:] = (ln[1:] != ln[:-1]) | (level[1:] != level[:-1])
    held_exits = np.sort(at[first & ~en & (level <= _ints(held)[ln])])
    closed: np.ndarray = np.zeros(len(at), dtype=bool)
    closed[:-1] = en[:-1] & ~en[1:] & ~first[1:]
    starts = np.flatnonzero(closed)
    found = np.stack([at[starts], at[starts + 1]]).astype(np.int64)
    found = found.take(np.argsort(found[1], kind="stable"), axis=1)
    return found, held_exits.astype(np.int64), np.sort(at[en & ~closed]).astype(np.int64)


def _depths(ln: np.ndarray, en: np.ndarray, held: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(before, after): each row's depth before and after it, the rows grouped by line (ascending), each line's
    in row order."""
    if not len(ln):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = np.asarray(np.searchsorted(ln, np.arange(int(ln[-1]) + 1)))  # where each line begins
    step = np.where(en, 1, -1)
    climb = np.cumsum(step)
    after = _ints(held)[ln] + climb - (climb - step)[start][ln]
    return after - step, after


def _first(line: np.ndarray, flags: np.ndarray, lines: int) -> np.ndarray:
    """The first row of each line where `flags` holds (-1: none)."""
    out: np.ndarray = np.full(lines, -1, dtype=np.int64)
    rows = np.flatnonzero(flags)
    present, first = np.unique(line[rows], return_index=True)  # the index of each line's first occurrence
    out[present] = rows[first]
    return out


def _ints(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _flags(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=bool).view(np.uint8)
