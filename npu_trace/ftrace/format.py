"""Parsing of tracefs `format` files into field tables, and of `header_page`.

Pure: text in, value objects out. A format file is parsed once; `npu_trace.ftrace.decode` compiles the
table into a struct-based record decoder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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
TAIL = "tail"  # type name[] of size 0: the rest of the record (ftrace:print buf, ftrace:bprint's words)
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
    elem: int = 0  # a flexible array's (TAIL) element size: 0 for characters (a string)

    @property
    def elem_size(self) -> int:
        if self.kind == TAIL:
            return self.elem
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


def parse_field(line: str, check: bool = True) -> Optional[Field]:
    """One `field:` line -> Field, or None when the line is not a field line. A FormatError (its `field` set)
    for a declaration that cannot be parsed or (`check`) whose size contradicts its C type (`check_field`;
    header_page's lines are not checked: its `int overwrite` is one byte, a flag inside the commit word)."""
    m = _FIELD_RE.match(line)
    if not m:
        return None
    decl = " ".join(m.group("decl").split())
    offset, size = int(m.group("offset")), int(m.group("size"))
    signed_text = m.group("signed")
    if signed_text not in (None, "0", "1"):
        name = _decl_name(decl)
        raise FormatError(f"field {name!r}: signed:{signed_text} (0 or 1)", field=name)
    signed = signed_text == "1"
    field = _parse_decl(decl, offset, size, signed)
    if check:
        check_field(field, decl)
    return field


def _decl_name(decl: str) -> str:
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?$", decl)
    return m.group(1) if m else decl


def _parse_decl(decl: str, offset: int, size: int, signed: bool) -> Field:
    for prefix, kind in (("__data_loc ", DATA_LOC), ("__rel_loc ", REL_LOC)):
        if decl.startswith(prefix):
            am = _DYN_RE.match(decl[len(prefix) :])
            if not am:
                raise FormatError(f"cannot parse dynamic field declaration {decl!r}", field=_decl_name(decl))
            return Field(am.group("name"), am.group("type").strip(), offset, size, signed, kind)
    am = _ARRAY_RE.match(decl)
    if am:
        return _array_field(am, offset, size, signed, decl)
    pm = _PLAIN_RE.match(decl)
    if not pm:
        raise FormatError(f"cannot parse field declaration {decl!r}", field=_decl_name(decl))
    ctype = pm.group("type").strip()
    if size == 0:  # `char buf; size:0`: a flexible array as kernels before 4.x declare it (no brackets)
        return _tail(pm.group("name"), ctype, offset, signed)
    kind = INT if size in (1, 2, 4, 8) and not ctype.startswith("struct ") else BYTES
    if ctype.startswith("struct ") and "*" in ctype:
        kind = INT  # a pointer to a struct is an address
    return Field(pm.group("name"), ctype, offset, size, signed, kind)


def _array_field(am: re.Match, offset: int, size: int, signed: bool, decl: str) -> Field:
    ctype, name, count_text = am.group("type").strip(), am.group("name"), am.group("count").strip()
    if not count_text:
        if size != 0:
            raise FormatError(f"flexible array with a size: {decl!r}", field=name)
        return _tail(name, ctype, offset, signed)
    try:
        count = int(count_text, 0)
    except ValueError:  # a symbolic length (TASK_COMM_LEN): the element type gives it
        count = 0
    if not count or not _array_size_agrees(ctype, count, size):
        # the size is the layout the records have; a declared length it contradicts is what the kernel's source
        # said (real kernels write `char oldcomm[32]; size:16`): the length is the one the size gives
        elem = 1 if _is_char(ctype) else _ELEM_SIZES.get(ctype.replace("const ", "").strip(), 0)
        count = size // elem if elem and size % elem == 0 else 0
    probe = Field(name, ctype, offset, size, signed, ARRAY, count or 1)
    if probe.is_string:
        return Field(name, ctype, offset, size, signed, CHAR_ARRAY, count or size)
    if count > 0 and size % count == 0 and size // count in (1, 2, 4, 8) and not ctype.startswith("struct "):
        return Field(name, ctype, offset, size, signed, ARRAY, count)
    return Field(name, ctype, offset, size, signed, BYTES)


def _tail(name: str, ctype: str, offset: int, signed: bool) -> Field:
    """A flexible array: characters (a string) or integers of their type's size."""
    text = ctype.replace("const ", "").strip() in ("char", "signed char", "unsigned char")
    return Field(name, ctype, offset, 0, signed, TAIL, elem=0 if text else _ELEM_SIZES.get(ctype.strip(), 8))


# ---- what the kernel writes: a format that says otherwise is damaged ------------------------------------------
# struct trace_entry (include/linux/trace_events.h), the same on every kernel since 2.6.28: (offset, size)
TRACE_ENTRY = (("common_type", 0, 2), ("common_flags", 2, 1), ("common_preempt_count", 3, 1), ("common_pid", 4, 4))
MAX_RECORD_FIXED = 1 << 16  # no event's fixed part reaches this (a __data_loc offset is 16 bits)
MAX_EVENT_ID = (1 << 16) - 1  # common_type is a u16; ids start at 1
MAX_PAGE = 1 << 20  # a ring-buffer page (subbuffer): 1 MiB at most on any kernel
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,255}$")  # event and system names (tracefs directories)
# an integer type's size in a format is at least the type's own (syscall arguments are printed widened to a long)
_LONG_TYPES = {"long", "unsigned long", "long int", "unsigned long int", "size_t", "ssize_t"}
_UNSIGNED_TYPES = {t for t in _ELEM_SIZES if t.startswith(("u", "__u", "unsigned"))} | {"bool", "size_t"}


