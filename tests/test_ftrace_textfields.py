"""The pieces of the ftrace text import, each on its own: a line told apart (textline), the latency columns, a print
fmt read backwards (printfmt), an event's fields from each form of its text (textfields), the real driver's
tracepoints from the text the kernel prints for them; the command's one-line refusals; and no traceback on any
text (fuzzed)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_trace.cli import main
from npu_trace.device.profiles import ASCEND_LAYOUTS
from npu_trace.device.trace_formats import DRIVER
from npu_trace.events import TraceEvent
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import EventFormat, parse_format, parse_header_page
from npu_trace.ftrace.known_formats import KERNEL, OLDER
from npu_trace.ftrace.printfmt import c_int, compile_print_fmt, inverse_of
from npu_trace.ftrace.textfields import FieldReader
from npu_trace.ftrace.textline import flag_bits, read_line
from npu_trace.recording.reader import RecordingReader
from npu_trace.sim.synth import format_texts
from npu_trace.sources.ftrace_text import Catalog, read_ftrace_text
from npu_trace.sources.importer import TEXT_HEADER_PAGE
from reference.pages import CpuDecoders

DRIVER_DATA = os.path.join(os.path.dirname(__file__), "data", "ascend-driver")
HEADER = parse_header_page(TEXT_HEADER_PAGE)
S = 1_000_000_000


def kernel_format(name: str, table: Any = KERNEL) -> EventFormat:
    return next(parse_format(t, s) for s, t in table if parse_format(t, s).name == name)


def catalog() -> Catalog:
    sim = [("ascend", t) for t in format_texts().values()]
    return Catalog([*KERNEL, *sim, *DRIVER, *OLDER], ASCEND_LAYOUTS)


# ---- one line ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "want"), [
    ("          <idle>-0       [001] d.h2.  1234.567890: irq_handler_entry: irq=5 name=eth0",
     dict(kind="event", comm="<idle>", pid=0, cpu=1, flags="d.h2.", ts=1234_567890000, name="irq_handler_entry",
          text="irq=5 name=eth0")),
    ("  Web Content-1234  (  1200) [003] ....  5.000001: sched_waking: comm=x pid=1 prio=120 target_cpu=003",
     dict(comm="Web Content", pid=1234, tgid=1200, cpu=3, flags="....", name="sched_waking")),
    ("  <...>-882   (-----) [003] .... 10852.771186: tracing_mark_write: B|598|x", dict(tgid=None, pid=882)),
    ("buf-1: kworker/0:1-12 [000] 3.5: foo: bar", dict(comm="kworker/0:1", pid=12, ts=3_500000000)),
    ("npu-sim-27452   0dNHff 19251.795217: ascend_irq_handler_exit: (5603f8cf33b0) ret=1",
     dict(comm="npu-sim", cpu=0, flags="dNHff", name="ascend_irq_handler_exit")),
    ("  python-7723 [000] .....  12345678: sys_enter: NR 3", dict(ts=12345678, counts=True, name="sys_enter")),
    ("  a-1 [000] 1.123456789: x: y", dict(ts=1_123456789, digits=9)),
    ("  a-1 [000] ..... 1.5: sys_getpid()", dict(name="sys_enter_getpid", text="sys_getpid()")),
    ("  a-1 [000] ..... 1.5: sys_read -> 0x5", dict(name="sys_exit_read")),
    ("  cat-1 [002] d... 1.5: bcm2835_mmc_irq+0x14/0x754 <-__handle_irq_event_percpu+0xbc/0x224",
     dict(name="function")),
    ("  cat-1 [002] d... 1.5: rpi_get_interrupt_info+0x28/0x6c: [cat] 17: mailbox", dict(name="bprint")),
    ("  cat-1 [002] d... 1.5: <stack trace>", dict(name="kernel_stack", text="")),
    ("  cat-1 [002] d... 1.5: <user stack trace>", dict(name="user_stack")),
    (" => rpi_get_interrupt_info+0x18/0x6c", dict(kind="frame", text="rpi_get_interrupt_info+0x18/0x6c")),
    ("CPU:2 [LOST 123 EVENTS]", dict(kind="lost", cpu=2, lost=123)),
    ("CPU:0 [LOST EVENTS]", dict(kind="lost", cpu=0, lost=None)),
    ("# tracer: nop", dict(kind="header")), ("cpus=6", dict(kind="header")), ("version = 6", dict(kind="header")),
    ("CPU 3 is empty", dict(kind="header")), ("##### CPU 2 buffer started ####", dict(kind="header")),
    ("", dict(kind="header")), ("some = 000, other = 0x4", dict(kind="other")), ("[...]", dict(kind="other")),
])  # fmt: skip
def test_a_line_is_told_apart(text: str, want: Dict[str, Any]) -> None:
    line = read_line(text)
    expected = {"kind": "event", **want}
    assert {k: getattr(line, k) for k in expected} == expected


@pytest.mark.parametrize(("flags", "want"), [
    (".....", (0, 0)), ("d.h2.", (0x09, 2)), ("dNs..", (0x35, 0)), ("D.Z1.", (0xC9, 1)), ("..s12", (0x10, 0x21)),
    ("d.h.", (0x09, 0)), ("dNHff", (0x3D, 0xFF)), ("X...", (0x02, 0)), ("qq", (0, 0)), ("d.?1.", (0, 0)),
])  # fmt: skip
def test_the_latency_columns_give_the_common_flags_and_preempt_count(flags: str, want: Tuple[int, int]) -> None:
    assert flag_bits(flags) == want


def test_the_common_flags_and_preempt_count_are_written_into_the_record() -> None:
    lines = ["  a-7 [001] dNh2. 1.000001: softirq_raise: vec=9 [action=RCU]"]
    got = read_ftrace_text(lines, catalog(), HEADER)
    (cpu, page), = got.pages  # fmt: skip
    payload = page[HEADER.data_offset + 4 :]
    assert (cpu, payload[2], payload[3], int.from_bytes(payload[4:8], "little")) == (1, 0x2D, 2, 7)


# ---- the print fmt, read backwards -----------------------------------------------------------------------------
def test_c_integer_constants_are_evaluated_and_anything_else_is_not() -> None:
    assert c_int("(((0x00000000 | 0x00000001 | 0x00000002) + 1) << 1)") == 8
    assert (c_int("1UL << 3"), c_int("(unsigned long)1024-1"), c_int("-1")) == (8, 1023, -1)
    assert c_int("REC->x") is None and c_int("1 << 4096") is None and c_int("sizeof(int)") is None


@pytest.mark.parametrize(("arg", "how", "path", "extra"), [
    ("REC->pid", "value", "pid", None), ("(unsigned long long)REC->sector", "value", "sector", None),
    ("__get_str(name)", "value", "name", None), ("REC->timestamp.tv_nsec / 1000", "scale", "timestamp.tv_nsec", 1000),
    ("REC->ret ? \"handled\" : \"unhandled\"", "table", "ret", (("handled", 1), ("unhandled", 0))),
    ("REC->s & 4 ? \"+\" : \"\"", "table", "s", (("+", 4), ("", 0))),
    ("__print_symbolic(REC->vec, { 0, \"HI\" }, { 1, \"TIMER\" })", "table", "vec", (("HI", 0), ("TIMER", 1))),
    ("((unsigned int) ((REC->dev) >> 20))", "", "dev", None),
    ("trs_chan_type_to_name(&REC->q.types)", "", "q.types", None),
])  # fmt: skip
def test_an_argument_says_how_its_text_gives_its_field(arg: str, how: str, path: str, extra: Any) -> None:
    inv = inverse_of(arg)
    assert (inv.how, inv.path) == (how, path)
    if how == "scale":
        assert inv.factor == extra
    if how == "table":
        assert inv.table == extra


def test_sched_switch_reads_back_its_state_letters_and_preemption() -> None:
    reader = FieldReader(kernel_format("sched_switch"))
    text = "prev_comm=kworker/0:1 prev_pid=12 prev_prio=120 prev_state=S|D+ ==> next_comm=sh next_pid=0 next_prio=99"
    got = reader.read(text)
    assert got is not None and got.form == "print fmt" and got.absent == ()
    assert got.values == ("kworker/0:1", 12, 120, 0x103, "sh", 0, 99)
    assert reader.read(text.replace("S|D+", "R"))  # running: 0
    assert compile_print_fmt('"%s %d", REC->a').conversions[1].inverse.paths == ()  # an argument missing


# ---- each form of an event's text ------------------------------------------------------------------------------
SWITCH = ("prev_comm=sh prev_pid=5 prev_prio=120 prev_state=2 next_comm=swapper/1 next_pid=0 next_prio=120", "raw")
FORMS = [
    ("sched_switch", "prev_comm=sh prev_pid=5 prev_prio=120 prev_state=D ==> next_comm=swapper/1 next_pid=0 "
                     "next_prio=120", "print fmt", ("sh", 5, 120, 2, "swapper/1", 0, 120)),
    ("sched_switch", *SWITCH, ("sh", 5, 120, 2, "swapper/1", 0, 120)),
    ("sched_switch", "sh:5 [120] D ==> swapper/1:0 [120]", "trace-cmd", ("sh", 5, 120, 2, "swapper/1", 0, 120)),
    ("sched_switch", "memfd:sealed-91:5 [120] W ==> a:b:0 [120]", "trace-cmd",
     ("memfd:sealed-91", 5, 120, 128, "a:b", 0, 120)),
    ("sched_wakeup", "memfd:x-1:7 [120] CPU:002", "trace-cmd", ("memfd:x-1", 7, 120, 2)),
    ("sched_wakeup", "comm=a pid=7 prio=120 target_cpu=002", "print fmt", ("a", 7, 120, 2)),
    ("irq_handler_exit", "irq=17 ret=unhandled", "print fmt", (17, 0)),
    ("irq_handler_exit", "irq=17 ret=1", "print fmt", (17, 1)),  # the numbers a name stands for read too
    ("softirq_entry", "vec=3 [action=NET_RX]", "print fmt", (3,)),
    ("task_newtask", "pid=9 comm=a clone_flags=3d0f00 oom_score_adj=0", "print fmt", (9, "a", 0x3D0F00, 0)),
    ("print", "tracing_mark_write: hello world", "print fmt", (0, "hello world")),
    ("print", "0xffff00000819ff24s: TRACE_MARKER_START", "print fmt", (0xFFFF00000819FF24, "TRACE_MARKER_START")),
    ("print", "ip=tracing_mark_write buf=hi there", "raw", (0, "hi there")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "form", "values"), FORMS)
def test_each_form_of_an_events_text_gives_its_fields(name: str, text: str, form: str, values: Tuple[Any, ...]) -> None:
    got = FieldReader(kernel_format(name)).read(text)
    assert got is not None and (got.form, got.values) == (form, values)


def test_probe_events_read_the_kernels_own_lines_and_trace_cmds() -> None:
    """The kernel prints a return probe `(0x<ret_ip> <- 0x<func>)`, trace-cmd the print fmt's `(func <- ret_ip)`."""
    texts = format_texts()
    ret = FieldReader(parse_format(texts["ascend_halMemAlloc_ret"], "ascend"))
    kernel, report = ret.read("(0x401000 <- 0x400000) ret=-12"), ret.read("(400000 <- 401000) ret=-12")
    assert kernel is not None and report is not None and kernel.values == report.values == (0x400000, 0x401000, -12)
    assert (kernel.form, report.form) == ("probe", "print fmt")
    entry = FieldReader(parse_format(texts["ascend_irq_handler_entry"], "ascend"))
    got = entry.read('(0x5603f8cf33a0) dev=1 irq=129 name="func_cq_irq"')
    assert got is not None and got.values == (0x5603F8CF33A0, 1, 129, "func_cq_irq")


