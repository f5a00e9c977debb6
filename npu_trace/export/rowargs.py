"""The arguments of many rows of a normalized block as columns: what the exporters show beside each slice.

The normalizer gives a row of a planned format (`npu_trace.pipeline.vnormalize`) the arguments
`{name: field value for each (name, field) of its plan}`, then its plan's constants; a paired return takes
`{**its entry's, **its own, latency_ns, entry_ts_ns}`. Here the same dicts are built for a whole set of rows at
once as `ArgSet`s: rows (positions in the caller's arrays) whose arguments have the same names in the same order,
each name's value a column over those rows (INT: int64; STR: numbers in a `Strings` registry) or a constant.
The dict operations the timeline applies (merge, pop, set) are done on the sets (`merge`, `drop`, `put`),
splitting a set where a value is present in only some of its rows. Values that cannot be columns (an array,
a struct, an integer past int64) leave their rows to the caller's one-by-one path (`args_of`'s `rejected`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export.pieces import CONST, STR, Layouts, Strings, present
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.texts import distinct
from npu_trace.export.texts import distinct_rows as _distinct_rows  # the tests name it here
from npu_trace.ftrace.decode import RecordDecoder
from npu_trace.ftrace.format import CHAR_ARRAY, DATA_LOC, INT, REL_LOC, Field

Value = Tuple[int, Any]  # (INT_ARG, int64 column) | (STR, string codes) | (CONST, the value)
_I64_MAX = (1 << 63) - 1
_STRING_ELEMS = ("char", "unsigned char", "signed char")


class ArgSet:
    """Rows `at` (positions, ascending) whose arguments are `keys`, in that order (see the module docstring)."""

    __slots__ = ("at", "keys")

    def __init__(self, at: np.ndarray, keys: Dict[str, Value]) -> None:
        self.at = at
        self.keys = keys

    def take(self, mask: np.ndarray) -> ArgSet:
        """The rows of a boolean mask over `at`."""
        return ArgSet(self.at[mask], {k: (kind, v[mask] if kind != CONST else v) for k, (kind, v) in self.keys.items()})

    def value(self, name: str) -> Optional[Value]:
        return self.keys.get(name)


# ---- the normalizer's arguments of planned rows ------------------------------------------------------------
def args_of(nb: Any, rows: np.ndarray, strings: Strings) -> Tuple[List[ArgSet], np.ndarray]:
    """The arguments of `rows` (rows of the block, each of a planned format: nb.group_of[r] >= 0) as the
    normalizer shapes them before pairing, one set per format; and the positions of the rows left out
    (a value that cannot be a column)."""
    sets: List[ArgSet] = []
    rejected: List[np.ndarray] = []
    groups = nb.group_of[rows]
    for g in present(groups):
        at = np.flatnonzero(groups == g)
        made, bad = _group_args(nb, nb.groups[g], rows[at], strings)
        if bad is not None and bad.any():
            rejected.append(at[bad])
            made = ArgSet(at, made.keys).take(~bad)
        else:
            made = ArgSet(at, made.keys)
        sets.append(made)
    return sets, np.sort(np.concatenate(rejected)) if rejected else np.zeros(0, np.int64)


def _group_args(nb: Any, group: Any, rows: np.ndarray, strings: Strings) -> Tuple[ArgSet, Optional[np.ndarray]]:
    table, plan = group.table, group.plan
    refs = nb.block.ref[rows]
    fields = table.plan.fmt.fields
    keys: Dict[str, Value] = {}
    bad: Optional[np.ndarray] = None
    if plan[3] and not decodable(table, refs):
        return ArgSet(rows, {}), np.ones(len(rows), dtype=bool)
    for name, i in plan[3]:
        got = field_column(table, refs, fields[i], strings)
        if got is None:
            return ArgSet(rows, {}), np.ones(len(rows), dtype=bool)
        value, wrong = got
        keys[name] = value
        if wrong is not None:
            bad = wrong if bad is None else bad | wrong
    for name, const in plan[4]:
        keys[name] = (CONST, const)
    return ArgSet(rows, keys), bad


def decodable(table: Any, refs: np.ndarray) -> bool:
    """Records the table's decoder takes (the short ones it refuses go one by one, as the reference)."""
    decoder = table.plan.decoder
    if type(decoder) is not RecordDecoder:
        return False
    if not len(refs) or int(table.length.min()) >= decoder.size:  # every record of the table: no gather
        return True
    return int(table.length[refs].min()) >= decoder.size


