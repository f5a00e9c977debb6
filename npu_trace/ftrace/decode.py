"""Binary decoding of ftrace records: an event format's record payloads into value tuples (`RecordDecoder`,
`make_decoder`, `build_decoders`), for the rows taken one by one (`npu_trace.ftrace.columns.Table`).

Pure functions and small classes, bytes in and `TraceEvent`s out; no file access. Each event format is
compiled once into a precompiled `struct.Struct` over its fixed part (common_pid first, then every field), with
a short list of fix-ups for the fields that need more than an integer (strings, dynamic arrays, struct bytes).

The page layout and its rules: `npu_trace.ftrace.framing`, the one specification.
"""

from __future__ import annotations

import struct
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from npu_trace.errors import FormatError
from npu_trace.ftrace.format import (
    ARRAY,
    BYTES,
    CHAR_ARRAY,
    DATA_LOC,
    INT,
    REL_LOC,
    TAIL,
    EventFormat,
    Field,
)

_INT_CODES = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h", (4, False): "I", (4, True): "i",
              (8, False): "Q", (8, True): "q"}  # fmt: skip

# A struct layout known by name, to expand struct-typed fields (the real driver's trs_id_inst etc.):
# (member name, struct code) in order, little-endian packing is taken from the record's byte order.
StructLayouts = Mapping[str, Sequence[Tuple[str, str]]]

# (value unpacked by the struct, the whole record payload) -> decoded value
Fixup = Callable[[Any, bytes], Any]


def c_string(raw: bytes) -> str:
    """A C string field's text: up to its first NUL, undecodable bytes escaped."""
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("utf-8", "backslashreplace")


class RecordDecoder:
    """Decodes one event type's record payloads into value tuples (the format's own fields, in order)."""

    __slots__ = ("fixups", "fmt", "size", "struct")

    def __init__(self, fmt: EventFormat, byteorder: str = sys.byteorder, layouts: Optional[StructLayouts] = None):
        self.fmt = fmt
        end = "<" if byteorder == "little" else ">"
        pid = _pid_field(fmt)
        codes = [_int_code(pid)]
        pos = pid.offset + pid.size
        fixups: List[Tuple[int, Fixup]] = []
        for index, field in enumerate(fmt.fields):
            if field.offset < pos:
                raise FormatError(f"{fmt.full_name}: field {field.name!r} overlaps the previous field")
            if field.offset > pos:
                codes.append(f"{field.offset - pos}x")
            code, fixup = _field_code(field, end, layouts or {})
            codes.append(code)
            pos = field.offset + field.size
            if fixup is not None:
                fixups.append((index, fixup))
        self.struct = struct.Struct(end + "".join(codes))
        self.size = pid.offset + self.struct.size
        self.fixups = tuple(fixups)

    def decode(self, buf: bytes, start: int, length: int) -> Tuple[int, Tuple[Any, ...]]:
        """(pid, values) of the record payload at buf[start:start+length]. Raises struct.error / ValueError."""
        if length < self.size:
            raise ValueError(f"{self.fmt.full_name}: record of {length} bytes, need {self.size}")
        vals = self.struct.unpack_from(buf, start + 4)
        if not self.fixups:
            return vals[0], vals[1:]
        out = list(vals[1:])
        rec = buf[start : start + length]
        for index, fixup in self.fixups:
            out[index] = fixup(out[index], rec)
        return vals[0], tuple(out)


def _pid_field(fmt: EventFormat) -> Field:
    """common_pid, where the kernel puts it (payload bytes 4..8: the decoders read the fields from there); a format
    parsed from text is checked to have it (`npu_trace.ftrace.format.check_format`), one made in code may not."""
    try:
        pid = fmt.field("common_pid")
    except KeyError:
        where = fmt.full_name
        raise FormatError(f"format {where}: field 'common_pid' is missing", where, "common_pid") from None
    if (pid.offset, pid.size) != (4, 4):
        raise FormatError(f"format {fmt.full_name}: field 'common_pid' at offset {pid.offset}, size {pid.size} "
                          "(the kernel's: offset 4, size 4)", fmt.full_name, "common_pid")  # fmt: skip
    return pid


def _int_code(field: Field) -> str:
    try:
        return _INT_CODES[(field.size, field.signed)]
    except KeyError as exc:
        raise FormatError(f"field {field.name!r}: unsupported integer size {field.size}") from exc


