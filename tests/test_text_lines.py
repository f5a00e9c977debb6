"""The compiled assembly of text lines (npu_trace.sinks._lines) writes what Python's %-formatting writes: every
code (%d of int64 and uint64, %#x of both, %09d, %6d, %6d.%09d of nanoseconds' divmod by 10**9, %s of str as
UTF-8) on any value, literals between them, any number of rows; `render_into` writes the same bytes into a
buffer used again; `interleave` puts several renders' lines in one order; bad arguments are errors, never a
crash or a read outside what it was given."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.sinks import _lines
from npu_trace.sinks.text import SPECS, as_chunk

I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=12)


@st.composite
def pieces(draw: Any) -> Tuple[List[Any], int]:
    n = draw(st.integers(0, 20))
    out: List[Any] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["lit", "d", "u", "x", "X", "9", "6", "t", "s", "k"]))
        if kind == "lit":
            out.append(("", draw(TEXT)))
        elif kind in "uX":
            out.append((kind, np.array(draw(st.lists(U64, min_size=n, max_size=n)), dtype=np.uint64)))
        elif kind == "9":
            out.append((kind, np.array(draw(st.lists(st.integers(0, 10**12), min_size=n, max_size=n)), np.int64)))
        elif kind == "s":
            out.append((kind, draw(st.lists(TEXT, min_size=n, max_size=n))))
        elif kind == "k":  # each row names one of a few distinct texts
            keys = draw(st.lists(TEXT, min_size=1, max_size=4))
            index = draw(st.lists(st.integers(0, len(keys) - 1), min_size=n, max_size=n))
            out.append((kind, (np.array(index, dtype=np.int64), keys)))
        else:
            out.append((kind, np.array(draw(st.lists(I64, min_size=n, max_size=n)), dtype=np.int64)))
    return out, n


def python_lines(parts: List[Any], n: int) -> List[str]:
    template = "".join("%6d.%09d" if code == "t" else SPECS[code] if code else text.replace("%", "%%")
                       for code, text in parts)  # fmt: skip
    columns: List[List[Any]] = []
    for code, col in parts:
        if code == "t":  # a stamp is two values: its seconds and the nanoseconds past them
            columns += [[v // 10**9 for v in col.tolist()], [v % 10**9 for v in col.tolist()]]
        elif code == "k":
            columns.append([col[1][i] for i in col[0].tolist()])
        elif code:
            columns.append(col.tolist() if isinstance(col, np.ndarray) else col)
    return [template % row for row in zip(*columns)] if columns else [template % ()] * n


def compiled(parts: List[Any], n: int) -> Tuple[bytes, bytes]:
    return _lines.render(tuple((code.encode(), col) if code else col.encode() for code, col in parts), n)


@settings(max_examples=300, deadline=None)
@given(pieces())
def test_render_writes_what_percent_formatting_writes(case: Tuple[List[Any], int]) -> None:
    parts, n = case
    want = python_lines(parts, n)
    data, offsets = compiled(parts, n)
    assert data.decode() == "".join(line + "\n" for line in want)
    assert (data, offsets) == as_chunk(want)
    encoded = tuple((code.encode(), col) if code else col.encode() for code, col in parts)
    for out in (bytearray(), bytearray(b"?" * (len(data) + 7))):  # grown to fit; larger: its start written
        size = _lines.render_into(out, encoded, n)
        assert size == len(data) and out[:size] == data and len(out) >= size


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(TEXT, max_size=6), min_size=1, max_size=4), st.data())
def test_interleave_puts_the_lines_in_the_order_asked(chunks: List[List[str]], data: Any) -> None:
    order = [(c, i) for c, lines in enumerate(chunks) for i in range(len(lines))]
    order = data.draw(st.permutations(order))
    made = [as_chunk(lines) for lines in chunks]
    which = np.array([c for c, _ in order], dtype=np.int32)
    index = np.array([i for _, i in order], dtype=np.int64)
    got = _lines.interleave(tuple(m[0] for m in made), tuple(m[1] for m in made), which, index)
    assert got.decode() == "".join(chunks[c][i] + "\n" for c, i in order)


def test_bad_arguments_are_errors() -> None:
    col = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError):
        _lines.render(((b"d", col),), 4)  # a column shorter than the rows
    with pytest.raises(ValueError):
        _lines.render(((b"q", col),), 3)  # no such code
    with pytest.raises(ValueError):
        _lines.render(((b"\x00", col),), 3)  # nor a NUL
    with pytest.raises(TypeError):
        _lines.render(((b"s", [1, 2, 3]),), 3)  # not str
    with pytest.raises(ValueError):
        _lines.render(((b"s", ["a"]),), 3)
    with pytest.raises(TypeError):
        _lines.render((5,), 3)
    with pytest.raises(ValueError):  # an index outside its list
        _lines.render(((b"k", (np.array([0, 2, 1], np.int64), ["a", "b"])),), 3)
    with pytest.raises(ValueError):
        _lines.render(((b"k", ["a"]),), 3)
    for call in (lambda: _lines.render((), -1), lambda: _lines.render_into(bytearray(), (), -1)):
        with pytest.raises(ValueError):  # a negative number of lines
            call()
    with pytest.raises(TypeError):  # a buffer that is not a bytearray
        _lines.render_into(b"", ((b"d", col),), 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        _lines.render_into(bytearray(), ((b"d", col),), 4)
    held = bytearray()
    with memoryview(held), pytest.raises(BufferError):  # a buffer something reads is not resized under it
        _lines.render_into(held, ((b"d", col),), 3)
    chunk, offsets = as_chunk(["a", "b"])
    for which, index in (([1], [0]), ([0], [2]), ([0], [-1])):
        with pytest.raises(ValueError):
            _lines.interleave((chunk,), (offsets,), np.array(which, np.int32), np.array(index, np.int64))
    with pytest.raises(ValueError):  # offsets past the chunk
        _lines.interleave((b"a\n",), (offsets,), np.array([1], np.int32) * 0, np.array([1], np.int64))
