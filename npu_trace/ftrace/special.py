"""The ftrace system's own events as text: `print` (trace_marker), `bputs` and `bprint` (trace_printk), the
stack events, `function`, `funcgraph_entry`/`funcgraph_exit`, as `trace-cmd report` and the kernel's `trace`
file show them (the body after the event's name).

Pure: a format's field values in, text out. `KernelText` holds the kernel's tables a trace is shown with (its
symbols, its trace_printk formats, its byte order); `KernelText.formatter(fmt)` builds one event format's
`Formatter` once. A formatter takes one row's field values (the format's own fields in order, as
`npu_trace.ftrace.decode.RecordDecoder` gives them: `one`), or a batch of rows as one column per field (`rows`:
a columnar sink's call). None for a row it cannot format (a trace_printk format the table lacks, a buffer cut
short, a value of another type than its field): the caller prints the raw fields and counts it.

What is shown (where trace-cmd and the kernel differ, which one):
- `print`: `<function>: <message>` (`tracing_mark_write: hello`); `bputs`, `bprint` alike, the message from
  the format table (`npu_trace.ftrace.printk`). One trailing newline of the message is dropped, as both do.
- `kernel_stack`: `<stack trace> => frame => frame ...` on one line (the kernel puts each frame on a line of its
  own), each frame `name+0xoff/0xsize [module]` (the kernel's `sym-offset` form), `0x...` when unknown; the words
  up to the record's end or an all-ones word, as both read them. `user_stack`: `<user stack trace> => <addr>`
  up to the first zero (user addresses are not kernel symbols).
- `function`: `ip <-- parent_ip` by name, as trace-cmd shows it.
- `funcgraph_entry`: trace-cmd's nested form (`|  ` and two spaces per depth, then `func() {`);
  `funcgraph_exit`: its duration column (the overhead mark, `us`), the indent, `}`, and `(ret=...)` where the
  kernel records the return value. trace-cmd folds an entry and its exit that follow each other on one CPU into
  one `func();` line by looking at the next record: a formatter sees one record, so both lines are shown.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from npu_trace.ftrace.format import EventFormat
from npu_trace.ftrace.printk import Unformattable, bprint
from npu_trace.ftrace.symbols import Symbols, sym_name, sym_offset

Body = Callable[[Mapping[str, Any]], str]
MAX_FRAMES_KEPT = 1 << 16  # frame texts kept by address (a few MiB)
_FAILURES = (Unformattable, TypeError, ValueError, KeyError, OverflowError, struct.error)


@dataclass
class KernelText:
    """The kernel's tables a trace's own events are shown with: its symbols (None: addresses shown as such),
    its trace_printk formats (address -> format), the byte order of its records."""

    symbols: Optional[Symbols] = None
    printk: Mapping[int, str] = field(default_factory=dict)
    byteorder: str = "little"
    _built: Dict[int, Any] = field(default_factory=dict, repr=False)

    def formatter(self, fmt: EventFormat) -> Optional[Formatter]:
        """The formatter of one of the ftrace system's own events (built once per format), None for another
        event (shown with its fields)."""
        hit = self._built.get(id(fmt))
        if hit is None or hit[0] is not fmt:
            body = _BODIES.get(fmt.name) if fmt.system == "ftrace" else None
            hit = self._built[id(fmt)] = (fmt, Formatter(fmt, body(fmt, self)) if body is not None else None)
        return hit[1]


class Formatter:
    """One format's rows as text (None for a row it cannot format)."""

    def __init__(self, fmt: EventFormat, body: Body) -> None:
        self.fmt = fmt
        self.names = fmt.field_names
        self.body = body

    def one(self, values: Sequence[Any]) -> Optional[str]:
        """One row: the format's own field values, in order."""
        if len(values) != len(self.names):
            return None
        try:
            return self.body(dict(zip(self.names, values)))
        except _FAILURES:
            return None

    def rows(self, columns: Sequence[Sequence[Any]]) -> List[Optional[str]]:
        """A batch of rows, one column per field of the format (in its order)."""
        return [self.one(values) for values in zip(*columns)]


def message(text: str) -> str:
    """A message without the one trailing newline the kernel keeps (trace_marker adds it, trace_printk's
    formats end with it)."""
    return text[:-1] if text.endswith("\n") else text


def _long_size(fmt: EventFormat) -> int:
    for name in ("ip", "func"):
        try:
            return fmt.field(name).size
        except KeyError:
            continue
    return 8


