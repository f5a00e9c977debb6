"""An event's fields, read back from the text ftrace or trace-cmd printed for it.

Pure. `FieldReader(fmt, layouts).read(text)` tries the forms an event's text comes in, first that holds wins:

- "print fmt": the format's own print fmt (the kernel's `trace`/`trace_pipe`, `trace-cmd report`), read
  backwards by `npu_trace.ftrace.printfmt`;
- "raw": ` name=value` for every field in the format's order (`trace-cmd report -R`, and `-r EVENT`);
- "trace-cmd": the output of trace-cmd's sched plugin (`prev_comm:prev_pid [prio] S ==> next_comm:next_pid
  [prio]`, `comm:pid [prio] success=1 CPU:002`), whose prev_state letters are the format's own flags;
- "probe": a kprobe's or uprobe's event as the kernel's `trace` prints it, by its own routine rather than its
  print fmt: `(0x<ip>)` or `(<symbol+off/size>)`, and a return probe's `(<ret_ip> <- <func>)`, the two the other
  way round from the print fmt's (tried first for probe events: it needs the `0x` or a symbol);
- "syscall": a syscall event as the kernel prints it: `sys_read(fd: 3, buf: 7ffd1000, count: 340)`,
  `sys_read -> 0x154` (the arguments in hex).

It gives the values as `npu_trace.ftrace.encode` takes them (integers, strings, integer lists, a struct-typed
field's bytes packed by its layout), the form that read them, and the fields (or struct members, "inst.tsid")
the text did not give: not printed at all, or printed through an expression that cannot be turned back
(`chan_name=` from a lookup of two members): those are 0, and the import says which they were.
"""

from __future__ import annotations

import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Pattern, Sequence, Tuple

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
    split_print_fmt,
)
from npu_trace.ftrace.printfmt import Conversion, Inverse, PrintReader, compile_print_fmt

Layouts = Mapping[str, Sequence[Tuple[str, str]]]
Values = Dict[str, Any]  # path ("field" or "field.member") -> value
_HEX = re.compile(r"(-)?(?:0[xX])?([0-9a-fA-F]+)s?")  # "s": trace-cmd < 2.7's %ps of an address ("0xffff..s")
_STRINGS = (CHAR_ARRAY, TAIL)
MAX_TEXT = 4096  # an event's text longer than this is not read into fields (the kernel's own records are smaller)


@dataclass(frozen=True)
class Reading:
    values: Tuple[Any, ...]
    form: str
    absent: Tuple[str, ...]


