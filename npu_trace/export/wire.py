"""Rows of bytes laid out by templates: how the exporters write a block's packets or lines at once.

A template is a short program (`Template`): constant bytes, a column's value as a protobuf varint, as 8
little-endian bytes, as decimal text or as microseconds with three decimals, the difference of two columns
as microseconds (a slice's duration, `span`), a column's low bits as decimal text (`low`), bytes from a table
by the column's value, and length-delimited parts (a protobuf message inside another: its length in front
of it).
`assemble(prog, starts, which, cols, consts, tables, out, at)` writes row i by template `which[i]` with row i
of every column, the rows one after the other, into `out` from offset `at`: a Perfetto packet or a Chrome JSON
line per row, no Python object per row. `out` is a bytearray, grown as needed (kept from call to call: a fresh
buffer costs its pages' first touch each time), or another writable buffer of a fixed size (a page-aligned
one the output writes from directly, npu_trace.export.output), into which rows that may not fit are not
written: the call then gives minus a size that would hold them.

Two implementations, identical in every result: the C extension `npu_trace.export._wire` (built by the
package's install where a compiler is; the GIL is released while it writes) and `assemble_py` in pure Python.
`assemble` is the C one when the extension imports; `IMPLEMENTATION` says which ("c" or "python").
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

try:
    from npu_trace.export import _wire
except ImportError:  # installed where no compiler was: the pure-Python assembler, with the same results
    _wire = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _wire is not None else "python"
CONST, VARINT, FIXED64, TABLE, BEGIN, END, SKIPZ, DEC, MICROS, FRAMED, SPAN, LOW = range(1, 13)
OPERANDS = {CONST: 1, VARINT: 1, FIXED64: 1, TABLE: 2, BEGIN: 0, END: 0, SKIPZ: 2, DEC: 1, MICROS: 1, FRAMED: 3,
            SPAN: 2, LOW: 2}  # fmt: skip
MASK64 = (1 << 64) - 1


class Template:
    """A template being written: `const(b)`, `varint(c)`, ..., `begin()`/`end()`; `words` is the program.
    Adjacent constants are joined (the same bytes, fewer operations)."""

    def __init__(self, consts: Consts) -> None:
        self.consts = consts
        self.words: List[int] = []
        self._pending = b""

    def const(self, data: bytes) -> Template:
        self._pending += data
        return self

    def varint(self, col: int) -> Template:
        return self._op(VARINT, col)

    def fixed64(self, col: int) -> Template:
        return self._op(FIXED64, col)

    def table(self, col: int, table: int) -> Template:
        return self._op(TABLE, col, table)

    def dec(self, col: int) -> Template:
        return self._op(DEC, col)

    def micros(self, col: int) -> Template:
        return self._op(MICROS, col)

    def span(self, end: int, begin: int) -> Template:
        """The column `end`'s value less the column `begin`'s (int64, wrapping) as microseconds (micros)."""
        return self._op(SPAN, end, begin)

    def low(self, col: int, bits: int) -> Template:
        """The column's low `bits` bits (1 to 63) as decimal text."""
        return self._op(LOW, col, bits)

    def framed(self, tag: bytes, body: bytes, col: int) -> Template:
        """`tag`, then a length-delimited part of `body` and the column's value as a varint (a protobuf field
        holding a small message that ends in an integer: a debug annotation's name and int value)."""
        self._flush()
        return self._op(FRAMED, self.consts.id(tag), self.consts.id(body), col)

    def begin(self) -> Template:
        return self._op(BEGIN)

    def end(self) -> Template:
        return self._op(END)

    def unless_zero(self, col: int) -> int:
        """What follows, up to `until(mark)`, is skipped when the column's value is 0: returns the mark."""
        self._op(SKIPZ, col, 0)
        return len(self.words) - 1

    def until(self, mark: int) -> Template:
        """The end of what `unless_zero` made skippable: the operations written since are counted."""
        self._flush()
        at, ops = mark + 1, 0
        while at < len(self.words):
            at += 1 + OPERANDS[self.words[at]]
            ops += 1
        self.words[mark] = ops
        return self

    def done(self) -> List[int]:
        self._flush()
        return self.words

    def _op(self, *words: int) -> Template:
        self._flush()
        self.words.extend(words)
        return self

    def _flush(self) -> None:
        if self._pending:
            self.words += [CONST, self.consts.id(self._pending)]
            self._pending = b""


class Consts:
    """The constant byte strings of a set of templates, each kept once."""

    def __init__(self) -> None:
        self.items: List[bytes] = []
        self._ids: Dict[bytes, int] = {}

    def id(self, data: bytes) -> int:
        got = self._ids.get(data)
        if got is None:
            got = self._ids[data] = len(self.items)
            self.items.append(data)
        return got


def program(templates: Sequence[Sequence[int]]) -> Tuple[np.ndarray, np.ndarray]:
    """The templates as one int32 program and the start of each (and the end of the last)."""
    starts: np.ndarray = np.zeros(len(templates) + 1, dtype=np.int32)
    starts[1:] = np.cumsum([len(t) for t in templates])
    words = [w for t in templates for w in t]
    return np.array(words, dtype=np.int32), starts


