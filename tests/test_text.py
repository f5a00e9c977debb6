"""Text and NDJSON lines of trace events: the production printer (a format's rows at a time, from a block's
columns or from records decoded elsewhere) equals the reference (one %-formatting per event), equal to the
field-by-field rendering (integers in decimal, in hex where the kernel prints them so, strings escaped, arrays
listed), NDJSON equal to json.dumps."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any, Dict, List, Tuple

import pytest

from npu_trace.events import LossLedger, NpuEvent, RawRecord, TraceEvent
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.format import parse_format
from npu_trace.pipeline.blocks import objects_block, records_of
from npu_trace.sinks.text import StreamPrinter, fields_text
from printing import comm_of, production, reference
from reference.pages import PageDecoder
from reference.text import event_dict, format_ndjson, format_text
from tests.goldens import kernel_dirs, load_formats, load_pages

FORMAT = """name: sample
ID: 900
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long addr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:16;\tsize:4;\tsigned:1;
\tfield:char name[16];\toffset:20;\tsize:16;\tsigned:0;
\tfield:u32 ids[2];\toffset:36;\tsize:8;\tsigned:0;

print fmt: "addr=%lx ret=%d name=%s ids=%s", REC->addr, REC->ret, REC->name, __print_array(REC->ids, 2, 4)
"""
FMT = parse_format(FORMAT, "test")
FORMATS = ("text", "ndjson")


@pytest.mark.parametrize(
    "values, fields",
    [
        ((0x7F00, -12, "worker", [1, 2]), "addr=0x7f00 ret=-12 name=worker ids=[1,2]"),
        ((0, 0, "", [0, 0]), "addr=0x0 ret=0 name= ids=[0,0]"),
        ((1 << 63, 2**31 - 1, "a\x1b[31mb\nc", [0, 7]),
         f"addr={hex(1 << 63)} ret=2147483647 name=a\\x1b[31mb\\nc ids=[0,7]"),
        ((0, 0, "a\u009b31mb\u0085", [1]), "addr=0x0 ret=0 name=a\\u009b31mb\\u0085 ids=[1]"),  # C1: CSI, NEL
        ((0, 0, "", []), "addr=0x0 ret=0 name= ids=[]"),  # decoded elsewhere: an array of another length
        (("not-an-int", 5, "x", [3]), "addr=not-an-int ret=5 name=x ids=[3]"),  # what the field does not declare
        ((1, 2, "short"), "addr=0x1 ret=2 name=short"),  # fewer values than fields
    ],
)
def test_a_line_is_its_fields_rendered_one_by_one(values: Tuple[Any, ...], fields: str) -> None:
    ev = TraceEvent(3_000_000_123, 1, 42, FMT, values)
    assert fields_text(ev) == fields
    assert format_text(ev, "py\tthon") == f"     3.000000123 [001] py\\tthon-42 test:sample: {fields}"
    for comm in ("py\tthon", 'q"u\\o%te', "\u00e9\x00"):  # JSON's escapes, a % that is not a template's
        assert format_ndjson(ev, comm) == json.dumps(event_dict(ev, comm))
    blocks = [objects_block([ev])]  # as BPF hands records over: decoded elsewhere
    if len(values) == 4 and isinstance(values[0], int) and len(values[3]) == 2:  # a record the kernel could write
        blocks.append(records_of([ev], plans([FMT])))
    for fmt in FORMATS:
        for block in blocks:
            assert production([block], fmt) == reference([ev], fmt)


# a format whose field names repeat: json.dumps's dict keeps one. parse_format names a repeated field apart
# (`addr_2`), so it is made in code: a sink still renders what it is given as json.dumps does
DUPLICATE = replace(FMT, fields=tuple(replace(f, name="addr") if f.name == "ret" else f for f in FMT.fields))


def test_ndjson_of_a_format_with_repeated_field_names_is_json_dumps() -> None:
    assert "addr_2" in parse_format(FORMAT.replace("int ret;", "int addr;"), "test").field_names
    ev = TraceEvent(5, 0, 1, DUPLICATE, (1, 2, "x", [3, 4]))
    assert format_ndjson(ev, "c") == json.dumps(event_dict(ev, "c"))
    assert production([objects_block([ev])], "ndjson") == json.dumps(event_dict(ev, comm_of(1))) + "\n"


@pytest.mark.parametrize("root", kernel_dirs(), ids=lambda d: d.rsplit("/", 1)[-1])
def test_every_golden_event_prints_as_the_reference_prints_it(root: str) -> None:
    """The golden captures' records (ascend, sched, syscalls, irq, ftrace:print), from the block's columns, a
    block cut at random places: the reference's lines, byte for byte; NDJSON equal to json.dumps."""
    header, formats = load_formats(root)
    decoders: Dict[int, PageDecoder] = {}
    out: List[Any] = []
    for cpu, page in load_pages(root):
        if cpu not in decoders:
            decoders[cpu] = PageDecoder(header, build_decoders(formats), cpu, ledger=LossLedger())
        decoders[cpu].decode(page, out)
    events = [item for item in out if isinstance(item, TraceEvent)]
    assert len(events) > 100
    for ev in events:
        assert format_ndjson(ev, "comm") == json.dumps(event_dict(ev, "comm"))
    columns = plans(formats)
    for fmt in FORMATS:
        blocks = [records_of(out[lo:hi], columns) for lo, hi in zip([0, 7, 300], [7, 300, len(out)])]
        assert production(blocks, fmt) == reference(out, fmt)


