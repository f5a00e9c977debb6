"""The byte assembler (npu_trace.export.wire): the compiled one writes what the pure-Python one writes, for any
template and any values, and refuses what is malformed the same way."""

from __future__ import annotations

import mmap
from typing import Any, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.export import wire
from npu_trace.export.wire import Consts, Template, assemble, assemble_py, program

NCOLS = 4
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _op(draw: Any, t: Template, depth: int) -> int:
    """One random operation on `t`; returns the nesting depth after it."""
    kind = draw(st.sampled_from(["const", "varint", "fixed64", "table", "dec", "micros", "framed", "part", "skip",
                                 "span", "low"]))  # fmt: skip
    col = draw(st.integers(0, NCOLS - 1))
    if kind == "const":
        t.const(draw(st.binary(max_size=20)))
    elif kind in ("varint", "fixed64", "dec", "micros"):
        getattr(t, kind)(col)
    elif kind == "table":
        t.table(col, 0)
    elif kind == "span":
        t.span(col, draw(st.integers(0, NCOLS - 1)))
    elif kind == "low":
        t.low(col, draw(st.integers(1, 63)))
    elif kind == "framed":
        t.framed(draw(st.binary(min_size=1, max_size=3)), draw(st.binary(max_size=20)), col)
    elif kind == "part" and depth < 4:
        t.begin()
        for _ in range(draw(st.integers(0, 3))):
            _op(draw, t, depth + 1)
        t.end()
    elif kind == "skip":
        mark = t.unless_zero(col)
        for _ in range(draw(st.integers(0, 2))):
            _op(draw, t, depth + 1)
        t.until(mark)
    return depth


@st.composite
def jobs(draw: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Tuple[bytes, ...], Any]:
    consts = Consts()
    templates: List[List[int]] = []
    for _ in range(draw(st.integers(1, 3))):
        t = Template(consts)
        for _ in range(draw(st.integers(0, 6))):
            _op(draw, t, 0)
        templates.append(t.done())
    prog, starts = program(templates)
    n = draw(st.integers(0, 12))
    table = tuple(draw(st.lists(st.binary(max_size=40), min_size=1, max_size=4)))
    cols = np.array([[draw(st.one_of(_I64, st.integers(-1, len(table) - 1), st.just(0))) for _ in range(NCOLS)]
                     for _ in range(n)], dtype=np.int64).reshape(n, NCOLS)  # fmt: skip
    cols[:, 1] = np.clip(cols[:, 1], -1, len(table) - 1)  # the table's column (others may be out of it: refused)
    which = np.array([draw(st.integers(0, len(templates) - 1)) for _ in range(n)], dtype=np.int32)
    return prog, starts, which, cols, tuple(consts.items), (table,)


def _either(fn: Any, *args: Any) -> Tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except ValueError as exc:
        return "error", str(exc)


@pytest.mark.skipif(wire.IMPLEMENTATION != "c", reason="the compiled assembler is not built here")
@settings(max_examples=400, deadline=None)
@given(jobs())
def test_the_compiled_assembler_writes_what_the_python_one_writes(job: Any) -> None:
    prog, starts, which, cols, consts, tables = job
    out = bytearray(b"\xff" * 7)  # a buffer from an earlier call: written from its start
    got = _either(lambda: bytes(out[: assemble(prog, starts, which, cols, consts, tables, out)]))
    want = _either(assemble_py, prog, starts, which, cols, consts, tables)
    assert got == want


def test_the_python_assembler_writes_protobufs_and_texts() -> None:
    consts = Consts()
    t = Template(consts).const(b"\x0a").begin().const(b"\x08").varint(0).framed(b"\x12", b"\x08\x01\x20", 1)
    t.end()
    mark = t.unless_zero(2)
    t.const(b"<").dec(2).const(b"|").micros(3).const(b">").until(mark)
    prog, starts = program([t.done()])
    cols = np.array([[300, -1, 0, 1], [1, 2, -5, -1234567]], dtype=np.int64)
    out = assemble_py(prog, starts, np.zeros(2, np.int32), cols, tuple(consts.items), ())
    neg = b"\xff" * 9 + b"\x01"  # -1 as protobuf writes an int64
    # 300 in two bytes, then a field of 3 bytes and -1 (ten): 3 + 15 bytes in the outer part
    first = b"\x0a\x12\x08\xac\x02\x12\x0d\x08\x01\x20" + neg
    second = b"\x0a\x08\x08\x01\x12\x04\x08\x01\x20\x02<-5|-1234.567>"  # 2 is not 0: what follows is kept
    assert out == first + second