class FieldReader:
    """The values of one format's fields from an event's text (see the module docstring)."""

    def __init__(self, fmt: EventFormat, layouts: Optional[Layouts] = None, byteorder: str = sys.byteorder) -> None:
        self.fmt = fmt
        self.layouts = layouts or {}
        self.end = "<" if byteorder == "little" else ">"
        self.printed = compile_print_fmt(fmt.print_fmt)
        self.raw = _raw_pattern(fmt)
        self.plugin = PLUGINS.get(fmt.full_name)
        self.tables = _tables(self.printed)
        self.probe = _probe_reader(fmt)
        self.forms: List[Tuple[str, Callable[[str], Optional[Values]]]] = [
            *([("probe", self._probe)] if self.probe is not None else []),
            ("print fmt", self._printed), ("raw", self._raw), ("trace-cmd", self._plugin),
            *([("syscall", self._syscall)] if fmt.system == "syscalls" else []),
        ]  # fmt: skip

    def read(self, text: str) -> Optional[Reading]:
        if len(text) > MAX_TEXT:
            return None
        text = text.strip()
        for form, reader in self.forms:
            got = reader(text)
            if got is not None:
                return self._reading(got, form)
        return None

    # ---- the forms ------------------------------------------------------------------------------------------
    def _printed(self, text: str) -> Optional[Values]:
        pattern = self.printed.pattern
        m = pattern.fullmatch(text) if pattern is not None else None
        if m is None:
            return None
        return _combine(self.printed.conversions, m.groups())

    def _raw(self, text: str) -> Optional[Values]:
        m = self.raw.fullmatch(text) if self.raw is not None else None
        if m is None:
            return None
        out: Values = {}
        for field, value in zip(self.fmt.fields, m.groups()):
            got = self._raw_value(field, value.strip())
            if got is None and not self._symbol(field, value.strip()):
                return None
            if got is not None:
                out[field.name] = got
        return out

    def _symbol(self, field: Field, text: str) -> bool:
        """A pointer the print fmt prints as a symbol (%ps), printed so: not given back, not a mismatch."""
        return field.kind == INT and self.printed.direct_conv(field.name) == "p" and bool(re.fullmatch(r"\S+", text))

    def _plugin(self, text: str) -> Optional[Values]:
        return self.plugin(text, self) if self.plugin is not None else None

    def _probe(self, text: str) -> Optional[Values]:
        m = _PROBE.fullmatch(text)
        if m is None or self.probe is None or (m.group("ret") is None) != ("__probe_ip" in self.fmt.field_names):
            return None
        rest = self.probe.pattern.fullmatch(m.group("rest") or "") if self.probe.pattern else None
        got = _combine(self.probe.conversions, rest.groups()) if rest is not None else None
        if got is None:
            return None
        addresses = (("__probe_ip", m.group("ip")),) if m.group("ret") is None else (
            ("__probe_ret_ip", m.group("ip")), ("__probe_func", m.group("ret")))
        for name, text_ in addresses:
            value = _number(text_, "p")
            if value is not None:
                got[name] = value
        return got

    def _syscall(self, text: str) -> Optional[Values]:
        m = _SYSCALL.fullmatch(text)
        if m is None:
            return None
        if m.group("ret") is not None:
            value = _number(m.group("ret"), "x")
            return None if value is None else {"ret": value}
        got: Values = {}
        for name, value in re.findall(r"(\w+): (\S+?)(?:, |$)", m.group("args") or ""):
            number = _number(value, "x")
            if number is None:
                return None
            got[name] = number
        return got

    def _raw_value(self, field: Field, text: str) -> Any:
        if field.kind in _STRINGS or (field.kind in (DATA_LOC, REL_LOC) and field.is_string):
            return _bytes_text(text)
        if field.kind == INT:
            return _raw_int(text, self.printed.direct_conv(field.name), self.tables.get(field.name))
        if field.kind == ARRAY or field.kind in (DATA_LOC, REL_LOC):
            return _raw_array(text, field, self.end)
        return _raw_bytes(text)

    # ---- values -> the encoder's -------------------------------------------------------------------------
    def _reading(self, got: Values, form: str) -> Optional[Reading]:
        values: List[Any] = []
        absent: List[str] = []
        for field in self.fmt.fields:
            value = self._field_value(field, got, absent)
            if value is None:
                return None
            values.append(value)
        return Reading(tuple(values), form, tuple(absent))

    def _field_value(self, field: Field, got: Values, absent: List[str]) -> Any:
        layout = self.layouts.get(field.type) if field.kind == BYTES else None
        if layout is not None:
            return self._struct(field, layout, got, absent)
        if field.name not in got and field.kind == ARRAY and f"{field.name}[0]" in got:
            got[field.name] = self._elements(field, got, absent)
        if field.name not in got:
            absent.append(field.name)
            return _zero(field)
        return _fit(field, got[field.name])

    def _elements(self, field: Field, got: Values, absent: List[str]) -> List[int]:
        """An array printed element by element (`REC->args[0]`, ...)."""
        out = []
        for i in range(field.count):
            key = f"{field.name}[{i}]"
            if key not in got:
                absent.append(key)
            out.append(got.get(key, 0))
        return out

    def _struct(self, field: Field, layout: Sequence[Tuple[str, str]], got: Values, absent: List[str]) -> Any:
        if isinstance(got.get(field.name), bytes):
            return got[field.name]
        members = []
        for name, code in layout:
            value = got.get(f"{field.name}.{name}")
            if value is None:
                absent.append(f"{field.name}.{name}")
            members.append(_wrap(value or 0, struct.calcsize(code) * 8, code.islower()))
        raw = struct.pack(self.end + "".join(code for _, code in layout), *members)
        return raw[: field.size].ljust(field.size, b"\0")


# ---- the print fmt form: each conversion's text into its field ------------------------------------------------
def _combine(conversions: Sequence[Conversion], texts: Sequence[Optional[str]]) -> Optional[Values]:
    """The values the conversions' texts give: a field printed directly takes that value (the same each time
    it is printed), one printed through names takes the or of their values."""
    direct: Values = {}
    ored: Dict[str, int] = {}
    for conv, text in zip(conversions, texts):
        inv = conv.inverse
        if not inv.how or text is None:
            continue
        value = _conv_value(conv, text)
        if value is None:
            if conv.conv == "p":
                continue  # a pointer printed as a symbol: not given back
            return None
        if inv.how == "table":
            ored[inv.path] = ored.get(inv.path, 0) | value
        elif direct.setdefault(inv.path, value) != value:
            return None
    return {**ored, **direct}


def _conv_value(conv: Conversion, text: str) -> Any:
    inv = conv.inverse
    if inv.how == "table":
        return _table_value(text.strip(), inv)
    if conv.conv == "s":
        return text.rstrip() if conv.padded else text
    number = _number(text.strip(), conv.conv)
    if number is None or inv.how != "scale":
        return number
    return number * inv.factor if inv.factor > 0 else _divided(number, -inv.factor)


