"""Parsing of tracefs `format` files into field tables, and of `header_page`.

Pure: text in, value objects out. A format file is parsed once; `npu_trace.ftrace.decode` compiles the
table into a struct-based record decoder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, FrozenSet, List, Optional, Tuple

from npu_trace.errors import FormatError

_FIELD_RE = re.compile(
    r"^\s*field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);(?:\s*signed:(?P<signed>-?\d+);)?"
)
_ARRAY_RE = re.compile(r"^(?P<type>.*?)\s*(?P<name>[A-Za-z_]\w*)\s*\[(?P<count>[^\]]*)\]$")
_DYN_RE = re.compile(r"^(?P<type>.*?)\s*(?:\[\s*\]\s*|\s)(?P<name>[A-Za-z_]\w*)$")  # "char[] name", "cpumask_t m"
_ELEM_SIZES = {
    "u8": 1, "s8": 1, "__u8": 1, "__s8": 1, "unsigned char": 1, "signed char": 1, "bool": 1, "uint8_t": 1,
    "u16": 2, "s16": 2, "__u16": 2, "__s16": 2, "short": 2, "unsigned short": 2, "uint16_t": 2,
    "u32": 4, "s32": 4, "__u32": 4, "__s32": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "uint32_t": 4,
    "u64": 8, "s64": 8, "__u64": 8, "__s64": 8, "long": 8, "unsigned long": 8, "long long": 8,
    "unsigned long long": 8, "uint64_t": 8,
}  # fmt: skip
_PLAIN_RE = re.compile(r"^(?P<type>.*?[\s*])(?P<name>[A-Za-z_]\w*)$")

# Field kinds
INT = "int"  # signed/unsigned integer of 1, 2, 4 or 8 bytes (also pointers, bool, enums)
CHAR_ARRAY = "char_array"  # char name[N]: a NUL-terminated string inside the record
ARRAY = "array"  # type name[N] of integers
DATA_LOC = "data_loc"  # __data_loc type[] name: u32 (len << 16 | offset from record start)
REL_LOC = "rel_loc"  # __rel_loc type[] name: u32 (len << 16 | offset from the end of this field)
TAIL = "tail"  # char name[] of size 0: the rest of the record (ftrace:print buf)
BYTES = "bytes"  # anything else (struct-typed fields, odd sizes): raw bytes, expanded by a struct layout


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # the C type as written (element type for arrays)
    offset: int
    size: int
    signed: bool
    kind: str
    count: int = 1  # elements, for ARRAY

    @property
    def elem_size(self) -> int:
        return self.size // self.count if self.count else self.size

    @property
    def is_string(self) -> bool:
        return self.type.replace("const ", "").strip() in ("char", "unsigned char", "signed char")


@dataclass(frozen=True)
class EventFormat:
    """One event's format: id, system, name, its common fields and its own fields (in offset order)."""

    id: int
    system: str
    name: str
    common: Tuple[Field, ...]
    fields: Tuple[Field, ...]
    print_fmt: str

    @property
    def full_name(self) -> str:
        return f"{self.system}:{self.name}"

    @property
    def field_names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def hex_fields(self) -> FrozenSet[str]:
        """Fields the kernel prints in hex (a %x / %lx / %Lx / %p conversion fed straight from REC->field)."""
        return hex_fields(self.print_fmt)

    def field(self, name: str) -> Field:
        for f in self.common + self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __hash__(self) -> int:
        return hash((self.id, self.system, self.name))


def parse_field(line: str) -> Optional[Field]:
    """One `field:` line -> Field, or None when the line is not a field line."""
    m = _FIELD_RE.match(line)
    if not m:
        return None
    decl = " ".join(m.group("decl").split())
    offset, size = int(m.group("offset")), int(m.group("size"))
    signed = m.group("signed") == "1"
    for prefix, kind in (("__data_loc ", DATA_LOC), ("__rel_loc ", REL_LOC)):
        if decl.startswith(prefix):
            am = _DYN_RE.match(decl[len(prefix) :])
            if not am:
                raise FormatError(f"cannot parse dynamic field declaration {decl!r}")
            return Field(am.group("name"), am.group("type").strip(), offset, size, signed, kind)
    am = _ARRAY_RE.match(decl)
    if am:
        return _array_field(am, offset, size, signed, decl)
    pm = _PLAIN_RE.match(decl)
    if not pm:
        raise FormatError(f"cannot parse field declaration {decl!r}")
    ctype = pm.group("type").strip()
    kind = INT if size in (1, 2, 4, 8) and not ctype.startswith("struct ") else BYTES
    if ctype.startswith("struct ") and "*" in ctype:
        kind = INT  # a pointer to a struct is an address
    return Field(pm.group("name"), ctype, offset, size, signed, kind)


