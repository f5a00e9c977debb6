"""trace_printk: the kernel's table of format strings (`printk_formats`) and a binary argument buffer
(`ftrace:bprint`'s `buf`) applied to its format, as the kernel's `bstr_printf` prints it.

Pure: text and bytes in, text out. The buffer is what `vbin_printf` (lib/vsprintf.c) wrote: the arguments in the
format's order, each integer of the size its conversion names (`%hhd` 1 byte, `%hd` 2, `%d` 4, `%ld` a long,
`%lld` 8; `%c` 1), aligned to that size (8-byte values to 4: they are stored as two 32-bit halves), a `%s`
string inline with its NUL and no alignment, `*` widths and precisions as ints, the pointers the kernel
prints from their value (`%pS`, `%ps`, `%pB`, `%px`, `%pK`, `%pe`, a bare `%p`; `%pF`/`%pf` before 5.5) as a
long, every other `%p` extension rendered when the event was written and stored as a string. Alignment counts
from the buffer's start. A buffer that ends before the format does is `Unformattable` (never a guess).

Where trace-cmd (libtraceevent) reads the buffer otherwise (it takes `%c`, `%hd` and `%hhd` as 4-byte ints) the
kernel's layout is followed: it is what the kernel wrote. A bare `%p` is shown as trace-cmd shows it (`0x...`,
`(nil)`: the kernel's own `trace` file hashes it with a secret of the boot).
"""

from __future__ import annotations

import errno
import re
import struct
from functools import lru_cache
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from npu_trace.ftrace.symbols import Symbols, sym_name, sym_offset

MAX_PRINTK_BYTES = 16 << 20  # a printk_formats text larger than this is refused
_TABLE_LINE = re.compile(r'^\s*0x([0-9a-fA-F]{1,16})\s*:\s*"(.*)"\s*$')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}
_SPEC = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?(hh|h|ll|l|L|z|Z|t)?(.)?", re.S)
_VALUE_POINTERS = "SsBxKe"  # %p extensions whose value is stored (the pointer itself)


class Unformattable(ValueError):
    """The buffer does not hold what the format reads (cut short, or a format the kernel refuses)."""


def parse_formats(text: str) -> Dict[int, str]:
    """`printk_formats` (`0xffffffff82819b5c : "fmt"` lines) -> {address: format}, the kernel's escapes
    (`\\n`, `\\t`, `\\"`) undone. Lines of another form are skipped."""
    table: Dict[int, str] = {}
    for line in text.splitlines():
        m = _TABLE_LINE.match(line)
        if m is not None:
            table[int(m.group(1), 16)] = unescape(m.group(2))
    return table


def unescape(text: str) -> str:
    """The C escapes the kernel writes into printk_formats undone (`\\n` -> newline; `\\x` -> x)."""
    if "\\" not in text:
        return text
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text, flags=re.S)


class Spec(NamedTuple):
    """One conversion: flags, width and precision ("*": an int argument; None: not given), the length
    qualifier, the conversion character, and for `%p` its extension ("" for a bare `%p`)."""

    flags: str
    width: Union[int, str, None]
    precision: Union[int, str, None]
    qualifier: str
    conv: str
    ext: str


Piece = Union[str, Spec]


@lru_cache(maxsize=4096)
def parse(fmt: str) -> Tuple[Piece, ...]:
    """A format string -> its literal text and conversions, in order (cached: a trace uses a few formats)."""
    pieces: List[Piece] = []
    pos = 0
    while True:
        at = fmt.find("%", pos)
        if at < 0:
            break
        if at > pos:
            pieces.append(fmt[pos:at])
        m = _SPEC.match(fmt, at)
        assert m is not None  # every group is optional
        flags, width, precision, qualifier, conv = m.groups()
        pos = m.end()
        if conv == "%":
            pieces.append("%")
            continue
        if conv is None or conv not in "diuxXocspn":
            raise Unformattable(f"conversion {m.group(0)!r} the kernel does not print")
        ext = ""
        if conv == "p":
            ext_m = re.match(r"[A-Za-z0-9]*", fmt[pos:])
            ext = ext_m.group(0) if ext_m else ""
            pos += len(ext)
        pieces.append(Spec(flags, _number(width), _number(precision), qualifier or "", conv, ext))
    if pos < len(fmt):
        pieces.append(fmt[pos:])
    return tuple(pieces)


def _number(text: Optional[str]) -> Union[int, str, None]:
    if text is None or text == "*":
        return text
    return int(text) if text else 0