def field_column(table: Any, refs: np.ndarray, field: Field, strings: Strings) -> Optional[Tuple[Value, Any]]:
    """A field of the table's rows `refs` (records the decoder takes: `decodable`) as the decoder gives it, as a
    column: (value, the rows where it cannot be one, or None); None when the field never can (arrays, structs,
    a decoder that fixes values)."""
    if field.name not in table.plan.fields:
        return None
    col = table.cols[field.name][refs]
    if field.kind == INT:
        if col.dtype == np.uint64 and len(col) and int(col.max()) > _I64_MAX:
            return (INT_ARG, col.astype(np.int64)), col > _I64_MAX
        return (INT_ARG, col.astype(np.int64, copy=False)), None
    if field.kind == CHAR_ARRAY:
        return (STR, _codes(col, strings)), None
    if field.kind in (DATA_LOC, REL_LOC) and field.type.replace("const ", "").strip() in _STRING_ELEMS:
        return _dynamic_strings(table, refs, field, col, strings)
    return None


def _codes(raw: np.ndarray, strings: Strings) -> np.ndarray:
    """String codes of fixed-width byte values (C strings: up to the first NUL), one decode per distinct value,
    the new ones numbered in the values' byte order (as np.unique orders them)."""
    if not len(raw):
        return np.zeros(0, np.int64)
    groups, first = _distinct_rows(raw.view(np.uint8).reshape(len(raw), -1))
    uniq = raw[first]
    order = np.argsort(uniq, kind="stable")  # a few values: their byte order
    codes: np.ndarray = np.empty(len(uniq), dtype=np.int64)
    codes[order] = strings.codes([_c_string(bytes(u)) for u in uniq[order].tolist()])
    return codes[groups]


def _c_string(raw: bytes) -> str:
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("utf-8", "backslashreplace")


def _dynamic_strings(table: Any, refs: np.ndarray, field: Field, loc: np.ndarray,
                     strings: Strings) -> Optional[Tuple[Value, Any]]:  # fmt: skip
    """A __data_loc/__rel_loc string field: its distinct values found (npu_trace.export.texts), each decoded
    once, the new ones numbered in the values' byte order (as _codes numbers them)."""
    loc = loc.astype(np.int64)
    offset, length = loc & 0xFFFF, loc >> 16
    if field.kind == REL_LOC:
        offset = offset + field.offset + field.size
    if len(refs) and (offset + length > table.length[refs]).any():
        return None  # beyond the record: the decoder raises (the rows go one by one)
    if not len(refs):
        return (STR, np.zeros(0, np.int64)), None
    start, which = table.offset[refs] + offset, table.buf[refs]
    groups, firsts = distinct(table.bufs, which, start, length)
    values = [bytes(memoryview(table.bufs[int(which[f])])[int(start[f]) : int(start[f] + length[f])]).rstrip(b"\0")
              for f in firsts.tolist()]  # fmt: skip
    order = sorted(range(len(values)), key=values.__getitem__)
    codes: np.ndarray = np.empty(len(values), dtype=np.int64)
    codes[order] = strings.codes([_c_string(values[g]) for g in order])
    return (STR, codes[groups]), None


