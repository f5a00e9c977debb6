"""The ftrace system's own events as text (npu_trace.ftrace.special, printk, symbols), from bytes: records laid
out as this kernel's format files declare them (tests/data/ftrace-events), trace_printk argument buffers laid
out as the kernel's vbin_printf writes them (each case's bytes written out below), a kallsyms table."""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import json
import os
import struct
from typing import Any, Optional, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.events import TraceEvent
from npu_trace.ftrace.decode import make_decoder
from npu_trace.ftrace.format import TAIL, EventFormat, parse_format
from npu_trace.ftrace.printk import Unformattable, bprint, integer_text, parse_formats, unescape
from npu_trace.ftrace.special import KernelText, duration_column, overhead, return_value
from npu_trace.ftrace.symbols import Symbols, sym_name, sym_offset
from npu_trace.sinks.text import StreamPrinter

DATA = os.path.join(os.path.dirname(__file__), "data", "ftrace-events", "6.18.44-x86_64")
KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000100 t alpha
ffffffff81000180 t __pfx_beta
ffffffff81000190 t beta
ffffffff81000200 T tracing_mark_write
ffffffff81000300 t gamma
0000000000000000 A fixed_percpu_data
ffffffffc0001000 t drv_func\t[drv_davinci]
ffffffffc0001100 t drv_other\t[drv_davinci]
not a line
"""
SYMS = Symbols.parse(KALLSYMS)
MARK, ALPHA, DRV = 0xFFFFFFFF81000200, 0xFFFFFFFF81000100, 0xFFFFFFFFC0001000
PRINTK = parse_formats('0xffffffff82000000 : "value %d of %s\\n"\n0xffffffff82000040 : "puts \\"quoted\\"\\tx\\n"\n')


def fmt(name: str) -> EventFormat:
    with open(os.path.join(DATA, name, "format")) as f:
        return parse_format(f.read(), "ftrace")


def values(event: EventFormat, body: bytes, pid: int = 42) -> Sequence[Any]:
    """The field values of a record of `event` with this payload after its common fields."""
    record = struct.pack("<HBBi", event.id, 0, 0, pid) + body
    return make_decoder(event, "little").decode(record, 0, len(record))[1]


def text(name: str, body: bytes, kt: Optional[KernelText] = None) -> Optional[str]:
    event = fmt(name)
    formatter = (kt or KernelText(SYMS, PRINTK)).formatter(event)
    assert formatter is not None
    return formatter.one(values(event, body))


# ---- symbols ---------------------------------------------------------------------------------------------------
def test_an_address_is_shown_as_the_kernel_shows_it() -> None:
    assert sym_offset(SYMS, 0xFFFFFFFF81000005) == "_stext+0x5/0x100"  # of two aliases, the first listed
    assert sym_offset(SYMS, ALPHA + 0x10) == "alpha+0x10/0x80"
    assert sym_offset(SYMS, 0xFFFFFFFF81000190) == "beta+0x0/0x70"  # its __pfx_ padding is a symbol of its own
    assert sym_offset(SYMS, DRV + 0x20) == "drv_func+0x20/0x100 [drv_davinci]"
    assert sym_offset(SYMS, DRV + 0x110) == "drv_other+0x10 [drv_davinci]"  # the last symbol: its size unknown
    assert sym_offset(SYMS, 0x10) == "0x10"  # below every symbol (the absolute one is no code)
    assert sym_name(SYMS, ALPHA + 1) == "alpha" and sym_name(None, ALPHA) == f"0x{ALPHA:x}"


def test_a_table_cut_to_some_functions_resolves_only_inside_them() -> None:
    cut = Symbols.parse("ffffffff81000200 t tracing_mark_write\nffffffff81000300 t gamma\n", ["tracing_mark_write"])
    assert cut.name(MARK + 4) == "tracing_mark_write"
    assert cut.name(0xFFFFFFFF81000304) is None and cut.name(ALPHA) is None


# ---- the formats -----------------------------------------------------------------------------------------------
def test_the_stack_events_hold_as_many_frames_as_the_record() -> None:
    """caller[8] in the format; the kernel writes `size` words: fewer or more than 8 decode whole."""
    stack = fmt("kernel_stack")
    assert stack.fields[-1].kind == TAIL and stack.fields[-1].elem_size == 8
    three = struct.pack("<i4x3Q", 3, ALPHA + 1, MARK + 2, DRV)
    assert values(stack, three) == (3, [ALPHA + 1, MARK + 2, DRV])
    twelve = struct.pack("<i4x12Q", 12, *([ALPHA] * 12))
    assert values(stack, twelve)[1] == [ALPHA] * 12


def test_old_kernels_flexible_arrays_without_brackets() -> None:
    """4.x: `field:char buf; offset:16; size:0;` is a flexible array (tests/data/tracedat-public, lisa)."""
    old = fmt("print").print_fmt
    text_ = (f"name: print\nID: 5\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
             "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
             "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
             "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
             "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
             "\tfield:char buf;\toffset:16;\tsize:0;\tsigned:0;\n\n"
             f"print fmt: {old}\n")  # fmt: skip
    event = parse_format(text_, "ftrace")
    assert event.fields[-1].kind == TAIL and values(event, struct.pack("<Q", MARK) + b"hi\n\0") == (MARK, "hi\n")


# ---- the events ------------------------------------------------------------------------------------------------
def test_print_bputs_and_bprint() -> None:
    assert text("print", struct.pack("<Q", MARK + 8) + b"hello marker\n\0") == "tracing_mark_write: hello marker"
    assert text("bputs", struct.pack("<QQ", ALPHA, 0xFFFFFFFF82000040)) == 'alpha: puts "quoted"\tx'
    args = struct.pack("<i", 7) + b"seven\0"  # %d at 0, %s inline after it
    assert text("bprint", struct.pack("<QQ", DRV + 4, 0xFFFFFFFF82000000) + args.ljust(12, b"\0")) == (
        "drv_func: value 7 of seven")
    unknown = struct.pack("<QQ", DRV, 0xFFFFFFFF82000010) + args.ljust(12, b"\0")
    assert text("bprint", unknown) is None  # a format the table lacks: not formattable, never guessed


def test_the_stacks() -> None:
    frames = struct.pack("<i4x4Q", 4, ALPHA + 0x10, DRV + 0x20, 0x1234, (1 << 64) - 1)
    assert text("kernel_stack", frames) == ("<stack trace> => alpha+0x10/0x80 => drv_func+0x20/0x100 [drv_davinci]"
                                            " => 0x1234")  # fmt: skip
    user = struct.pack("<I4x8Q", 77, 0x7F0000001234, 0x401000, 0, 0, 0, 0, 0, 0)
    assert text("user_stack", user) == "<user stack trace> => <00007f0000001234> => <0000000000401000>"


def test_function_and_funcgraph() -> None:
    assert text("function", struct.pack("<QQ", ALPHA + 4, 0x99)) == "alpha <-- 0x99"
    assert text("funcgraph_entry", struct.pack("<QI4x", ALPHA, 2)) == "             |      alpha() {"
    exit_ = struct.pack("<QIIQQ", ALPHA, 2, 0, 1_000_000, 1_015_250)  # 15.25 µs
    assert text("funcgraph_exit", exit_) == "+ 15.250 us  |      }"
    assert overhead(2_000_000_000) == "$ " and overhead(10_000) == "  "
    assert duration_column(123_456_789_000) == "123456789 us |  "  # no room for the nanoseconds
    assert duration_column(123_456_789) == "123456.7 us |  "
    assert return_value((1 << 64) - 12, 64) == " (ret=-12)" and return_value(5, 64) == " (ret=0x5)"


def test_a_value_of_another_type_is_not_formatted() -> None:
    formatter = KernelText(SYMS, PRINTK).formatter(fmt("print"))
    assert formatter is not None
    assert formatter.one((MARK, ["not", "text"])) is None and formatter.one((MARK,)) is None
    assert formatter.rows([[MARK, MARK], ["a\n", "b"]]) == ["tracing_mark_write: a", "tracing_mark_write: b"]
    assert KernelText().formatter(fmt("print")) is not None  # no tables: addresses as such


# ---- the text sink ---------------------------------------------------------------------------------------------
def event(name: str, body: bytes) -> TraceEvent:
    f = fmt(name)
    return TraceEvent(1_000_001_000, 3, 42, f, tuple(values(f, body)))


def test_the_stream_printer_shows_them_and_counts_what_it_cannot() -> None:
    out = io.StringIO()
    printer = StreamPrinter(out, "text", lambda pid: "bash", KernelText(SYMS, PRINTK))
    printer.write_objects([event("print", struct.pack("<Q", MARK) + b"red \x1b[31m\n\0")])
    printer.write_objects([event("bprint", struct.pack("<QQ", ALPHA, 0x1) + b"\0\0\0\0")])
    lines = out.getvalue().splitlines()
    assert lines[0] == "     1.000001000 [003] bash-42 ftrace:print: tracing_mark_write: red \\x1b[31m"
    assert lines[1].startswith("     1.000001000 [003] bash-42 ftrace:bprint: ip=") and printer.unformatted == 1
    out = io.StringIO()
    printer = StreamPrinter(out, "ndjson", lambda pid: "bash", KernelText(SYMS, PRINTK))
    printer.write_objects([event("kernel_stack", struct.pack("<i4xQ", 1, ALPHA))])
    row = json.loads(out.getvalue())
    assert row["text"] == "<stack trace> => alpha+0x0/0x80" and row["fields"] == {"size": 1, "caller": [ALPHA]}


# ---- trace_printk's arguments ----------------------------------------------------------------------------------
def test_printk_formats_and_their_escapes() -> None:
    assert PRINTK[0xFFFFFFFF82000000] == "value %d of %s\n"
    assert unescape(r"a\\b\"c\q") == 'a\\b"cq'
    assert parse_formats("junk\n0xzz : \"x\"\n") == {}


def test_the_arguments_as_vbin_printf_lays_them_out() -> None:
    fmt_ = "%d %u %x %ld %lld %llx %hhd %hd %c|%s|%-6s|%.2s|%5d|%-5d|%05d|%+d|% d|%#x|%#o|%X|%%"
    buf = b"".join([
        struct.pack("<i", -5), struct.pack("<I", 7), struct.pack("<I", 255),  # 0, 4, 8
        struct.pack("<q", -9), struct.pack("<q", 1 << 40), struct.pack("<Q", 0xABC),  # 12, 20, 28: 4-aligned
        struct.pack("<b", -3), b"\0", struct.pack("<h", -300),  # 36: a char; 38: a short, 2-aligned
        b"A", b"hi\0", b"ab\0", b"xyz\0", b"\0",  # 40: %c; strings inline, unaligned: 41, 44, 47; pad to 52
        struct.pack("<5i", 42, 42, 42, 7, 7), struct.pack("<3I", 0, 8, 0xABC),  # 52 ..
    ])  # fmt: skip
    want = "-5 7 ff -9 1099511627776 abc -3 -300 A|hi|ab    |xy|   42|42   |00042|+7| 7|0x0|010|ABC|%"
    assert bprint(fmt_, buf) == want


def test_widths_from_arguments_pointers_and_prerendered_strings() -> None:
    buf = struct.pack("<iii", -4, 7, 2) + b"abc\0" + struct.pack("<QQQq", ALPHA + 3, MARK, 0, -12)
    buf += b"10.0.0.1\0" + b"\0\0\0" + struct.pack("<i", 9)
    got = bprint("[%*d][%.*s][%pS][%ps][%p][%pe][%pI4][%d]", buf, symbols=SYMS)
    assert got == "[7   ][ab][alpha+0x3/0x80][tracing_mark_write][(nil)][-ENOMEM][10.0.0.1][9]"
    assert bprint("%px %p", struct.pack("<QQ", 0xFFFF888000001000, 0x1000)) == "ffff888000001000 0x1000"


def test_other_byte_orders_and_long_sizes() -> None:
    assert bprint("%d %lld %ld", struct.pack(">iqi", -2, 1 << 33, 5), "big", 4) == "-2 8589934592 5"


def test_a_buffer_that_does_not_hold_the_arguments_is_refused() -> None:
    with pytest.raises(Unformattable):
        bprint("%d %d", struct.pack("<i", 1))
    with pytest.raises(Unformattable):
        bprint("%s", b"no end")
    with pytest.raises(Unformattable):
        bprint("%q", b"\0\0\0\0")


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def c_printf(spec: str, value: int) -> str:
    out = ctypes.create_string_buffer(256)
    _LIBC.snprintf(out, 256, spec.encode(), ctypes.c_longlong(value))
    return out.value.decode()


@settings(max_examples=400, deadline=None)
@given(st.sampled_from("diuxXo"), st.sets(st.sampled_from("-+ #0")), st.one_of(st.none(), st.integers(0, 24)),
       st.one_of(st.none(), st.integers(0, 24)), st.integers(-(1 << 63), (1 << 63) - 1))  # fmt: skip
def test_integers_print_as_c_does(conv: str, flags: Any, width: Optional[int], precision: Optional[int],
                                  value: int) -> None:  # fmt: skip
    """The kernel's number() is C's printf but where it says otherwise: `%#x` of 0 is `0x0`, a precision of 0
    still prints a digit, `0` pads even with a precision, `%#o` puts its 0 before the precision's zeros."""
    if conv in "uxXo":
        value &= (1 << 64) - 1
    kernel_only = (("#" in flags and conv in "xX" and value == 0) or (precision == 0 and value == 0)
                   or ("0" in flags and precision is not None) or ("#" in flags and conv == "o" and precision))
    if kernel_only:
        return
    spec = "%" + "".join(sorted(flags)) + (str(width) if width is not None else "")
    spec += ("." + str(precision) if precision is not None else "") + "ll" + conv
    assert integer_text(value, conv, "".join(flags), width, precision) == c_printf(
        spec, value)


def test_integers_where_the_kernel_differs_from_c() -> None:
    assert integer_text(0, "x", "#", None, None) == "0x0"
    assert integer_text(0, "d", "", None, 0) == "0"
    assert integer_text(5, "d", "0", 6, 3) == "000005"
