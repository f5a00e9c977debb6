"""The kernel's own text rendering as an oracle: render decoded values through an event's print fmt.

`render_pattern(fmt, fields)` turns the event's `print fmt` and our decoded field values into a regular
expression the kernel's `trace` line must match in full. Arguments this small printf cannot evaluate
(__print_flags, %ps symbols, hashed %p pointers, expressions) become wildcards; every plain field
(REC->x, REC->x[i], __get_str(x)) is checked exactly.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from npu_trace.ftrace.format import split_print_fmt

_CONV = re.compile(
    r"%(?P<flags>[-+ #0]*)(?P<width>\d+)?(?:\.(?P<prec>\d+))?(?P<len>hh|h|ll|l|L|z)?"
    r"(?P<conv>[diuxXscp])(?P<ext>[sSBfFK]?)|%%"
)
_REC = re.compile(r"^(?:\([^()]*\)\s*)*REC->(\w+)(?:\[(\d+)\]|\.(\w+))?$")
_STR = re.compile(r"^__get_str\((\w+)\)$")
_BITS = {"hh": 8, "h": 16, None: 32, "l": 64, "ll": 64, "L": 64, "z": 64}

LINE_RE = re.compile(
    r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<flags>\S+)\s+(?P<ts>\d+\.\d+): "
    r"(?P<name>[^:]+)(?:: ?(?P<rest>.*))?$"
)


def _unescape(fmt: str) -> str:
    return fmt.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t")


def _value(arg: str, fields: Dict[str, Any]) -> Optional[Any]:
    m = _REC.match(arg)
    if m and m.group(1) in fields:
        v = fields[m.group(1)]
        if m.group(2) is not None:
            return v[int(m.group(2))]
        if m.group(3) is not None:  # a member of a struct-typed field, decoded through a profile layout
            return v.get(m.group(3)) if isinstance(v, dict) else None
        return v
    m = _STR.match(arg)
    if m and m.group(1) in fields:
        return fields[m.group(1)]
    return None


def _render(m: re.Match[str], value: Any) -> Optional[str]:
    conv, length = m.group("conv"), m.group("len")
    if conv == "p" or m.group("ext"):
        return None
    prec = ("." + m.group("prec")) if m.group("prec") else ""
    spec = "%" + (m.group("flags") or "") + (m.group("width") or "") + prec
    if conv == "s":
        return (spec + "s") % value if isinstance(value, str) else None
    if not isinstance(value, int):
        return None
    bits = _BITS[length]
    if conv in "di":
        value &= (1 << bits) - 1
        if value >> (bits - 1):
            value -= 1 << bits
        return (spec + "d") % value
    if conv == "c":
        return chr(value & 0xFF)
    return (spec + ("d" if conv == "u" else conv)) % (value & ((1 << bits) - 1))


def render_pattern(print_fmt: str, fields: Dict[str, Any]) -> Optional[str]:
    """A regex for the kernel's rendering of these field values, or None when the print fmt is empty."""
    fmt, args = split_print_fmt(print_fmt)
    if not fmt:
        return None
    fmt = _unescape(fmt)
    out: List[str] = []
    pos, argi = 0, 0
    for m in _CONV.finditer(fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        pos = m.end()
        if m.group(0) == "%%":
            out.append("%")
            continue
        arg = args[argi] if argi < len(args) else ""
        argi += 1
        value = _value(arg, fields)
        text = None if value is None else _render(m, value)
        out.append(".*?" if text is None else re.escape(text))
    out.append(re.escape(fmt[pos:]))
    return "".join(out)