# ---- the dict operations, on sets -----------------------------------------------------------------------
def merge(first: Sequence[ArgSet], second: Sequence[ArgSet], n: int) -> List[ArgSet]:
    """{**a, **b} of each row's arguments in `first` and in `second` (each row in one set of each; rows in
    only one of them are left out)."""
    a_of, b_of = _set_of(first, n), _set_of(second, n)
    both = (a_of >= 0) & (b_of >= 0)
    combo = np.where(both, a_of * (len(second) + 1) + b_of, -1)
    out: List[ArgSet] = []
    for c in present(combo[both]):
        at = np.flatnonzero(combo == c)
        a, b = first[c // (len(second) + 1)], second[c % (len(second) + 1)]
        ka, kb = _columns_at(a, at), _columns_at(b, at)
        out.append(ArgSet(at, {**ka, **kb}))
    return out


def _set_of(sets: Sequence[ArgSet], n: int) -> np.ndarray:
    which: np.ndarray = np.full(n, -1, dtype=np.int64)
    for k, s in enumerate(sets):
        which[s.at] = k
    return which


def _columns_at(s: ArgSet, at: np.ndarray) -> Dict[str, Value]:
    """The set's columns at positions `at` (all of them among its rows, in order)."""
    if len(at) == len(s.at):  # every one of its rows: its columns as they are
        return dict(s.keys)
    pick = np.searchsorted(s.at, at)
    return {k: (kind, v[pick] if kind != CONST else v) for k, (kind, v) in s.keys.items()}


def drop(sets: Sequence[ArgSet], names: Sequence[str]) -> List[ArgSet]:
    return [ArgSet(s.at, {k: v for k, v in s.keys.items() if k not in names}) for s in sets]


def put(sets: Sequence[ArgSet], name: str, kind: int, values: Any,
        present: Optional[np.ndarray] = None) -> List[ArgSet]:  # fmt: skip
    """out[name] = value in each row where `present` (a bool per position; None: every row): `values` a column
    per position (INT or STR) or a constant (CONST). A set is split where the name is present in some rows only."""
    out: List[ArgSet] = []
    for s in sets:
        has: Optional[np.ndarray] = None if present is None else present[s.at]
        if has is None or has.all():
            keys = dict(s.keys)
            keys[name] = (kind, values if kind == CONST else _at(values, s.at))
            out.append(ArgSet(s.at, keys))
            continue
        if not has.any():  # in none of its rows (a slice clipped at the window's edge: seldom): the set as it is
            out.append(s)
            continue
        for part, on in ((s.take(has), True), (s.take(~has), False)):
            if not len(part.at):
                continue
            if on:
                part.keys = dict(part.keys)
                part.keys[name] = (kind, values if kind == CONST else _at(values, part.at))
            out.append(part)
    return out


def layouts(sets: Sequence[ArgSet], n: int, width: int, registry: Layouts) -> Tuple[np.ndarray, np.ndarray]:
    """(the layout of each position, its values: `width` rows of n) (see npu_trace.export.pieces)."""
    codes: np.ndarray = np.full(n, -1, dtype=np.int64)
    vals: np.ndarray = np.zeros((width, n), dtype=np.int64)
    for s in sets:
        layout: List[Tuple[str, int, Any]] = []
        every = len(s.at) == n  # the set holds every position: its columns copied as they are
        for j, (name, (kind, v)) in enumerate(s.keys.items()):
            if kind == CONST:
                layout.append((name, CONST, v))
            else:
                layout.append((name, kind, j))
                if every:
                    vals[j] = v
                else:
                    vals[j, s.at] = v
        codes[s.at if not every else slice(None)] = registry.code(tuple(layout))
    return codes, vals


def _at(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """values[at], for positions `at` in order (all of them: the values as they are)."""
    return values if len(at) == len(values) else values[at]


def width_of(sets: Sequence[ArgSet]) -> int:
    return max((len(s.keys) for s in sets), default=0)


def as_dicts(sets: Sequence[ArgSet], positions: np.ndarray, strings: Strings) -> List[Dict[str, Any]]:
    """The arguments of each of `positions` as a dict (for the few rows the mapping keeps as objects: a
    handler's entry still open at the block's end)."""
    out: List[Dict[str, Any]] = []
    for pos in positions.tolist():
        s = next(s for s in sets if len(s.at) and s.at[min(int(np.searchsorted(s.at, pos)), len(s.at) - 1)] == pos)
        i = int(np.searchsorted(s.at, pos))
        out.append({k: _item(kind, v, i, strings) for k, (kind, v) in s.keys.items()})
    return out


def _item(kind: int, value: Any, i: int, strings: Strings) -> Any:
    if kind == CONST:
        return value
    return strings.items[int(value[i])] if kind == STR else int(value[i])