@pytest.mark.parametrize(
    "words",
    [
        [99, 0],
        [wire.LOW + 1],  # the compiled one's own end of a template (OP_RET): never in a program given
        [0],
        [wire.VARINT, 7],
        [wire.CONST, 3],
        [wire.TABLE, 0, 1],
        [wire.VARINT],
        [wire.SPAN, 0, 4],
        [wire.SPAN, 4, 0],
        [wire.LOW, 0, 0],
        [wire.LOW, 0, 64],
    ],
)
def test_a_malformed_template_is_refused_by_both(words: List[int]) -> None:
    prog, starts = np.array(words, np.int32), np.array([0, len(words)], np.int32)
    cols = np.zeros((1, NCOLS), np.int64)
    for fn in (assemble_py, lambda *a: assemble(*a, bytearray())):
        with pytest.raises(ValueError):
            fn(prog, starts, np.zeros(1, np.int32), cols, (b"x",), ((b"y",),))


def test_a_template_no_row_uses_is_not_read() -> None:
    """A program keeps the templates of earlier blocks: those no row uses are not checked against this call."""
    consts = Consts()
    prog, starts = program([Template(consts).varint(0).done(), Template(consts).varint(9).done()])
    cols = np.array([[5]], np.int64)
    assert assemble_py(prog, starts, np.zeros(1, np.int32), cols, tuple(consts.items), ()) == b"\x05"
    out = bytearray()
    assert bytes(out[: assemble(prog, starts, np.zeros(1, np.int32), cols, tuple(consts.items), (), out)]) == b"\x05"


@pytest.mark.skipif(wire.IMPLEMENTATION != "c", reason="the compiled assembler is not built here")
def test_numbers_at_every_count_of_digits_are_written_alike() -> None:
    """Decimal and microsecond text at each digit count's edges (the compiled one writes digits in pairs from a
    table, four at a time, after counting them from the highest bit), both signs, the int64 extremes;
    constants of every length about the compiled copy's sizes (16 and 32 bytes)."""
    edges = {0, 1, (1 << 63) - 1, -(1 << 63), -(1 << 63) + 1}
    for k in range(19):
        edges |= {10**k - 1, 10**k, 10**k + 1, 2 * 10**k, 10**k + 99}
    values = sorted(v for e in edges for v in (e, -e) if -(1 << 63) <= v < 1 << 63)
    consts = Consts()
    templates = [Template(consts).const(b"a" * n).dec(0).const(b"|" * n).micros(0).const(b"\n").done()
                 for n in range(0, 40)]  # fmt: skip
    prog, starts = program(templates)
    cols = np.array([[v] for v in values for _ in templates], dtype=np.int64)
    which = np.array([t for _ in values for t in range(len(templates))], dtype=np.int32)
    out = bytearray()
    got = bytes(out[: assemble(prog, starts, which, cols, tuple(consts.items), (), out)])
    assert got == assemble_py(prog, starts, which, cols, tuple(consts.items), ())
    assert b"\na-9223372036854775808|-9223372036854775.808\n" in got  # the Python one's text, as it says it
    assert b"\na1000000000|1000000.000\n" in got and b"\na-99|-0.099\n" in got


@pytest.mark.skipif(wire.IMPLEMENTATION != "c", reason="the compiled assembler is not built here")
@pytest.mark.parametrize("count", [0, 1, 2, 3, 9])
def test_a_skip_of_more_operations_than_follow_ends_at_the_template_end(count: int) -> None:
    """A SKIPZ skips its count of operations, or to its template's end when fewer follow (the compiled one
    skips the words they take in one step, counted once per call); the next row starts its own template."""
    words = [wire.CONST, 0, wire.SKIPZ, 0, count, wire.DEC, 1, wire.CONST, 1, wire.TABLE, 0, 0, wire.CONST, 0]
    prog, starts = program([words, [wire.DEC, 1, wire.CONST, 1]])
    cols = np.array([[0, 7], [5, 8], [0, -9], [0, 3]], dtype=np.int64)
    which = np.array([0, 0, 1, 0], dtype=np.int32)
    consts, tables = (b"<", b">"), ((b"x", b"", b"", b"", b"", b"y"),)
    out = bytearray()
    got = bytes(out[: assemble(prog, starts, which, cols, consts, tables, out)])
    assert got == assemble_py(prog, starts, which, cols, consts, tables)
    assert got.startswith(b"<" + [b"7>x<", b">x<", b"x<", b"<", b""][min(count, 4)]) and b"<8>y<-9>" in got