def _min_size(ctype: str) -> int:
    """The smallest size a field of this integer C type has in a format (0: a type not known here)."""
    base = ctype.replace("const ", "").replace("volatile ", "").strip()
    if "*" in base:
        return 4
    if base in _LONG_TYPES:
        return 4  # a 32-bit kernel's long
    return _ELEM_SIZES.get(base, 0)


def _is_char(ctype: str) -> bool:
    return ctype.replace("const ", "").strip() in ("char", "signed char", "unsigned char")


def _array_size_agrees(ctype: str, count: int, size: int) -> bool:
    """`size` is what `ctype name[count]` takes (a long: 4 or 8 bytes; a type of unknown size: anything)."""
    elem = 1 if _is_char(ctype) else (_min_size(ctype) if "*" not in ctype else 0)
    if not elem or count < 0:
        return True
    base = ctype.replace("const ", "").strip()
    return size in ({count * elem, count * 8} if base in _LONG_TYPES else {count * elem})


def check_field(field: Field, decl: str = "") -> None:
    """A field's size and signedness against its C type and kind (`decl`: its declaration, as written), as
    the kernel prints them."""
    name, size, kind = field.name, field.size, field.kind
    where = f"field {name!r}"
    base = field.type.replace("const ", "").replace("volatile ", "").strip()
    if kind in (DATA_LOC, REL_LOC) and size != 4:
        raise FormatError(f"{where}: a {kind} locator of size {size} (4 bytes)", field=name)
    if kind in (INT, BYTES) and "[" not in decl:
        low = _min_size(field.type)
        if kind == BYTES and (low or size == 0):
            raise FormatError(f"{where}: size {size} for a {field.type}", field=name)
        if kind == INT and size < low:
            raise FormatError(f"{where}: size {size} for a {field.type} (at least {low})", field=name)
        if "*" in field.type and size not in (4, 8):
            raise FormatError(f"{where}: a pointer of size {size}", field=name)
    if field.signed and "*" not in base and base in _UNSIGNED_TYPES:
        raise FormatError(f"{where}: an unsigned {field.type} marked signed", field=name)


def check_format(fmt: EventFormat) -> None:
    """An event format as the kernel writes it, else a FormatError naming it (and its field): the id (1 ..
    65535), the names, the common fields of struct trace_entry where the kernel puts them, each field inside
    the record (offset + size within 64 KiB), no two fields overlapping or named alike, a flexible array last.
    `parse_format` calls it: every format parsed from text (tracefs, a recording's header, a trace.dat) is one
    whose records every decoder (the page walkers, the columns, the record decoder) can read."""
    event = fmt.full_name

    def bad(what: str, field: Optional[str] = None) -> FormatError:
        return FormatError(f"format {event}: {what}", event=event, field=field)

    if not _NAME_RE.fullmatch(fmt.name):
        raise bad(f"event name {fmt.name!r} is not one the kernel gives")
    if fmt.system and not _NAME_RE.fullmatch(fmt.system):
        raise bad(f"system name {fmt.system!r} is not one the kernel gives")
    if not 0 < fmt.id <= MAX_EVENT_ID:
        raise bad(f"event ID {fmt.id} outside [1, {MAX_EVENT_ID}] (common_type is a u16)")
    every = fmt.common + fmt.fields
    seen: Dict[str, Field] = {}
    for f in every:
        if f.name in seen:
            raise bad(f"field {f.name!r} appears twice", f.name)
        seen[f.name] = f
        if f.offset < 0 or f.size < 0 or f.offset + f.size > MAX_RECORD_FIXED:
            raise bad(f"field {f.name!r}: offset {f.offset} + size {f.size} past {MAX_RECORD_FIXED} bytes", f.name)
    for name, offset, size in TRACE_ENTRY:
        common = seen.get(name)
        if common is None:
            raise bad(f"field {name!r} is missing (every record starts with the kernel's struct trace_entry)", name)
        if (common.offset, common.size) != (offset, size):
            raise bad(f"field {name!r} at offset {common.offset}, size {common.size} (the kernel's: offset {offset}, "
                      f"size {size})", name)  # fmt: skip
    ordered = sorted(every, key=lambda f: (f.offset, f.size))
    for prev, f in zip(ordered, ordered[1:]):
        if prev.offset + prev.size > f.offset:
            raise bad(f"field {f.name!r} (offset {f.offset}, size {f.size}) overlaps field {prev.name!r} "
                      f"(offset {prev.offset}, size {prev.size})", f.name)  # fmt: skip
    tails = [f for f in every if f.kind == TAIL]
    end = max((f.offset + f.size for f in every if f.kind != TAIL), default=0)
    for f in tails:
        if len(tails) > 1 or f is not fmt.fields[-1] or f.offset < end:
            raise bad(f"field {f.name!r}: a flexible array must be the last field", f.name)