def assemble(prog: np.ndarray, starts: np.ndarray, which: np.ndarray, cols: np.ndarray, consts: Tuple[bytes, ...],
             tables: Tuple[Tuple[bytes, ...], ...], out: Any, at: int = 0) -> int:  # fmt: skip
    """Row i of `cols` (int64, n rows of one value per column) written by template which[i] (see the module
    docstring), the rows one after the other, into `out` from offset `at` (a bytearray is grown when too
    small, never shrunk): where the bytes end; minus a size that would hold them when `out` is another buffer
    too small for them (nothing written)."""
    which = np.ascontiguousarray(which, dtype=np.int32)
    cols = np.ascontiguousarray(cols, dtype=np.int64)
    if _wire is not None:
        return int(_wire.assemble(prog, starts, which, cols, cols.shape[1], consts, tables, out, at))
    if at < 0:
        raise ValueError("at must not be negative")
    with memoryview(out) as view:
        if view.readonly:
            raise TypeError("out must be a writable buffer")
    data = assemble_py(prog, starts, which, cols, consts, tables)
    end = at + len(data)
    if end > len(out):
        if not isinstance(out, bytearray):
            return -end
        out.extend(bytes(end - len(out)))
    memoryview(out)[at:end] = data
    return end


def assemble_py(prog: np.ndarray, starts: np.ndarray, which: np.ndarray, cols: np.ndarray,
                consts: Tuple[bytes, ...], tables: Tuple[Tuple[bytes, ...], ...]) -> bytes:  # fmt: skip
    """The pure-Python assembler: the C one's output, a row at a time, as bytes."""
    words, bounds = prog.tolist(), starts.tolist()
    if len(which) and (int(which.min()) < 0 or int(which.max()) >= len(bounds) - 1):
        raise ValueError("a row names a template that does not exist")
    for t in sorted(set(which.tolist())):  # the templates the rows use: only those are checked
        _check(words[bounds[t] : bounds[t + 1]], cols.shape[1], len(consts), len(tables))
    out = bytearray()
    for t, values in zip(which.tolist(), cols.tolist()):
        _row(words, bounds[t], bounds[t + 1], values, consts, tables, out)
    return bytes(out)


def _check(words: List[int], ncols: int, nconsts: int, ntables: int) -> None:
    """A template's operations and operands exist (as the C assembler checks them before it writes)."""
    at = 0
    while at < len(words):
        op = words[at]
        k = OPERANDS.get(op, -1)
        args = words[at + 1 : at + 1 + k]
        if k < 0 or len(args) < k or (op in (CONST, FRAMED) and not 0 <= args[0] < nconsts):
            raise ValueError("a template is malformed")
        if op == FRAMED and not (0 <= args[1] < nconsts and 0 <= args[2] < ncols):
            raise ValueError("a template is malformed")
        if op not in (CONST, FRAMED) and k and not 0 <= args[0] < ncols:
            raise ValueError("a template is malformed")
        if op == TABLE and not 0 <= args[1] < ntables:
            raise ValueError("a template is malformed")
        if op == SKIPZ and args[1] < 0:
            raise ValueError("a template is malformed")
        if (op == SPAN and not 0 <= args[1] < ncols) or (op == LOW and not 1 <= args[1] <= 63):
            raise ValueError("a template is malformed")
        at += 1 + k


def _row(words: List[int], at: int, end: int, values: List[int], consts: Tuple[bytes, ...],
         tables: Tuple[Tuple[bytes, ...], ...], out: bytearray) -> None:  # fmt: skip
    opened: List[int] = []
    while at < end:
        op = words[at]
        args = words[at + 1 : at + 1 + OPERANDS[op]]
        at += 1 + OPERANDS[op]
        if op == CONST:
            out += consts[args[0]]
        elif op == FRAMED:
            tail = varint(values[args[2]] & MASK64)
            out += consts[args[0]] + varint(len(consts[args[1]]) + len(tail)) + consts[args[1]] + tail
        elif op == BEGIN:
            opened.append(len(out))
        elif op == END:
            start = opened.pop() if opened else _unmatched()
            out[start:start] = varint(len(out) - start)
        elif op == SKIPZ:
            for _ in range(args[1] if values[args[0]] == 0 else 0):
                at += 1 + OPERANDS[words[at]] if at < end else 0
        elif op == TABLE:
            out += _entry(tables[args[1]], values[args[0]])
        elif op == SPAN:
            out += number(MICROS, _int64(values[args[0]] - values[args[1]]))
        elif op == LOW:
            out += number(DEC, values[args[0]] & ((1 << args[1]) - 1))
        else:
            out += number(op, values[args[0]])
    if opened:
        _unmatched()


def _unmatched() -> int:
    raise ValueError("a template's BEGIN and END do not match")


def _entry(table: Tuple[bytes, ...], code: int) -> bytes:
    if code >= len(table):
        raise ValueError("a value is out of its table")
    return table[code] if code >= 0 else b""


def _int64(value: int) -> int:
    """A value wrapped into int64 (as the difference of two int64 is in C)."""
    return (value + (1 << 63) & MASK64) - (1 << 63)


def number(op: int, value: int) -> bytes:
    """One value written by a VARINT, FIXED64, DEC or MICROS operation."""
    if op == VARINT:
        return varint(value & MASK64)
    if op == FIXED64:
        return (value & MASK64).to_bytes(8, "little")
    sign, mag = ("-", -value) if value < 0 else ("", value)
    if op == DEC:
        return f"{sign}{mag}".encode()
    return f"{sign}{mag // 1000}.{mag % 1000:03d}".encode()


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def columns(n: int, count: int) -> np.ndarray:
    """`n` rows of `count` zeroed int64 values (the array `assemble` reads; column c is [:, c])."""
    return np.zeros((n, count), dtype=np.int64)