def _divided(number: int, by: int) -> Optional[int]:
    return number // by if number % by == 0 else None


def _number(text: str, conv: str) -> Optional[int]:
    if conv in "xXp":
        m = _HEX.fullmatch(text)
        return None if m is None else int(m.group(2), 16) * (-1 if m.group(1) else 1)
    if conv == "c":
        return ord(text) if len(text) == 1 else None
    if conv == "o":
        return int(text, 8) if re.fullmatch(r"[0-7]+", text) else None
    return int(text) if re.fullmatch(r"[-+]?\d+", text) else None


def _table_value(text: str, inv: Inverse) -> Optional[int]:
    names = dict(inv.table)
    parts = text.split(inv.delim) if inv.delim and text else [text]
    total = 0
    for part in parts:
        value = names.get(part)
        if value is None:
            value = _number(part, "x") if part.lower().startswith("0x") else _number(part, "d")
        if value is None:
            return None
        total |= value
    return total


_ADDRESS = r"0x[0-9a-fA-F]+|[^\s()]*[g-zG-Z_][^\s()]*"
_PROBE = re.compile(rf"\((?P<ip>{_ADDRESS})(?: <- (?P<ret>{_ADDRESS}))?\)(?:\s+(?P<rest>.*))?", re.S)
_SYSCALL = re.compile(r"sys_\w+(?:\((?P<args>.*)\)| -> (?P<ret>\S+))", re.S)


def _probe_reader(fmt: EventFormat) -> Optional[PrintReader]:
    """A probe event's print fmt without its "(%lx)" or "(%lx <- %lx)" head: the rest of the kernel's text."""
    names = fmt.field_names
    heads = {1: '"(%lx)', 2: '"(%lx <- %lx)'}
    count = 1 if "__probe_ip" in names else (2 if {"__probe_func", "__probe_ret_ip"} <= set(names) else 0)
    if not count or not fmt.print_fmt.startswith(heads[count]):
        return None
    body, args = split_print_fmt(fmt.print_fmt)
    rest = body[len(heads[count]) - 1 :].lstrip()
    return compile_print_fmt(", ".join([f'"{rest}"', *args[count:]]))


def _tables(printed: PrintReader) -> Dict[str, Inverse]:
    """Every name a field is printed with, its printings merged (sched_switch's flags and its "+")."""
    out: Dict[str, Inverse] = {}
    for conv in printed.conversions:
        inv = conv.inverse
        if inv.how == "table":
            had = out.get(inv.path)
            out[inv.path] = inv if had is None else Inverse(inv.paths, "table", table=had.table + inv.table,
                                                            delim=had.delim or inv.delim)  # fmt: skip
    return out


# ---- the raw form ------------------------------------------------------------------------------------------
def _raw_pattern(fmt: EventFormat) -> Optional[Pattern[str]]:
    if not fmt.fields:
        return None
    parts = [f"{re.escape(f.name)}=(.*?)" for f in fmt.fields]
    return re.compile(r"\s*" + r"\s+".join(parts) + r"\s*", re.S)


def _raw_int(text: str, conv: str, table: Optional[Inverse]) -> Optional[int]:
    if text.lower().startswith(("0x", "-0x")):
        return _number(text, "x")
    number = _number(text, "x" if conv in ("x", "X", "p") else "d")
    if number is None and table is not None:
        return _table_value(text, table)
    return number


def _bytes_text(text: str) -> str:
    raw = _array_bytes(text)
    return raw.split(b"\0")[0].decode("utf-8", "replace") if raw is not None else text


def _array_bytes(text: str) -> Optional[bytes]:
    """libtraceevent's raw print of a byte array: `ARRAY[0f, 00, ...]`."""
    m = re.fullmatch(r"ARRAY\[([0-9a-fA-F, ]*)\]", text)
    if m is None:
        return None
    try:
        return bytes(int(b, 16) for b in m.group(1).replace(",", " ").split())
    except ValueError:
        return None


def _raw_array(text: str, field: Field, end: str) -> Optional[List[int]]:
    raw = _array_bytes(text)
    if raw is not None:
        size = field.elem_size if field.kind == ARRAY else 1
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}.get(size)
        if code is None or len(raw) % size:
            return None
        return list(struct.unpack(f"{end}{len(raw) // size}{code}", raw))
    items = re.fullmatch(r"[{\[]\s*(.*?)\s*[}\]]", text)
    numbers = [_number(i.strip(), "x" if i.strip().lower().startswith("0x") else "d")
               for i in (items.group(1).split(",") if items and items.group(1) else [])]  # fmt: skip
    return None if items is None or None in numbers else [int(n or 0) for n in numbers]


def _raw_bytes(text: str) -> Optional[bytes]:
    raw = _array_bytes(text)
    if raw is None and re.fullmatch(r"(?:[0-9a-fA-F]{2})+", text):
        raw = bytes.fromhex(text)
    return raw