def test_a_span_and_low_bits_are_written_as_the_numbers_they_stand_for() -> None:
    """A slice's duration (its end less its begin, wrapping in int64 as numpy's difference does) as
    microseconds, a flow id's low 53 bits as decimal text: by both assemblers."""
    consts = Consts()
    t = Template(consts).span(1, 0).const(b"|").low(2, 53).const(b"\n")
    prog, starts = program([t.done()])
    big = (1 << 63) - 1
    cols = np.array([[1000, 13345, (1 << 60) + 7], [5, 5, -1], [-(1 << 63), big, 12], [big, -(1 << 63), 0]],
                    dtype=np.int64)  # fmt: skip
    want = b"".join(
        f"{'-' if d < 0 else ''}{abs(d) // 1000}.{abs(d) % 1000:03d}|{f & ((1 << 53) - 1)}\n".encode()
        for d, f in zip((cols[:, 1] - cols[:, 0]).tolist(), cols[:, 2].tolist())
    )
    assert assemble_py(prog, starts, np.zeros(4, np.int32), cols, tuple(consts.items), ()) == want
    out = bytearray()
    n = assemble(prog, starts, np.zeros(4, np.int32), cols, tuple(consts.items), (), out)
    assert bytes(out[:n]) == want and b"12.345|7\n" in want and b"0.000|9007199254740991\n" in want


@pytest.mark.parametrize("impl", ["c", "python"])
def test_rows_go_after_an_offset_and_a_fixed_buffer_too_small_is_left_as_it_was(impl: str, monkeypatch: Any) -> None:
    """`at`: the rows written from there, what lies before kept (a bytearray grown to hold them). A buffer of
    a fixed size (an anonymous map, as the direct writes use) that may not hold them: nothing written, minus a
    size that holds them returned; given that size, the same bytes."""
    if impl == "c" and wire.IMPLEMENTATION != "c":
        pytest.skip("the compiled assembler is not built here")
    if impl == "python":
        monkeypatch.setattr(wire, "_wire", None)
    consts = Consts()
    prog, starts = program([Template(consts).const(b"<").dec(0).const(b">").done()])
    cols = np.array([[-5], [123456789], [0]], dtype=np.int64)
    which = np.zeros(3, np.int32)
    rows = b"<-5><123456789><0>"
    out = bytearray(b"head")
    assert assemble(prog, starts, which, cols, tuple(consts.items), (), out, 4) == 4 + len(rows)
    assert bytes(out[: 4 + len(rows)]) == b"head" + rows
    small = mmap.mmap(-1, mmap.PAGESIZE)
    small[:4] = b"head"
    at = mmap.PAGESIZE - 8
    need = assemble(prog, starts, which, cols, tuple(consts.items), (), small, at)
    assert need < 0 and -need >= at + len(rows) and small[:] == b"head" + bytes(mmap.PAGESIZE - 4)
    room = mmap.mmap(-1, -need)
    assert assemble(prog, starts, which, cols, tuple(consts.items), (), room, at) == at + len(rows)
    assert room[at : at + len(rows)] == rows
    with pytest.raises(ValueError, match="at must not be negative"):
        assemble(prog, starts, which, cols, tuple(consts.items), (), out, -1)
    with pytest.raises((TypeError, BufferError)):
        assemble(prog, starts, which, cols, tuple(consts.items), (), b"read only", 0)


def test_a_skip_may_end_between_a_constant_and_the_number_after_it() -> None:
    """The compiled one runs a constant and the number after it as one operation; a SKIPZ that skips the
    constant alone lands on the number, which is written all the same."""
    consts = Consts()
    t = Template(consts)
    mark = t.unless_zero(1)
    t.const(b"x=").until(mark).dec(0).const(b";").micros(0).const(b"|").span(0, 1).const(b"\n")
    prog, starts = program([t.done()])
    cols = np.array([[1500, 0], [-2500, 7]], dtype=np.int64)
    out = bytearray()
    got = bytes(out[: assemble(prog, starts, np.zeros(2, np.int32), cols, tuple(consts.items), (), out)])
    assert got == b"1500;1.500|1.500\nx=-2500;-2.500|-2.507\n"
    assert got == assemble_py(prog, starts, np.zeros(2, np.int32), cols, tuple(consts.items), ())