def test_channel_events_losses_and_unknown_records_print_one_line_each() -> None:
    """The other channels' events and the losses as the reference shows them; a record no format describes
    as its bytes (as trace-cmd report shows an unknown event), counted as shown by its raw fields."""
    channel = NpuEvent(7, "timeout", 1, "heartbeat", -1, -1, {"source": "kmsg", "text": "a\x1bb"})
    from npu_trace.events import Loss

    loss = Loss("tracefs", 2, "malformed:short_record", 1, 9)
    for fmt in FORMATS:
        assert production([objects_block([channel, loss])], fmt) == reference([channel, loss], fmt)
    out = io.StringIO()
    printer = StreamPrinter(out, "text", comm_of)
    printer.write_objects([RawRecord(1_000_000_002, 3, 5, 1234, b"\xd2\x04\x00\x00\x05\x00\x00\x00\xff")])
    assert out.getvalue() == "     1.000000002 [003] q\"u\\o%te-5 [UNKNOWN TYPE 1234] d2 04 00 00 05 00 00 00 ff\n"
    assert (printer.records, printer.unformatted) == (1, 1)


def test_a_percent_in_a_name_or_a_value_is_text_not_a_template() -> None:
    """Names and values with % (a format made in code; a task name, a string): printed as they are."""
    odd = replace(FMT, name="sam%dple", fields=tuple(replace(f, name=f.name + "%s") for f in FMT.fields))
    ev = TraceEvent(5, 0, 3, odd, (0x1F, -1, "50%", [1, 2]))
    for fmt in FORMATS:
        for block in (objects_block([ev]), records_of([ev], plans([odd]))):
            assert production([block], fmt) == reference([ev], fmt)


def test_a_loss_of_no_one_cpu_prints_dashes() -> None:
    """A loss of cpu -1 (a recording's damaged part, a dropped count of all CPUs) printed as [-01]."""
    from npu_trace.events import Loss
    from npu_trace.sinks.text import loss_text

    assert loss_text(Loss("tracefs", -1, "dropped", 3, 10**9)) == "     1.000000000 [---] !! LOST 3 events " \
                                                                   "(tracefs/dropped)"  # fmt: skip
    assert loss_text(Loss("tracefs", 2, "overrun", 0, 10**9)).startswith("     1.000000000 [002] !! LOST an")