def _field_code(field: Field, end: str, layouts: StructLayouts) -> Tuple[str, Optional[Fixup]]:
    kind = field.kind
    if kind == INT:
        return _int_code(field), None
    if kind == CHAR_ARRAY:
        return f"{field.size}s", lambda raw, rec: c_string(raw)
    if kind == ARRAY:
        elem = _int_code(Field(field.name, field.type, field.offset, field.elem_size, field.signed, INT))
        return f"{field.size}s", _array_fixup(end + f"{field.count}{elem}")
    if kind in (DATA_LOC, REL_LOC):
        return "I", _dynamic_fixup(field, end)
    if kind == TAIL:
        raise FormatError(f"field {field.name!r}: a flexible array must be the last field")
    if kind == BYTES:
        layout = layouts.get(field.type)
        return f"{field.size}s", (_struct_fixup(layout, end) if layout else lambda raw, rec: raw.hex())
    raise FormatError(f"field {field.name!r}: unknown kind {kind}")


def _array_fixup(fmt: str) -> Fixup:
    st = struct.Struct(fmt)
    return lambda raw, rec: list(st.unpack(raw))


def _struct_fixup(layout: Sequence[Tuple[str, str]], end: str) -> Fixup:
    st = struct.Struct(end + "".join(code for _, code in layout))
    names = [name for name, _ in layout]

    def fix(raw: bytes, rec: bytes) -> Dict[str, Any]:
        return dict(zip(names, st.unpack_from(raw.ljust(st.size, b"\0"), 0)))

    return fix


def _dynamic_fixup(field: Field, end: str) -> Fixup:
    rel = field.kind == REL_LOC
    base_off = field.offset + field.size
    elem = field.type.replace("const ", "").strip()
    is_string = elem in ("char", "unsigned char", "signed char")
    elem_code = {"u8": "B", "s8": "b", "u16": "H", "s16": "h", "u32": "I", "s32": "i", "u64": "Q", "s64": "q",
                 "int": "i", "unsigned int": "I", "long": "q", "unsigned long": "Q", "short": "h",
                 "unsigned short": "H"}.get(elem)  # fmt: skip

    def fix(loc: int, rec: bytes) -> Any:
        offset, length = loc & 0xFFFF, loc >> 16
        if rel:
            offset += base_off
        if offset + length > len(rec):
            raise ValueError(f"{field.name}: dynamic data [{offset}:+{length}] beyond the record ({len(rec)})")
        raw = rec[offset : offset + length]
        if is_string:
            return c_string(raw)
        if elem_code:
            size = struct.calcsize(elem_code)
            return list(struct.unpack(f"{end}{length // size}{elem_code}", raw[: length - length % size]))
        return raw.hex()

    return fix


class TailDecoder(RecordDecoder):
    """An event whose last field is a flexible array: the rest of the record. `char name[]` (ftrace:print) is a
    string; an array of integers (ftrace:bprint's `u32 buf[]`, the stack events' words) a list of unsigned
    integers, as many whole ones as the record holds."""

    __slots__ = ("tail_offset", "words")

    def __init__(self, fmt: EventFormat, byteorder: str = sys.byteorder, layouts: Optional[StructLayouts] = None):
        tail = fmt.fields[-1]
        head = EventFormat(fmt.id, fmt.system, fmt.name, fmt.common, fmt.fields[:-1], fmt.print_fmt)
        super().__init__(head, byteorder, layouts)
        self.fmt = fmt
        self.tail_offset = tail.offset
        code = _INT_CODES.get((tail.elem_size, False))
        self.words = None if not tail.elem_size else ("<" if byteorder == "little" else ">", code, tail.elem_size)

    def decode(self, buf: bytes, start: int, length: int) -> Tuple[int, Tuple[Any, ...]]:
        pid, vals = super().decode(buf, start, length)
        raw = buf[start + self.tail_offset : start + length]
        if self.words is None:
            return pid, (*vals, c_string(raw))
        end, code, size = self.words
        if code is None:
            return pid, (*vals, raw.hex())
        return pid, (*vals, list(struct.unpack(f"{end}{len(raw) // size}{code}", raw[: len(raw) - len(raw) % size])))


def make_decoder(
    fmt: EventFormat, byteorder: str = sys.byteorder, layouts: Optional[StructLayouts] = None
) -> RecordDecoder:
    tails = [f for f in fmt.fields if f.kind == TAIL]
    if tails:
        if tails[-1] is not fmt.fields[-1] or len(tails) > 1:
            raise FormatError(f"{fmt.full_name}: a flexible array must be the last field")
        return TailDecoder(fmt, byteorder, layouts)
    return RecordDecoder(fmt, byteorder, layouts)


def build_decoders(
    formats: Iterable[EventFormat], byteorder: str = sys.byteorder, layouts: Optional[StructLayouts] = None
) -> Dict[int, RecordDecoder]:
    return {fmt.id: make_decoder(fmt, byteorder, layouts) for fmt in formats}
