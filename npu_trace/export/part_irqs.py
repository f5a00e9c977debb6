"""The interrupt handlers of a block drawn as columns (npu_trace.export.drawing): the mapper's _irq and
_handler, line by line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export import handlers
from npu_trace.export.parts import Part, _int_arg, chosen, picked, place
from npu_trace.export.pieces import CONST, SLICE, STR, SUBKEYS, Pieces, factorize, present
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.rowargs import ArgSet, args_of, as_dicts, merge, put
from npu_trace.export.track_map import MAX_OPEN_IRQS, _hashable
from npu_trace.pipeline.vnormalize import NormBlock

if TYPE_CHECKING:
    from npu_trace.export.drawing import BlockDrawing


class Irqs(Part):
    """Interrupt handlers, entry -> exit per line (the mapper's _irq and _handler), for the lines whose entries
    and exits alternate in the block; the other lines' rows go one by one."""

    domain = "irq"

    def __init__(self, owner: BlockDrawing, nb: NormBlock, rows: np.ndarray, pieces: Pieces) -> None:
        super().__init__(owner, pieces)
        rows = rows[_edged(nb, rows)]
        sets, bad = args_of(nb, rows, owner.d.strings)
        irq = _int_arg(sets, "irq", len(rows))
        name = _str_arg(sets, "name", len(rows), owner.d.strings)
        entry = _edges(nb, rows)
        dev = nb.dev[rows]
        ok: np.ndarray = np.ones(len(rows), dtype=bool)
        ok[bad] = False
        ok &= irq[2]
        plain = owner.plain(nb, rows, sets)
        pairs, opened = self._lines(rows, dev, irq, name, entry, ok)
        self.rows = rows[ok]
        self._pairs(nb, rows, plain, pairs)
        self._opened = [(key, int(nb.block.ts[rows[i]]), i) for key, i in opened]
        self._plain, self._n = plain, len(rows)
        self._strings = owner.d.strings

    def _lines(self, rows: np.ndarray, dev: np.ndarray, irq: Tuple[np.ndarray, np.ndarray, np.ndarray],
               name: Tuple[np.ndarray, np.ndarray], entry: np.ndarray,
               ok: np.ndarray) -> Tuple[np.ndarray, List[Tuple[Any, int]]]:  # fmt: skip
        """The (entry, exit) positions of the handlers of the lines drawn as columns, by exit, and (line,
        position) of each entry left open at the block's end; the rows of the other lines are marked not ok
        (drawn one by one: an exit without an entry, more entries open than a line keeps, a row that cannot be
        a column, a handler named before its name is known), and so are the exits that close an entry of an
        earlier block (the entry is the mapper's). An exit closes the latest entry open, from those the line
        held before the block on (npu_trace.export.handlers)."""
        values, has_irq = irq[0], irq[1]
        cols = [dev, np.where(has_irq, values, 0), has_irq.astype(np.int64)]
        line, firsts = factorize(cols)
        keys = [(None if d < 0 else d, _hashable(v) if h else None)
                for d, v, h in zip(*(c[firsts].tolist() for c in cols))]  # fmt: skip
        self._line_of, self._line_keys = line, keys
        held = np.array([len(self.m.irq_open.get(key, ())) for key in keys], dtype=np.int64)
        bad, first_named, first_exit = handlers.checks(line, entry, ok, name[1], held, MAX_OPEN_IRQS)
        bad = bad | self._named_late(keys, first_named.tolist(), first_exit.tolist(), name[0])
        ok[bad[line]] = False
        pairs, held_exits, opened = handlers.pairs(line, entry, bad, held)
        ok[held_exits] = False
        return pairs, [(keys[code], i) for code, i in zip(line[opened].tolist(), opened.tolist())]

    def _named_late(self, keys: List[Any], first_named: List[int], first_exit: List[int],
                    names: np.ndarray) -> np.ndarray:  # fmt: skip
        """Lines whose first handler (first exit) comes before their name is known (irq_names.setdefault at the
        first named row: the exit itself names it first); the others' names are set here."""
        late: np.ndarray = np.zeros(len(keys), dtype=bool)
        for g, key in enumerate(keys):
            at = first_named[g]
            if at < 0 or key in self.m.irq_names:
                continue
            if 0 <= first_exit[g] < at:
                late[g] = True
            else:
                self.m.irq_names[key] = self.o.d.strings.items[int(names[at])]
        return late

    def _pairs(self, nb: NormBlock, rows: np.ndarray, plain: List[ArgSet], pairs: np.ndarray) -> None:
        starts, exits = pairs[0], pairs[1]
        begin, end = nb.block.ts[rows[starts]], nb.block.ts[rows[exits]]
        shown, b, e, clipped = self.window(begin, end)
        sets = merge(_select(plain, starts), _select(plain, exits), len(starts))
        sets = put(sets, "cpu_exit", INT_ARG, nb.block.cpu[rows[exits]].astype(np.int64))
        sets = put(sets, "clipped", CONST, True, clipped)
        layout, vals = self.o.layout(sets, len(starts))
        sel = chosen(shown)
        self.keys = rows[exits[sel]] * SUBKEYS
        self.b, self.e, self.layout_, self.vals = b[sel], e[sel], layout[sel], picked(vals, sel)
        self.line = self._line_of[exits[sel]]

    def draw(self, lo: int, hi: int) -> None:
        self.opened(self.b[lo:hi])
        lines = self.line[lo:hi]
        groups, first = factorize([lines])
        keys = [self._line_keys[code] for code in lines[first].tolist()]
        packers = [self.m._packer(("irq", *key), _irq_lanes(self.m, key)) for key in keys]
        track = place(self.o, packers, groups, self.b[lo:hi], self.e[lo:hi])
        line_names = [self.o.d.names.code(self.m.irq_names.get(key, "irq")) for key in keys]
        names = np.array(line_names, dtype=np.int64)[groups]
        self.pieces.add(self.keys[lo:hi], SLICE, track, self.b[lo:hi], names, self.layout_[lo:hi],
                        list(self.vals[:, lo:hi]), self.e[lo:hi])  # fmt: skip
        self.m.counts["irqs"] += hi - lo

    def run(self, upto: Optional[int]) -> None:
        super().run(upto)
        if upto is None:
            self._leave_open()

    def _leave_open(self) -> None:
        """The entries still waiting for their exit at the block's end, on their line's stack."""
        if not self._opened:
            return
        dicts = as_dicts(self._plain, np.array([i for _, _, i in self._opened], dtype=np.int64), self._strings)
        for (key, ts, _), args in zip(self._opened, dicts):
            self.m.irq_open.setdefault(key, []).append((ts, args))
        self._opened = []


def _edged(nb: NormBlock, rows: np.ndarray) -> np.ndarray:
    """Interrupt rows of planned formats whose "edge" is a constant entry or exit, carrying no timing of
    their own (the kernel-timed handlers of BPF go one by one)."""
    edged = [g.const.get("edge") in ("entry", "exit") and "edge" not in g.arg_at for g in nb.groups]
    return _by_group(nb, rows, edged) & ~nb.paired[rows]


def _edges(nb: NormBlock, rows: np.ndarray) -> np.ndarray:
    """Is each row an entry (else an exit)."""
    return _by_group(nb, rows, [g.const.get("edge") == "entry" for g in nb.groups])


def _by_group(nb: NormBlock, rows: np.ndarray, flags: List[bool]) -> np.ndarray:
    """A flag of each row's format group (False for a row of no group)."""
    table: np.ndarray = np.array([*flags, False], dtype=bool)  # group -1: the last
    return table[nb.group_of[rows]]


def _str_arg(sets: Sequence[ArgSet], name: str, n: int, strings: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(string codes, is a string) of an argument."""
    codes: np.ndarray = np.zeros(n, np.int64)
    named: np.ndarray = np.zeros(n, bool)
    for s in sets:
        got = s.value(name)
        if got is not None and got[0] == STR:
            codes[s.at], named[s.at] = got[1], True
        elif got is not None and got[0] == CONST and isinstance(got[1], str):
            codes[s.at], named[s.at] = strings.code(got[1]), True
    return codes, named


def _select(sets: Sequence[ArgSet], positions: np.ndarray) -> List[ArgSet]:
    """The sets at `positions` (each in one of them), as sets over 0..len(positions)."""
    n = max((int(s.at.max()) + 1 for s in sets if len(s.at)), default=0)
    size = max(n, int(positions.max()) + 1 if len(positions) else 0)
    which: np.ndarray = np.full(size, -1, dtype=np.int64)
    index: np.ndarray = np.zeros(size, dtype=np.int64)  # a position's place in its set's rows
    for k, s in enumerate(sets):
        which[s.at] = k
        index[s.at] = np.arange(len(s.at))
    mine = which[positions]
    out = []
    for k in present(mine[mine >= 0]):
        at = np.flatnonzero(mine == k)
        s = sets[k]
        pick = index[positions[at]]  # positions in no order: a lookup, not a search
        out.append(ArgSet(at, {name: (kind, v[pick] if kind != CONST else v) for name, (kind, v) in s.keys.items()}))
    return out


def _irq_lanes(m: Any, key: Any) -> Callable[[int], Any]:
    """The tracks of a line's lanes (the mapper's _irq_track)."""
    return lambda lane: m._irq_track(key, lane)