# ---- fitting a value to its field ---------------------------------------------------------------------------
def _fit(field: Field, value: Any) -> Any:
    if field.kind == INT:
        return _wrap(value, field.size * 8, field.signed) if isinstance(value, int) else None
    if field.kind == ARRAY:
        return _array(field, value)
    if field.kind in _STRINGS or (field.kind in (DATA_LOC, REL_LOC) and field.is_string):
        return value if isinstance(value, str) else None
    if field.kind in (DATA_LOC, REL_LOC):
        return _dynamic(field, value)
    return _sized(field, value)


def _array(field: Field, value: Any) -> Any:
    if not isinstance(value, list) or len(value) > field.count:
        return None
    bits = field.elem_size * 8
    return [_wrap(v, bits, field.signed) for v in value] + [0] * (field.count - len(value))


def _dynamic(field: Field, value: Any) -> Any:
    if isinstance(value, list):
        return struct.pack(f"<{len(value)}Q", *(v & (2**64 - 1) for v in value)) if field.elem_size == 8 else None
    return value if isinstance(value, bytes) else None


def _sized(field: Field, value: Any) -> Any:
    return value[: field.size].ljust(field.size, b"\0") if isinstance(value, bytes) else None


def _wrap(value: int, bits: int, signed: bool) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if signed and value >> (bits - 1) else value


def _zero(field: Field) -> Any:
    if field.kind == INT:
        return 0
    if field.kind == ARRAY:
        return [0] * field.count
    if field.kind in _STRINGS or field.kind in (DATA_LOC, REL_LOC):
        return "" if field.kind in _STRINGS or field.is_string else b""
    return bytes(field.size)


# ---- trace-cmd's sched plugin ---------------------------------------------------------------------------------
_SWITCH = re.compile(r"(?P<prev_comm>.*):(?P<prev_pid>-?\d+) (?:\[(?P<prev_prio>-?\d+)\] )?(?P<state>\S+) ==> "
                     r"(?P<next_comm>.*):(?P<next_pid>-?\d+)(?: \[(?P<next_prio>-?\d+)\])?", re.S)  # fmt: skip
_WAKEUP = re.compile(r"(?P<comm>.*?):(?P<pid>-?\d+)(?: \[(?P<prio>-?\d+)\])?(?: success=(?P<success>-?\d+))?"
                     r"(?: CPU:(?P<target_cpu>\d+))?", re.S)  # fmt: skip


# the prev_state letters of trace-cmd's sched plugin, by bit: libtraceevent up to 1.7 (trace-cmd 2.x and 3.1)
# prints the fixed "SDTtZXxW"; 1.8 takes them from the format's own __print_flags (the kernel's letters)
_PLUGIN_STATES = tuple((letter, 1 << bit) for bit, letter in enumerate("SDTtZXxW"))


def _switch(text: str, reader: FieldReader) -> Optional[Values]:
    m = _SWITCH.fullmatch(text)
    if m is None:
        return None
    table = reader.tables.get("prev_state")
    own = tuple((n, v) for n, v in (table.table if table else ()) if len(n) == 1 and v)
    state = _plugin_state(m.group("state"), _PLUGIN_STATES)
    state = _plugin_state(m.group("state"), own) if state is None else state
    if state is None:
        return None
    got: Values = {"prev_state": state}
    return _groups(m, reader.fmt, got, ("state",))


def _plugin_state(text: str, letters: Sequence[Tuple[str, int]]) -> Optional[int]:
    """trace-cmd's prev_state letters, each a bit of `letters`, or "R" for none."""
    if text == "R":
        return 0
    by_letter = dict(letters)
    total = 0
    for letter in text.split("|"):
        if letter not in by_letter:
            return None
        total |= by_letter[letter]
    return total


def _wakeup(text: str, reader: FieldReader) -> Optional[Values]:
    m = _WAKEUP.fullmatch(text)
    return None if m is None else _groups(m, reader.fmt, {}, ())


def _groups(m: re.Match[str], fmt: EventFormat, got: Values, skip: Tuple[str, ...]) -> Optional[Values]:
    """The plugin's groups as fields: every field of the format must be printed, and nothing else."""
    names = set(fmt.field_names)
    for key, value in m.groupdict().items():
        if key in skip:
            continue
        if (value is None) != (key not in names):
            return None
        if value is not None:
            got[key] = value if key.endswith("comm") else int(value)
    return got if names <= set(got) else None


PLUGINS: Dict[str, Callable[[str, FieldReader], Optional[Values]]] = {
    "sched:sched_switch": _switch,
    "sched:sched_wakeup": _wakeup,
    "sched:sched_wakeup_new": _wakeup,
}
