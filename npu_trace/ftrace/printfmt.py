"""An event's `print fmt`, read backwards: which text it prints, and how that text gives back the fields.

Pure. `compile_print_fmt(fmt)` turns the format string into a regular expression over the event's text (the
part after `name: `, as the kernel's `trace` file and trace-cmd's report print it) and says, for each of its
conversions, which field (or struct member, `"inst.devid"`) its argument names and how its text gives the value:

    REC->f, (cast)REC->f, __get_str(f)         the value itself (integers in the conversion's base)
    REC->f / N, REC->f * N                     scaled back (the text's precision: `tv_nsec / 1000` gives µs)
    __print_symbolic(REC->f, {v, "name"}...)   the name's value
    __print_flags(REC->f, "|", {v, "n"}...)    the names' values or'ed (a leftover `0x..` part too)
    REC->f ? "a" : "b", REC->f & M ? "a" : ""  "a": 1 (or M), "b": 0
    c ? __print_flags(...) : "R"               the flags, "R": 0 (sched_switch's prev_state)

Any other argument (a function of the record, arithmetic on several fields) is matched but gives nothing: the
fields it names are `shown` and not `recovered`. Constants in the print fmt (`1UL << 2`, masks) are evaluated as C
integer expressions by a small evaluator (numbers and operators only).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Pattern, Tuple

from npu_trace.ftrace.format import split_print_fmt

_CONV = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d+|\*)?(?:\.(?P<prec>\d+|\*))?(?P<len>hh|h|ll|l|L|z|j|t)?"
                   r"(?P<conv>[diouxXcspn%])(?P<ext>[a-zA-Z]*)")  # fmt: skip
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "0": "\0"}
_CAST = re.compile(r"^\(\s*(?:(?:const|volatile|unsigned|signed|struct|enum)\s+)*[A-Za-z_]\w*(?:\s+\w+)*\s*\**\s*\)")
_PATH = re.compile(r"REC->([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
_GET = re.compile(r"^__get_(?:rel_)?(?:str|dynamic_array|bitmask)\(\s*(\w+)\s*\)$")
_PAIR = re.compile(r"\{\s*([^{},]+?)\s*,\s*\"((?:[^\"\\]|\\.)*)\"\s*\}")
_INT_TEXT = {"d": r"-?\d+", "i": r"-?\d+", "u": r"-?\d+", "o": r"[0-7]+", "x": r"(?:0x)?[0-9a-fA-F]+",
             "X": r"(?:0[xX])?[0-9a-fA-F]+", "c": r"(?s:.)"}  # fmt: skip
_SYMBOL_P = r"[^\s:]*(?:\s*\[[^\]]*\])?"  # %ps/%pS: a symbol (func+0x1/0x2 [module]) or an address


@dataclass(frozen=True)
class Inverse:
    """How one conversion's text gives a field's value: `how` is "value", "scale" (times `factor`), "table"
    (names -> values, or'ed when `delim` splits several) or "" (nothing: `paths` are only shown)."""

    paths: Tuple[str, ...]
    how: str = ""
    factor: int = 1
    table: Tuple[Tuple[str, int], ...] = ()
    delim: str = ""

    @property
    def path(self) -> str:
        return self.paths[0] if self.paths else ""


@dataclass(frozen=True)
class Conversion:
    conv: str  # d i u o x X c s p
    ext: str  # a %p extension (s, S, B, ...)
    inverse: Inverse
    padded: bool = False  # a string given a width (%-16s): its padding is not its text


@dataclass(frozen=True)
class PrintReader:
    """The print fmt as a pattern: group i+1 holds conversion i's text."""

    pattern: Optional[Pattern[str]]
    conversions: Tuple[Conversion, ...]

    @property
    def shown(self) -> Tuple[str, ...]:
        return tuple(p for c in self.conversions for p in c.inverse.paths)

    def direct_conv(self, path: str) -> str:
        """The conversion a field is printed with directly ("" if none): "x" tells hex printed without 0x."""
        return next((c.conv for c in self.conversions if c.inverse.how == "value" and c.inverse.path == path), "")


# ---- the format string --------------------------------------------------------------------------------------
def unescape(text: str) -> str:
    """A C string literal's body, its escapes resolved."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def _literal(text: str) -> str:
    """A literal piece of the output: whitespace runs match any whitespace (trace-cmd pads, pastes re-space)."""
    parts = re.split(r"(\s+)", text)
    return "".join(r"\s*" if p.isspace() else re.escape(p) for p in parts if p)


@lru_cache(maxsize=1024)
def compile_print_fmt(print_fmt: str) -> PrintReader:
    """The reader of a format's print fmt (a pattern of None when the fmt string cannot be read)."""
    fmt, args = split_print_fmt(print_fmt)
    if not fmt and print_fmt.strip():
        return PrintReader(None, ())
    fmt = unescape(fmt)
    pieces: List[str] = []
    convs: List[Conversion] = []
    pos = 0
    for m in _CONV.finditer(fmt):
        pieces.append(_literal(fmt[pos : m.start()]))
        conv, pos = _conversion(m, args)
        pieces.append("%" if conv is None else f"({_conv_text(conv)})")
        if conv is not None:
            convs.append(conv)
    pieces.append(_literal(fmt[pos:]))
    return PrintReader(_compile("".join(pieces)), tuple(convs))


def _conversion(m: re.Match[str], args: List[str]) -> Tuple[Optional[Conversion], int]:
    """One `%...` of the fmt string and the argument(s) it takes; and where the literal text goes on (letters
    after a conversion but %p's extension are literal: "%dms")."""
    conv = m.group("conv")
    if conv == "%":
        return None, m.end()
    del args[: (m.group("width") == "*") + (m.group("prec") == "*")]
    arg = args.pop(0) if args else ""
    ext = m.group("ext")
    padded = bool(m.group("width")) and conv == "s"
    end = m.end() if conv == "p" else m.end() - len(ext)
    return Conversion(conv, ext if conv == "p" else "", inverse_of(arg), padded), end


def _compile(text: str) -> Optional[Pattern[str]]:
    try:
        return re.compile(r"\s*" + text + r"\s*")
    except re.error:
        return None


def _conv_text(conv: Conversion) -> str:
    inv = conv.inverse
    if inv.how == "table":
        return _table_text(inv)
    if conv.conv in _INT_TEXT:
        return r"\s*" + _INT_TEXT[conv.conv]
    if conv.conv == "p":
        return _SYMBOL_P if conv.ext[:1] in ("s", "S", "F", "f", "B") else r"\(null\)|(?:0x)?[0-9a-fA-F]+|.*?"
    return r"(?s:.*?)"


def _table_text(inv: Inverse) -> str:
    names = sorted((re.escape(n) for n, _ in inv.table), key=len, reverse=True)
    one = "|".join([*names, r"0x[0-9a-fA-F]+", r"-?\d+"])
    if not inv.delim:
        return f"(?:{one})"
    return f"(?:(?:{one})(?:{re.escape(inv.delim)}(?:{one}))*|)"


# ---- an argument, read backwards ----------------------------------------------------------------------------
def inverse_of(arg: str) -> Inverse:
    """How the text of an argument (a C expression over REC) gives back a field (see the module docstring)."""
    arg = _bare(arg)
    paths = tuple(dict.fromkeys(_PATH.findall(arg)))
    got = _GET.match(arg)
    if got:
        return Inverse((got.group(1),), "value")
    for reader in (_direct, _scaled, _symbolic, _ternary):
        inv = reader(arg)
        if inv is not None:
            return inv
    return Inverse(paths)


def _bare(arg: str) -> str:
    """The expression without its outer parentheses and casts."""
    text = arg.strip()
    while True:
        m = _CAST.match(text)
        if m and _balanced(text[m.end() :]):
            text = text[m.end() :].strip()
        elif text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]) and not _CAST.match(text):
            text = text[1:-1].strip()
        else:
            return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in _without_strings(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _without_strings(text: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _direct(arg: str) -> Optional[Inverse]:
    m = re.fullmatch(r"REC->([\w.]+(?:\[\d+\])?)", arg)
    return Inverse((m.group(1),), "value") if m else None


def _scaled(arg: str) -> Optional[Inverse]:
    m = re.fullmatch(r"(.+?)\s*([/*])\s*(.+)", arg)
    if not m or _direct(_bare(m.group(1))) is None:
        return None
    factor = c_int(m.group(3))
    if not factor or factor < 0:
        return None
    path = _PATH.findall(m.group(1))[0]
    return Inverse((path,), "scale", factor if m.group(2) == "/" else -factor)


def _symbolic(arg: str) -> Optional[Inverse]:
    m = re.fullmatch(r"__print_(symbolic|flags)(?:_u64)?\((.*)\)", arg, re.S)
    if not m:
        return None
    head, *_ = _split_args(m.group(2))
    path = _field_of(head)
    if path is None:
        return None
    delim = ""
    if m.group(1) == "flags":
        parts = _split_args(m.group(2))
        delim = unescape(parts[1].strip().strip('"')) if len(parts) > 1 else "|"
    return Inverse((path,), "table", table=_pairs(m.group(2)), delim=delim)


def _ternary(arg: str) -> Optional[Inverse]:
    parts = _split_ternary(arg)
    if parts is None:
        return None
    cond, yes, no = (_bare(p) for p in parts)
    path = _field_of(cond)
    if path is None:
        return None
    when = _truth_value(cond)
    inner = _symbolic(yes)
    no_name = _string(no)
    if inner is not None and no_name is not None:
        return Inverse((path,), "table", table=((no_name, 0), *inner.table), delim=inner.delim)
    yes_name = _string(yes)
    if yes_name is None or no_name is None or when is None:
        return None
    return Inverse((path,), "table", table=((yes_name, when), (no_name, 0)))


def _truth_value(cond: str) -> Optional[int]:
    """A value of the field that makes `cond` hold: 1 for `REC->f`, M for `REC->f & M`."""
    if _direct(cond) is not None:
        return 1
    m = re.fullmatch(r"(.+?)\s*&\s*(.+)", cond)
    if m and _direct(_bare(m.group(1))) is not None:
        return c_int(m.group(2))
    return None


def _field_of(expr: str) -> Optional[str]:
    """The one field an expression reads (masked or cast), or None."""
    paths = set(_PATH.findall(expr))
    if len(paths) != 1 or re.search(r"\w\s*\(", _bare(expr).replace("__print", "")):
        return None
    return paths.pop()


def _string(expr: str) -> Optional[str]:
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', expr.strip())
    return unescape(m.group(1)) if m else None


def _pairs(text: str) -> Tuple[Tuple[str, int], ...]:
    out = []
    for value, name in _PAIR.findall(text):
        number = c_int(value)
        if number is not None:
            out.append((unescape(name), number))
    return tuple(out)


def _split_args(text: str) -> List[str]:
    out: List[str] = []
    cur: List[str] = []
    depth = 0
    for ch, plain in zip(text, _without_strings_mask(text)):
        if plain:
            depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                out.append("".join(cur))
                cur = []
                continue
        cur.append(ch)
    return [*out, "".join(cur)]


def _without_strings_mask(text: str) -> List[bool]:
    """Per character: outside a string literal."""
    mask, quoted, escaped = [], False, False
    for ch in text:
        mask.append(not quoted and ch != '"')
        if quoted and escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
    return mask


def _split_ternary(text: str) -> Optional[Tuple[str, str, str]]:
    """`c ? a : b` split at its top-level `?` and the `:` that matches it."""
    depth, question, nested = 0, -1, 0
    for i, (ch, plain) in enumerate(zip(text, _without_strings_mask(text))):
        if not plain:
            continue
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(ch, 0)
        if depth or ch not in "?:":
            continue
        if ch == "?":
            question, nested = (i, 0) if question < 0 else (question, nested + 1)
        elif question >= 0 and nested:
            nested -= 1
        elif question >= 0:
            return text[:question], text[question + 1 : i], text[i + 1 :]
    return None


# ---- C integer constants --------------------------------------------------------------------------------------
_OPS: Dict[type, Callable[[Any, Any], Any]] = {
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip


def c_int(text: str) -> Optional[int]:
    """A C integer constant expression's value (numbers, casts and operators), or None."""
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", text)
    expr = re.sub(r"\(\s*(?:(?:unsigned|signed|const)\s+)*(?:long|int|char|short|u\d+|s\d+|__u\d+|size_t)"
                  r"(?:\s+(?:long|int))*\s*\)", "", expr)  # fmt: skip
    expr = re.sub(r"(?<![/])/(?![/])", "//", expr)
    try:
        return _eval(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
        return None


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.LShift) and not 0 <= right < 128:
            raise ValueError("shift")
        return int(_OPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert, ast.UAdd)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else (~value if isinstance(node.op, ast.Invert) else value)
    raise ValueError("not a constant")
