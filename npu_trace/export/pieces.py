"""A block's drawn timeline as columns: what the exporters write without an object per slice, instant or counter.

`Pieces` holds one row per thing drawn: its `key` (where it goes among the block's writer calls: see
`npu_trace.export.emit`), `what` (SLICE: its begin and its end; INSTANT; COUNTER, its value in the first value
column), its track (the `Emitter`'s number of it), `ts` and `end`, its name (a number in `Names`), its
arguments' `layout` (a number in `Layouts`) and their values (`vals`: a column per argument position), and
the flow it starts or ends (`flow_out`, `flow_in`: 0 for none). A layout is a tuple of (argument name, kind,
x): INT (x: the value column), STR (x: the value column, holding a number in `Strings`) or CONST (x: the value
itself, the same in every row). The writers turn a run of pieces into their bytes at once
(`PerfettoWriter.pieces`, `ChromeJsonWriter.pieces`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from npu_trace.export.rows import Part, Room, dense, key_ordered
from npu_trace.export.wire import Consts, assemble, program
from npu_trace.pipeline.order import KeyPacking, stable_order

SLICE, INSTANT, COUNTER = 0, 1, 2
INT, STR, CONST = 0, 1, 2
SUBKEYS = 1 << 12  # writer calls one key (a row, a task, a memory change) may make
Layout = Tuple[Tuple[str, int, Any], ...]
Column = Union[np.ndarray, int]
T = TypeVar("T")


class Registry(Generic[T]):
    """Values numbered in the order they are first seen."""

    def __init__(self) -> None:
        self.items: List[T] = []
        self._codes: Dict[Any, int] = {}

    def code(self, value: T) -> int:
        key = self._key(value)
        got = self._codes.get(key)
        if got is None:
            got = self._codes[key] = len(self.items)
            self.items.append(value)
        return got

    def codes(self, values: Sequence[T]) -> np.ndarray:
        return np.array([self.code(v) for v in values], dtype=np.int64)

    @staticmethod
    def _key(value: Any) -> Any:
        return value


class Names(Registry[str]):
    """Slice and instant names."""


class Strings(Registry[str]):
    """The text values of arguments."""


class Layouts(Registry[Layout]):
    """Argument layouts (see the module docstring); a constant that is a list or a map is told by its text."""

    @staticmethod
    def _key(value: Layout) -> Any:
        return repr(value)


# the columns of a row of pieces: its fields, three spare columns a writer fills for its templates, the values
KEY, WHAT, TRACK, TS, END, NAME, LAYOUT, FLOW_OUT, FLOW_IN, SPARE, VALS = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12
_FIELDS = ("key", "what", "track", "ts", "end", "name", "layout", "flow_out", "flow_in")
_FIELD_AT = {name: at for at, name in enumerate(_FIELDS)}


class Pieces:
    """See the module docstring: one row of int64 per piece (`rows`: the fields at KEY ... FLOW_IN, three spare
    columns, the values from VALS on), the rows of a block in key order once `done`; each field also as a
    column (`key`, `what`, ...: a copy of the field made when it is first read, the writers reading each
    several times and some not at all; nothing writes a field once done) and the values as `vals` (a row per
    argument position)."""

    def __init__(self) -> None:
        self._parts: List[Part] = []  # (its pieces, its columns) of each add()
        self.rows: np.ndarray = np.zeros((0, VALS), dtype=np.int64)
        self._fields: Dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getattr__(self, name: str) -> np.ndarray:
        at = _FIELD_AT.get(name)
        if at is None:
            raise AttributeError(name)
        got = self._fields.get(at)
        if got is None:
            got = self._fields[at] = np.ascontiguousarray(self.rows[:, at])
        return got

    @property
    def vals(self) -> np.ndarray:
        return self.rows[:, VALS:].T

    def add(self, key: np.ndarray, what: int, track: Column, ts: Column, name: Column = -1, layout: Column = -1,
            vals: Sequence[Column] = (), end: Column = 0, flow_out: Column = 0,
            flow_in: Column = 0) -> None:  # fmt: skip
        """Rows of one kind (a scalar stands for a column of that value)."""
        if len(key):
            fields: List[Column] = [key, what, track, ts, end, name, layout, flow_out, flow_in]
            spare: List[Column] = [0] * (VALS - len(fields))
            self._parts.append((len(key), fields + spare + list(vals)))

    def done(self, room: Optional[Room] = None) -> Pieces:
        """The rows added, in key order (npu_trace.export.rows), laid in `room` when one is given (then they
        are read only until the room's next use)."""
        parts, self._parts = self._parts, []
        if parts:
            self.rows = key_ordered(parts, room)
            self._fields = {}
        return self


def factorize(cols: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Rows of integer key columns as dense group numbers (grouping, not order), and the first row of each
    group: through a table over the packed keys' range when it is small (no sort), else np.unique."""
    n = len(cols[0]) if len(cols) else 0
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(cols) == 1:
        packed: np.ndarray = cols[0].astype(np.int64, copy=False)
    else:
        stacked = np.stack([c.astype(np.int64, copy=False) for c in cols])
        packed = KeyPacking(stacked).pack(stacked)
    low, high = int(packed.min()), int(packed.max())
    if high - low < max(1 << 16, 4 * n):
        return dense(packed, low, high - low + 1)
    _, firsts, codes = np.unique(packed, return_index=True, return_inverse=True)
    return codes.reshape(-1), firsts


def split(codes: np.ndarray, count: int) -> List[np.ndarray]:
    """The rows of each group number 0..count-1, in row order."""
    if count == 1:
        return [np.arange(len(codes))]
    order = stable_order(codes)
    return np.split(order, np.cumsum(np.bincount(codes, minlength=count))[:-1])


def present(values: np.ndarray) -> List[int]:
    """The distinct small non-negative integers among `values`, in order."""
    return np.flatnonzero(np.bincount(values)).tolist() if len(values) else []


def first_of(codes: np.ndarray, known: Optional[np.ndarray] = None) -> np.ndarray:
    """The positions where each code first occurs (in position order), only the codes `known` (a bool per
    code) says are not known, when given."""
    pos = np.arange(len(codes)) if known is None else np.flatnonzero(~known[codes])
    if not len(pos):
        return pos
    _, first = factorize([codes[pos]])
    return np.sort(pos[first])


class PiecesWriter:
    """What both formats' piece writers share: the templates (one per kind of piece and argument layout, made by
    the format's `_make`), the program the compiled assembler runs them with, the writer's counts, and `write`:
    a run of pieces laid out once (the format's `_prepare`: each piece's template and columns), its bytes
    assembled between the descriptions of the tracks first used in it (with the format's `_tables`)."""

    def __init__(self, writer: Any) -> None:
        self.w = writer
        self.consts = Consts()
        self.templates: List[List[int]] = []
        self._template_of: Dict[Tuple[int, int], int] = {}
        self._prog: Tuple[np.ndarray, np.ndarray] = program([])

    def write(self, p: Pieces, lo: int, hi: int, drawn: Any) -> None:
        """Pieces [lo, hi), each track described before its first piece (drawn.emitter)."""
        emitter = drawn.emitter
        firsts = (lo + first_of(p.track[lo:hi], emitter.described)).tolist()
        which, cols = self._prepare(p, lo, hi, drawn)
        if len(self.templates) != len(self._prog[1]) - 1:
            self._prog = program(self.templates)
        consts = tuple(self.consts.items)
        at = lo
        for cut in [*firsts, hi]:
            if cut > at:
                a, b = at - lo, cut - lo
                self.w.assembled(partial(assemble, *self._prog, which[a:b], cols[a:b], consts, self._tables(drawn)))
            if cut < hi:
                emitter.ensure(emitter.by_code[int(p.track[cut])])
            at = cut
        self._count(p, lo, hi)

    def _prepare(self, p: Pieces, lo: int, hi: int, drawn: Any) -> Tuple[np.ndarray, np.ndarray]:
        """(the template of each piece, its columns) of pieces [lo, hi)."""
        raise NotImplementedError

    def _tables(self, drawn: Any) -> Tuple[Any, ...]:
        """The tables the templates read, as they stand (the tracks described so far)."""
        raise NotImplementedError

    def _count(self, p: Pieces, lo: int, hi: int) -> None:
        what = p.what[lo:hi]
        slices = what == SLICE
        n_slices = int(np.count_nonzero(slices))  # two count_nonzero: bincount took 2.7x as long
        n_instants = int(np.count_nonzero(what == INSTANT))
        counts = self.w.counts
        counts["slices"] += n_slices
        counts["instants"] += n_instants
        counts["counters"] += len(what) - n_slices - n_instants  # the third kind, COUNTER
        counts["flows"] += int(np.count_nonzero((p.flow_in[lo:hi] != 0) & slices))

    def _templates(self, p: Pieces, lo: int, hi: int, drawn: Any) -> np.ndarray:
        """The template of each piece, by its kind and layout."""
        width = len(drawn.layouts.items) + 1
        combo = p.what[lo:hi] * width + p.layout[lo:hi] + 1  # small: a table by combination
        used = np.bincount(combo)
        table: np.ndarray = np.zeros(len(used), dtype=np.int32)
        for c in np.flatnonzero(used).tolist():
            table[c] = self._template(c // width, c % width - 1, drawn)
        return table[combo]

    def _template(self, what: int, layout: int, drawn: Any) -> int:
        got = self._template_of.get((what, layout))
        if got is None:
            got = self._template_of[(what, layout)] = len(self.templates)
            self.templates.append(self._make(what, drawn.layouts.items[layout] if layout >= 0 else ()))
        return got

    def _make(self, what: int, layout: Any) -> List[int]:
        raise NotImplementedError  # each format's writer makes its own


def as_calls(p: Pieces, lo: int, hi: int, drawn: Any) -> None:
    """Pieces [lo, hi) given one by one to the drawing's Emitter (begin and end, instant, counter), for a
    writer that takes no pieces (one that rewrites each call: the cluster's, npu_trace.cluster.trace)."""
    emitter, names, texts, layouts = drawn.emitter, drawn.names.items, drawn.strings.items, drawn.layouts.items
    for row in p.rows[lo:hi].tolist():
        track = emitter.by_code[row[TRACK]]
        if row[WHAT] == COUNTER:
            emitter.counter(track, row[TS], row[VALS])
            continue
        args = {key: x if kind == CONST else texts[row[VALS + x]] if kind == STR else row[VALS + x]
                for key, kind, x in (layouts[row[LAYOUT]] if row[LAYOUT] >= 0 else ())}  # fmt: skip
        out = [row[FLOW_OUT]] if row[FLOW_OUT] else []
        if row[WHAT] == INSTANT:
            emitter.instant(track, row[TS], names[row[NAME]], args, out)
            continue
        emitter.begin(track, row[TS], names[row[NAME]], args, out, [row[FLOW_IN]] if row[FLOW_IN] else [])
        emitter.end(track, row[END])
