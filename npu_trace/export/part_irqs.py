"""The interrupt handlers of a block drawn as columns (npu_trace.export.drawing): the mapper's _irq and
_handler, line by line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export.parts import Part, _int_arg, picked, place
from npu_trace.export.pieces import CONST, SLICE, STR, SUBKEYS, Pieces, factorize, present
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.rowargs import ArgSet, args_of, as_dicts, merge, put
from npu_trace.export.track_map import MAX_OPEN_IRQS, _hashable
from npu_trace.pipeline.order import stable_order
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
        a column, a handler named before its name is known).

        An exit closes the latest entry open (a stack, from the entries the line had open before the block):
        by depth, the entries and exits of each level alternate, and an exit pairs with the entry before it
        at its level. An exit that closes an entry of an earlier block (the first at a level held at the
        block's start) goes one by one (the entry is the mapper's)."""
        values, has_irq = irq[0], irq[1]
        cols = [dev, np.where(has_irq, values, 0), has_irq.astype(np.int64)]
        line, firsts = factorize(cols)
        keys = [(None if d < 0 else d, _hashable(v) if h else None)
                for d, v, h in zip(*(c[firsts].tolist() for c in cols))]  # fmt: skip
        self._line_of, self._line_keys = line, keys
        held = np.array([len(self.m.irq_open.get(key, ())) for key in keys], dtype=np.int64)
        order = stable_order(line)  # each line's rows, in row order
        ln, en = line[order], entry[order]
        start = np.asarray(np.searchsorted(ln, np.arange(len(keys))))  # where each line begins in `order`
        step = np.where(en, 1, -1)
        climb = np.cumsum(step)
        after = held[ln] + climb - (climb - step)[start][ln]
        before = after - step
        bad = (~en & (before <= 0)) | (en & (before >= MAX_OPEN_IRQS)) | ~ok[order]
        bad_line = np.bincount(ln[bad], minlength=len(keys)) > 0
        bad_line |= self._named_late(keys, order, ln, en, start, name)
        ok[order[bad_line[ln]]] = False
        good = ~bad_line[ln]
        return self._pair_levels(order[good], ln[good], en[good], np.where(en, after, before)[good], held, keys, ok)

    def _named_late(self, keys: List[Any], order: np.ndarray, ln: np.ndarray, en: np.ndarray, start: np.ndarray,
                    name: Tuple[np.ndarray, np.ndarray]) -> np.ndarray:  # fmt: skip
        """Lines whose first handler (first exit) comes before their name is known (irq_names.setdefault at the
        first named row: the exit itself names it first); the others' names are set here."""
        named = name[1][order]
        first_named = _first_in(named, start, len(ln))
        first_exit = _first_in(~en, start, len(ln))
        late: np.ndarray = np.zeros(len(keys), dtype=bool)
        for g, key in enumerate(keys):
            at = int(first_named[g])
            if at < 0 or key in self.m.irq_names:
                continue
            if 0 <= first_exit[g] < at:
                late[g] = True
            else:
                self.m.irq_names[key] = self.o.d.strings.items[int(name[0][order[at]])]
        return late

    def _pair_levels(self, at: np.ndarray, ln: np.ndarray, en: np.ndarray, level: np.ndarray, held: np.ndarray,
                     keys: List[Any], ok: np.ndarray) -> Tuple[np.ndarray, List[Tuple[Any, int]]]:  # fmt: skip
        """Within each (line, level), in row order: entries and exits alternate; each entry followed by an exit
        is a handler; a first exit at a level held before the block goes one by one; an entry not followed is
        left open."""
        order = _order_by(ln, level, at)
        at, ln, en, level = at[order], ln[order], en[order], level[order]
        first: np.ndarray = np.ones(len(at), dtype=bool)
        first[1:] = (ln[1:] != ln[:-1]) | (level[1:] != level[:-1])
        ok[at[first & ~en & (level <= held[ln])]] = False
        closed: np.ndarray = np.zeros(len(at), dtype=bool)
        closed[:-1] = en[:-1] & ~en[1:] & ~first[1:]
        starts = np.flatnonzero(closed)
        pairs = np.stack([at[starts], at[starts + 1]])
        left = np.flatnonzero(en & ~closed)
        opened = sorted((int(at[i]), keys[int(ln[i])]) for i in left.tolist())
        return pairs.take(np.argsort(pairs[1], kind="stable"), axis=1), [(key, i) for i, key in opened]

    def _pairs(self, nb: NormBlock, rows: np.ndarray, plain: List[ArgSet], pairs: np.ndarray) -> None:
        starts, exits = pairs[0], pairs[1]
        begin, end = nb.block.ts[rows[starts]], nb.block.ts[rows[exits]]
        shown, b, e, clipped = self.window(begin, end)
        sets = merge(_select(plain, starts), _select(plain, exits), len(starts))
        sets = put(sets, "cpu_exit", INT_ARG, nb.block.cpu[rows[exits]].astype(np.int64))
        sets = put(sets, "clipped", CONST, True, clipped)
        layout, vals = self.o.layout(sets, len(starts))
        sel = np.flatnonzero(shown)
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


def _order_by(*cols: np.ndarray) -> np.ndarray:
    """np.lexsort(cols[::-1]) of integer columns whose last is distinct in every row (the row's position): one
    sort of the columns packed into an int64 when their ranges fit in 63 bits (any sort: no two keys equal)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    low = [int(c.min()) for c in cols]
    bits = [max(1, (int(c.max()) - lo).bit_length()) for c, lo in zip(cols, low)]
    if sum(bits) > 63:
        return np.lexsort(cols[::-1])
    key: np.ndarray = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, b in zip(cols, low, bits):
        key = (key << b) | (c.astype(np.int64) - lo)
    return np.argsort(key)


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


def _first_in(flags: np.ndarray, start: np.ndarray, n: int) -> np.ndarray:
    """For each segment beginning at `start` (ascending, the last ending at n): the position of its first set
    flag, -1 when none."""
    hits = np.flatnonzero(flags)
    at = np.searchsorted(hits, start)
    found = hits[np.minimum(at, max(len(hits) - 1, 0))] if len(hits) else np.zeros(len(start), np.int64)
    ends = np.append(start[1:], n)
    return np.where((at < len(hits)) & (found < ends), found, -1)


def _select(sets: Sequence[ArgSet], positions: np.ndarray) -> List[ArgSet]:
    """The sets at `positions` (each in one of them), as sets over 0..len(positions)."""
    n = max((int(s.at.max()) + 1 for s in sets if len(s.at)), default=0)
    which: np.ndarray = np.full(max(n, int(positions.max()) + 1 if len(positions) else 0), -1, dtype=np.int64)
    for k, s in enumerate(sets):
        which[s.at] = k
    mine = which[positions]
    out = []
    for k in present(mine[mine >= 0]):
        at = np.flatnonzero(mine == k)
        s = sets[k]
        pick = np.searchsorted(s.at, positions[at])
        out.append(ArgSet(at, {name: (kind, v[pick] if kind != CONST else v) for name, (kind, v) in s.keys.items()}))
    return out


def _irq_lanes(m: Any, key: Any) -> Callable[[int], Any]:
    """The tracks of a line's lanes (the mapper's _irq_track)."""
    return lambda lane: m._irq_track(key, lane)