def test_a_text_that_does_not_fit_its_format_is_not_read() -> None:
    reader = FieldReader(kernel_format("sched_wakeup"))
    for text in ("comm=a pid=x prio=1 target_cpu=1", "comm=a pid=1 prio=120 success=1 target_cpu=002", "", "x" * 5000):
        assert reader.read(text) is None, text
    assert FieldReader(kernel_format("sched_wakeup", OLDER)).read("comm=a pid=1 prio=120 success=1 target_cpu=002")


def driver_records() -> List[Tuple[str, str, Dict[str, Any]]]:
    out, name, text = [], "", ""
    with open(os.path.join(DRIVER_DATA, "records.txt"), encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.startswith("== "):
                name = line[3:]
            elif line.startswith("text "):
                text = line[5:]
            elif line.startswith("expect "):
                out.append((name, text, json.loads(line[7:])))
    return out


@pytest.mark.parametrize(("name", "text", "expect"), driver_records(), ids=[r[0] for r in driver_records()])
def test_the_real_drivers_tracepoints_are_read_from_the_text_the_kernel_prints(name: str, text: str,
                                                                                expect: Dict[str, Any]) -> None:
    """The text of each hand-annotated record (tests/data/ascend-driver/records.txt) gives its fields; the struct
    members its print fmt does not show (status, the channel type behind chan_name, error codes) are said to be
    absent, the time's nanoseconds come back to the µs the text shows."""
    fmt = next(parse_format(t, s) for s, t in DRIVER if parse_format(t, s).full_name == name)
    got = FieldReader(fmt, ASCEND_LAYOUTS).read(text)
    assert got is not None and got.form == "print fmt"
    page = PageEncoder(HEADER).pages([(1000, 4242, fmt, got.values)])
    out: List[Any] = []
    CpuDecoders(HEADER, build_decoders([fmt], layouts=ASCEND_LAYOUTS)).decode([(0, page[0])], out)
    (ev,) = [e for e in out if isinstance(e, TraceEvent)]
    fields = ev.fields()
    for path in got.absent:
        outer, _, member = path.partition(".")
        expect[outer].pop(member, None)
        fields[outer].pop(member, None)
    assert fields == expect
    assert got.absent == NOT_PRINTED[name]


NOT_PRINTED = {  # the members the driver's TP_printk does not show (chan_name is looked up from types)
    "trs_chan:sqe": ("sq_trace.status", "sq_trace.types.type", "sq_trace.types.sub_type"),
    "trs_chan:cqe": ("cq_trace.types.type", "cq_trace.types.sub_type"),
    "trs_chan:recv": ("recv_trace.types.type", "recv_trace.types.sub_type"),
    "trs_core:logic_cqe": ("cq_trace.errcode", "cq_trace.errtype", "cq_trace.drop_flag", "cq_trace.timestamp"),
    "trs_core:logic_cq_recv": (),
}


def test_the_drivers_formats_are_the_ones_held_to_the_annotated_records() -> None:
    for system, text in DRIVER:
        name = parse_format(text, system).name
        with open(os.path.join(DRIVER_DATA, "events", system, name, "format"), encoding="utf-8") as f:
            assert f.read() == text


def test_real_driver_text_becomes_submits_and_completions_on_their_devices(tmp_path: Any) -> None:
    """`cat trace` of the real driver's tracepoints, through check: the ascend profile's submit and complete."""
    (sqe,) = [t for n, t, _ in driver_records() if n == "trs_chan:sqe"]
    (cqe,) = [t for n, t, _ in driver_records() if n == "trs_core:logic_cqe"]
    text = tmp_path / "trace.txt"
    text.write_text("# tracer: nop\n#\n"
                    f"       runtime-4242    [000] .....  1000.000100: sqe: {sqe}\n"
                    f"        <idle>-0       [001] d.h1.  1000.000900: logic_cqe: {cqe}\n")  # fmt: skip
    rec, report = str(tmp_path / "r.npt"), str(tmp_path / "r.json")
    assert main(["import", str(text), "-o", rec]) == 0
    assert RecordingReader(rec).header["profile"] == "ascend"
    assert main(["check", rec, "--json", report, "-q"]) in (0, 1)
    with open(report) as f:
        summary = json.load(f)["summary"]
    assert summary["events"]["by_kind"] == {"submit": 1, "complete": 1}


# ---- the command: every line counted, refusals in one line ------------------------------------------------------
def test_lost_event_notes_are_losses_of_their_cpu(tmp_path: Any) -> None:
    text = tmp_path / "pipe.txt"
    text.write_text("  a-1 [000] ..... 1.000001: sched_waking: comm=b pid=2 prio=120 target_cpu=001\n"
                    "CPU:1 [LOST 1234 EVENTS]\nCPU:0 [LOST EVENTS]\n"
                    "  a-1 [001] ..... 1.000002: sched_waking: comm=b pid=2 prio=120 target_cpu=001\n")  # fmt: skip
    rec, report = str(tmp_path / "r.npt"), str(tmp_path / "r.json")
    assert main(["import", str(text), "-o", rec]) == 0
    assert main(["check", rec, "--json", report, "-q"]) == 1  # an incomplete trace
    with open(report) as f:
        reading = json.load(f)["reading"]
    assert reading["lost"] == 1234 and reading["incomplete"] and reading["events"] == 2


def test_a_file_with_no_event_is_refused_in_one_line(tmp_path: Any, capsys: Any) -> None:
    for body in ("hello\nworld\n", "", "# tracer: nop\n#\n"):
        text = tmp_path / "none.txt"
        text.write_text(body)
        assert main(["import", str(text), "-o", str(tmp_path / "x.npt")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no event read" in err, err
        assert not os.path.exists(tmp_path / "x.npt")


def test_formats_is_refused_where_it_cannot_be_used(tmp_path: Any, capsys: Any) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text("[  100.000000] usb 1-1: new device\n")
    assert main(["import", str(log), "--formats", str(tmp_path), "-o", str(tmp_path / "a.npt")]) == 2
    text = tmp_path / "t.txt"
    text.write_text("  a-1 [000] ..... 1.000001: x: y\n")
    assert main(["import", str(text), "--formats", str(log), "-o", str(tmp_path / "b.npt")]) == 2
    err = capsys.readouterr().err
    assert "--formats" in err and "Traceback" not in err


def test_an_unknown_event_is_kept_as_text_under_its_name_and_odd_names_under_text_event(tmp_path: Any) -> None:
    lines = ["  a-1 [000] ..... 1.000001: my_event: a=1 b=two", "  a-1 [000] ..... 1.000002: weird$name: x",
             "  a-1 [000] ..... 1.000003: no name here"]  # fmt: skip
    got = read_ftrace_text(lines, catalog(), HEADER)
    names = {f["name"]: f for f in got.texts}
    assert set(names) == {"my_event", "event"} and got.stats["as_text"] == 3


# ---- no traceback on any text -----------------------------------------------------------------------------------
_PIECES = st.sampled_from([
    "  bash-12 ", "<idle>-0 ", "(  12) ", "(-----) ", "[000] ", "[1] ", "d.h2. ", "dNHff ", "0d..2 ", "1.000001: ",
    "123: ", "sched_switch: ", "print: ", "tracing_mark_write: ", "sqe: ", "prev_comm=a ", "prev_state=S|D+ ",
    "==> ", "comm=", "pid=", "[120] ", "CPU:001", "(0x4000 <- 0x5000) ", "ret=", "\t", "=> ", "CPU:1 [LOST ",
    "EVENTS]", "# ", "cpus=2", "\x00", "\ufffd", "%", "\\", '"', "ARRAY[01, 02]", "0x", "-", ":", " ",
])  # fmt: skip
LINE = st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=14).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(LINE, max_size=12))
def test_no_text_makes_the_import_raise(lines: List[str]) -> None:
    got = read_ftrace_text(lines, CATALOG, HEADER)
    counted = ("events", "frames", "headers", "lost_lines", "other")
    assert sum(got.stats[k] for k in counted) == len(lines)
    assert got.stats["with_fields"] + got.stats["as_text"] == got.stats["events"]


@settings(max_examples=150, deadline=None)
@given(text=LINE, which=st.integers(0, 10_000))
def test_no_text_makes_a_field_reader_raise(text: str, which: int) -> None:
    fmt, _ = ALL_FORMATS[which % len(ALL_FORMATS)]
    FieldReader(fmt, ASCEND_LAYOUTS).read(text)


FMTS = LINE.map(lambda s: f'"{s}", REC->a, __print_flags(REC->b, "|", {{1, "X"}}), REC->c ? "y" : "n"')


@settings(max_examples=100, deadline=None)
@given(print_fmt=st.one_of(st.text(max_size=80), FMTS))
def test_no_print_fmt_makes_the_reader_raise(print_fmt: str) -> None:
    reader = compile_print_fmt(print_fmt)
    if reader.pattern is not None:
        reader.pattern.fullmatch("a b c 1 2 3")


CATALOG = catalog()
ALL_FORMATS = [entry for entries in CATALOG.by_name.values() for entry in entries]


def test_long_and_repetitive_lines_are_read_without_backtracking_forever() -> None:
    """Lines made to make a backtracking matcher work hard: counted (as other or as events), in bounded time."""
    lines = ["a-1 " * 4000 + "[0]", "-1 [000] " * 3000, "  a-1 [000] 1.5: x: " + "prev_comm=a " * 3000,
             "  a-1 [000] 1.5: sched_switch: " + "a:1 [1] S ==> " * 500, "x" * 70_000]  # fmt: skip
    got = read_ftrace_text(lines, CATALOG, HEADER)
    assert got.stats["lines"] == 5 and got.stats["truncated_events"] == 2  # the 36 KB and 7 KB texts, cut to a record


def test_this_boot_places_seconds_and_refuses_raw_counts(tmp_path: Any, capsys: Any) -> None:
    text = tmp_path / "t.txt"
    text.write_text("  a-1 [000] ..... 1.000001: x: y\n")
    rec = str(tmp_path / "a.npt")
    assert main(["import", str(text), "--this-boot", "-o", rec]) == 0
    assert RecordingReader(rec).header["extra"]["import"]["anchor"]["source"] == "this-boot"
    text.write_text("  a-1 [000] ..... 1234: x: y\n")
    assert main(["import", str(text), "--this-boot", "-o", str(tmp_path / "b.npt")]) == 2
    assert "raw counts" in capsys.readouterr().err


def test_a_format_of_the_source_that_no_kernel_writes_is_said_and_its_events_kept_as_text(tmp_path: Any,
                                                                                           capsys: Any) -> None:
    events = tmp_path / "events" / "my" / "my_event"
    events.mkdir(parents=True)
    (events / "format").write_text("name: my_event\nID: 7\nformat:\n\tfield:int x;\toffset:0;\tsize:4;\tsigned:1;\n"
                                   'print fmt: "x=%d", REC->x\n')  # fmt: skip
    text = tmp_path / "t.txt"
    text.write_text("  a-1 [000] ..... 1.000001: my_event: x=1\n")
    assert main(["import", str(text), "--formats", str(tmp_path / "events"), "-o", str(tmp_path / "a.npt")]) == 0
    err = capsys.readouterr().err
    assert "1 formats not used (their events kept as text): format my:my_event: field 'common_" in err
    assert "1 as text: my_event 1" in err