# ---- the events --------------------------------------------------------------------------------------------
def _print(fmt: EventFormat, kt: KernelText) -> Body:
    return lambda v: f"{sym_name(kt.symbols, v['ip'])}: {message(_text(v['buf']))}"


def _bputs(fmt: EventFormat, kt: KernelText) -> Body:
    return lambda v: f"{sym_name(kt.symbols, v['ip'])}: {message(kt.printk[v['str']])}"


def _bprint(fmt: EventFormat, kt: KernelText) -> Body:
    long_size, end = _long_size(fmt), "<" if kt.byteorder == "little" else ">"

    def body(v: Mapping[str, Any]) -> str:
        words = v["buf"]
        data = struct.pack(f"{end}{len(words)}I", *words)
        text = bprint(kt.printk[v["fmt"]], data, kt.byteorder, long_size, kt.symbols)
        return f"{sym_name(kt.symbols, v['ip'])}: {message(text)}"

    return body


def _kernel_stack(fmt: EventFormat, kt: KernelText) -> Body:
    ones = (1 << (8 * (fmt.field("caller").elem_size or 8))) - 1
    shown: Dict[int, str] = {}  # a frame's text by address: stacks repeat their frames

    def frame(addr: int) -> str:
        text = shown.get(addr)
        if text is None:
            if len(shown) >= MAX_FRAMES_KEPT:
                shown.clear()
            text = shown[addr] = " => " + sym_offset(kt.symbols, addr)
        return text

    def body(v: Mapping[str, Any]) -> str:
        words = v["caller"]
        end = words.index(ones) if ones in words else len(words)
        return "<stack trace>" + "".join(map(frame, words[:end]))

    return body


def _user_stack(fmt: EventFormat, kt: KernelText) -> Body:
    ones = (1 << (8 * (fmt.field("caller").elem_size or 8))) - 1

    def body(v: Mapping[str, Any]) -> str:
        frames = []
        for addr in v["caller"]:
            if not addr or addr == ones:
                break
            frames.append(f" => <{addr:016x}>")
        return "<user stack trace>" + "".join(frames)

    return body


def _function(fmt: EventFormat, kt: KernelText) -> Body:
    return lambda v: f"{sym_name(kt.symbols, v['ip'])} <-- {sym_name(kt.symbols, v['parent_ip'])}"


def _funcgraph_entry(fmt: EventFormat, kt: KernelText) -> Body:
    return lambda v: "  " + "           |  " + " " * (2 * v["depth"]) + f"{sym_name(kt.symbols, v['func'])}() {{"


def _funcgraph_exit(fmt: EventFormat, kt: KernelText) -> Body:
    long_bits = 8 * _long_size(fmt)

    def body(v: Mapping[str, Any]) -> str:
        duration = v["rettime"] - v["calltime"]
        text = overhead(duration) + duration_column(duration) + " " * (2 * v["depth"]) + "}"
        if "retval" in v:
            text += return_value(v["retval"], long_bits)
        return text

    return body


_BODIES: Dict[str, Callable[[EventFormat, KernelText], Body]] = {
    "print": _print, "bputs": _bputs, "bprint": _bprint, "kernel_stack": _kernel_stack,
    "user_stack": _user_stack, "function": _function, "funcgraph_entry": _funcgraph_entry,
    "funcgraph_exit": _funcgraph_exit,
}  # fmt: skip


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a string was expected, not {type(value).__name__}")
    return value


def overhead(duration: int) -> str:
    """trace-cmd's mark of a long call: `$` past 1 s, `#` past 1 ms, `!` past 100 µs, `+` past 10 µs."""
    for limit, mark in ((1_000_000_000, "$ "), (1_000_000, "# "), (100_000, "! "), (10_000, "+ ")):
        if duration > limit:
            return mark
    return "  "


def duration_column(duration: int) -> str:
    """The duration in µs, at most 7 digits (the nanoseconds cut to fit), ` us `, padded, `|  `."""
    usecs, nsecs = divmod(duration, 1000)
    text = str(usecs)
    if len(text) < 7:
        text += "." + f"{nsecs:03d}"[: 7 - len(text)]
    return text + " us " + " " * max(0, 7 - len(text)) + "|  "


def return_value(value: int, long_bits: int) -> str:
    """` (ret=...)`: an error code (the last 4095 values of a long) in decimal, any other value in hex."""
    value &= (1 << long_bits) - 1
    if value >= (1 << long_bits) - 4095:
        return f" (ret={value - (1 << long_bits)})"
    return f" (ret=0x{value:x})"