class ArgBuffer:
    """The argument buffer, read in order with vbin_printf's alignment."""

    def __init__(self, data: bytes, byteorder: str, long_size: int) -> None:
        self.data, self.pos, self.long_size = data, 0, long_size
        self.end = "<" if byteorder == "little" else ">"

    def integer(self, size: int, signed: bool) -> int:
        self.pos = -(-self.pos // min(size, 4)) * min(size, 4)
        if self.pos + size > len(self.data):
            raise Unformattable(f"the arguments end at byte {len(self.data)}, an argument at {self.pos} is wanted")
        code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
        value = struct.unpack_from(self.end + (code if signed else code.upper()), self.data, self.pos)[0]
        self.pos += size
        return int(value)

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise Unformattable(f"a string at byte {self.pos} is not terminated in the arguments")
        text = self.data[self.pos : end].decode("utf-8", "backslashreplace")
        self.pos = end + 1
        return text


_SIZES = {"hh": 1, "h": 2, "": 4, "ll": 8, "L": 8}


def bprint(fmt: str, data: bytes, byteorder: str = "little", long_size: int = 8,
           symbols: Optional[Symbols] = None) -> str:  # fmt: skip
    """The text trace_printk wrote: `fmt` applied to the argument buffer `data` (Unformattable if it does not
    hold the arguments the format reads)."""
    args = ArgBuffer(data, byteorder, long_size)
    out = []
    for piece in parse(fmt):
        out.append(piece if isinstance(piece, str) else _convert(piece, args, symbols))
    return "".join(out)


def _convert(spec: Spec, args: ArgBuffer, symbols: Optional[Symbols]) -> str:
    flags = spec.flags
    width, precision = _given(spec.width, args), _given(spec.precision, args)
    if width is not None and width < 0:
        flags, width = flags + "-", -width
    if precision is not None and precision < 0:
        precision = None
    conv = spec.conv
    if conv == "n":
        return ""
    if conv == "s":
        text = args.string()
        return _pad(text if precision is None else text[:precision], flags, width)
    if conv == "c":
        return _pad(chr(args.integer(1, False)), flags, width)
    if conv == "p":
        return _pointer(spec, flags, width, args, symbols)
    size = args.long_size if spec.qualifier in ("l", "z", "Z", "t") else _SIZES[spec.qualifier]
    value = args.integer(size, conv in "di")
    return integer_text(value, conv, flags, width, precision)


def _given(value: Union[int, str, None], args: ArgBuffer) -> Optional[int]:
    """A width or precision: as written, or an int argument for "*"."""
    return args.integer(4, True) if value == "*" else (value if isinstance(value, int) else None)


def _pointer(spec: Spec, flags: str, width: Optional[int], args: ArgBuffer, symbols: Optional[Symbols]) -> str:
    ext = spec.ext
    kind = ext[:1]
    if kind and kind not in _VALUE_POINTERS and not (kind in "Ff" and ext[1:2] != "w"):
        return args.string()  # rendered when the event was written
    value = args.integer(args.long_size, False)
    if kind in ("S", "B", "F"):
        text = sym_offset(symbols, value)
    elif kind in ("s", "f"):
        text = sym_name(symbols, value)
    elif kind == "x":
        text = f"{value:0{2 * args.long_size}x}"
    elif kind == "e":
        text = _errno_text(value, args.long_size)
    else:  # a bare %p, %pK
        text = f"0x{value:x}" if value else "(nil)"
    return _pad(text, flags, width)


def _errno_text(value: int, long_size: int) -> str:
    signed = value - (1 << (8 * long_size)) if value >> (8 * long_size - 1) else value
    if -4095 <= signed < 0:
        name = errno.errorcode.get(-signed)
        return f"-{name}" if name else str(signed)
    return f"0x{value:x}" if value else "(nil)"


def _pad(text: str, flags: str, width: Optional[int]) -> str:
    if not width or len(text) >= width:
        return text
    return text.ljust(width) if "-" in flags else text.rjust(width)


def integer_text(value: int, conv: str, flags: str, width: Optional[int], precision: Optional[int]) -> str:
    """An integer as the kernel's `number()` prints it: sign (`+`, ` `), `0x`/`0X` with `#` (also for 0),
    a leading `0` for a non-zero octal with `#`, at least one digit, the precision's zeros, then the width
    (zeros with `0`, spaces otherwise; on the right with `-`)."""
    digits = format(abs(value), {"x": "x", "X": "X", "o": "o"}.get(conv, "d"))
    sign = "-" if value < 0 else ("+" if "+" in flags else (" " if " " in flags else "")) if conv in "di" else ""
    prefix = ""
    if "#" in flags and conv in "xX":
        prefix = "0" + conv
    elif "#" in flags and conv == "o" and value:
        prefix = "0"
    body = digits.rjust(precision or 0, "0")
    pad = (width or 0) - len(sign) - len(prefix) - len(body)
    if pad <= 0:
        return sign + prefix + body
    if "-" in flags:
        return sign + prefix + body + " " * pad
    if "0" in flags:
        return sign + prefix + "0" * pad + body
    return " " * pad + sign + prefix + body