def _array_field(am: re.Match, offset: int, size: int, signed: bool, decl: str) -> Field:
    ctype, name, count_text = am.group("type").strip(), am.group("name"), am.group("count").strip()
    if not count_text:
        if size != 0:
            raise FormatError(f"flexible array with a size: {decl!r}")
        return Field(name, ctype, offset, 0, signed, TAIL)
    try:
        count = int(count_text, 0)
    except ValueError:  # a symbolic length (TASK_COMM_LEN): the element type gives it
        elem = _ELEM_SIZES.get(ctype.replace("const ", "").strip(), 0)
        count = size // elem if elem and size % elem == 0 else 0
    probe = Field(name, ctype, offset, size, signed, ARRAY, count or 1)
    if probe.is_string:
        return Field(name, ctype, offset, size, signed, CHAR_ARRAY, count or size)
    if count > 0 and size % count == 0 and size // count in (1, 2, 4, 8) and not ctype.startswith("struct "):
        return Field(name, ctype, offset, size, signed, ARRAY, count)
    return Field(name, ctype, offset, size, signed, BYTES)


def parse_format(text: str, system: Optional[str] = None) -> EventFormat:
    """A whole `format` file -> EventFormat. `system` is the directory the file came from."""
    name: Optional[str] = None
    ev_id: Optional[int] = None
    common: List[Field] = []
    fields: List[Field] = []
    print_fmt = ""
    in_format = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("ID:"):
            try:
                ev_id = int(line[3:].strip())
            except ValueError as exc:
                raise FormatError(f"bad event ID line {line!r}") from exc
        elif line.startswith("format:"):
            in_format = True
        elif line.startswith("print fmt:"):
            print_fmt = line[len("print fmt:") :].strip()
        elif in_format and line.startswith("field:"):
            f = parse_field(line)
            if f is None:
                raise FormatError(f"malformed field line {line!r}")
            (common if f.name.startswith("common_") else fields).append(f)
    if name is None or ev_id is None:
        raise FormatError("format text has no name: or ID: line")
    if not any(f.name == "common_type" for f in common):
        raise FormatError(f"format of {name!r} has no common_type field")
    fields.sort(key=lambda f: f.offset)
    return EventFormat(ev_id, system or "", name, tuple(common), tuple(fields), print_fmt)


@dataclass(frozen=True)
class PageHeader:
    """Layout of a ring-buffer page (subbuffer), from events/header_page."""

    ts_offset: int
    ts_size: int
    commit_offset: int
    commit_size: int
    data_offset: int
    data_size: int

    @property
    def page_size(self) -> int:
        return self.data_offset + self.data_size


def parse_header_page(text: str) -> PageHeader:
    found: Dict[str, Tuple[int, int]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*field:\s*(?P<decl>[^;]+);\s*offset:(?P<o>\d+);\s*size:(?P<s>\d+);", line)
        if m:
            fname = m.group("decl").split()[-1]
            found.setdefault(fname, (int(m.group("o")), int(m.group("s"))))
    try:
        ts, commit, data = found["timestamp"], found["commit"], found["data"]
    except KeyError as exc:
        raise FormatError(f"header_page lacks field {exc.args[0]!r}") from exc
    if ts[1] != 8 or commit[1] not in (4, 8):
        raise FormatError(f"unexpected header_page layout (timestamp size {ts[1]}, commit size {commit[1]})")
    return PageHeader(ts[0], ts[1], commit[0], commit[1], data[0], data[1])


_CONV_RE = re.compile(r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|z|j|t)?([a-zA-Z])[a-zA-Z]*")
_REC_RE = re.compile(r"^(?:\([^()]*\)\s*)?REC->(\w+)$")


def split_print_fmt(print_fmt: str) -> Tuple[str, List[str]]:
    """`"fmt", arg, arg` -> (fmt, [arg, ...]), splitting arguments at top-level commas."""
    text = print_fmt.strip()
    if not text.startswith('"'):
        return "", []
    end = 1
    while end < len(text) and (text[end] != '"' or text[end - 1] == "\\"):
        end += 1
    fmt, rest = text[1:end], text[end + 1 :]
    args, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            if cur.strip():
                args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        args.append(cur.strip())
    return fmt, args


@lru_cache(maxsize=4096)
def hex_fields(print_fmt: str) -> FrozenSet[str]:
    fmt, args = split_print_fmt(print_fmt)
    convs = [m.group(1) for m in _CONV_RE.finditer(fmt) if m.group(0) != "%%"]
    out = set()
    for conv, arg in zip(convs, args):
        m = _REC_RE.match(arg)
        if m and conv in "xXp":
            out.add(m.group(1))
    return frozenset(out)