def parse_format(text: str, system: Optional[str] = None) -> EventFormat:
    """A whole `format` file -> EventFormat. `system` is the directory the file came from. A FormatError
    (naming the format and the field) for a text that cannot be parsed or that no kernel writes
    (`check_format`)."""
    name: Optional[str] = None
    ev_id: Optional[int] = None
    common: List[Field] = []
    fields: List[Field] = []
    print_fmt = ""
    in_format = in_print = False

    def bad(what: str, field: Optional[str] = None) -> FormatError:
        event = f"{system or ''}:{name if name is not None else '?'}"
        return FormatError(f"format {event}: {what}", event=event, field=field)

    for raw in text.splitlines():
        line = raw.strip()
        if in_print or not line:
            continue  # the print fmt may go on over several lines
        if line.startswith("name:"):
            if name is not None:
                raise bad("a second name: line")
            name = line[5:].strip()
        elif line.startswith("ID:"):
            if ev_id is not None:
                raise bad("a second ID: line")
            try:
                ev_id = int(line[3:].strip())
            except ValueError:
                raise bad(f"bad event ID line {line!r}") from None
        elif line.startswith("format:") and not in_format:
            in_format = True
        elif line.startswith("print fmt:"):
            print_fmt = line[len("print fmt:") :].strip()
            in_print = True
        elif in_format and line.startswith("field:"):
            try:
                f = parse_field(line)
            except FormatError as exc:
                raise bad(str(exc), exc.field) from None
            if f is None:
                raise bad(f"malformed field line {line!r}", _decl_name(line[6:].split(";")[0]))
            (common if f.name.startswith("common_") else fields).append(_distinct(f, common + fields))
        else:
            raise bad(f"unexpected line {line[:60]!r}")
    if name is None or ev_id is None:
        raise bad("format text has no name: or ID: line")
    fields.sort(key=lambda f: f.offset)
    fmt = EventFormat(ev_id, system or "", name, tuple(common), _as_written(fields, system, name), print_fmt)
    check_format(fmt)
    return fmt


def _distinct(f: Field, before: List[Field]) -> Field:
    """A field named as one before it becomes `name_2` (`name_3`...): real kernels write such formats (a
    syscall argument named like the syscall number: `sys_enter_io_submit`'s `nr` twice; `regmap:regcache_sync`'s
    `type` twice), and each field keeps its value, under a name of its own."""
    names = {g.name for g in before}
    if f.name not in names:
        return f
    k = 2
    while f"{f.name}_{k}" in names:
        k += 1
    return replace(f, name=f"{f.name}_{k}")


STACK_EVENTS = ("ftrace:kernel_stack", "ftrace:user_stack")
_LONGS = ("long", "unsigned long")


def _as_written(fields: List[Field], system: Optional[str], name: str) -> Tuple[Field, ...]:
    """The fields as the kernel writes the records. ftrace's stack events declare `unsigned long caller[8]`
    but hold `size` words since 5.2 (fewer or more than 8; at least 8 before, the rest zero or all ones): their
    `caller` is the rest of the record (a TAIL of words). A flexible array of `long`s has the format's `long`
    size (4 on a 32-bit kernel)."""
    longs = [f.size for f in fields if f.kind == INT and f.type.replace("const ", "").strip() in _LONGS]
    out = []
    for f in fields:
        if f.kind == ARRAY and f is fields[-1] and f.name == "caller" and f"{system}:{name}" in STACK_EVENTS:
            f = Field(f.name, f.type, f.offset, 0, f.signed, TAIL, elem=f.elem_size)
        elif f.kind == TAIL and longs and f.type.replace("const ", "").strip() in _LONGS:
            f = Field(f.name, f.type, f.offset, 0, f.signed, TAIL, elem=longs[0])
        out.append(f)
    return tuple(out)


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
    # struct buffer_data_page (kernel/trace/ring_buffer.c): u64 time_stamp, local_t commit, then the data
    for name, (offset, _), want in (("timestamp", ts, 0), ("commit", commit, 8), ("data", data, 8 + commit[1])):
        if offset != want:
            raise FormatError(f"header_page: field {name!r} at offset {offset} (the kernel's: {want})", field=name)
    if not 0 < data[1] <= MAX_PAGE - data[0]:
        raise FormatError(f"header_page: data of {data[1]} bytes (pages of at most {MAX_PAGE} bytes)", field="data")
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
