"""Text lines of trace events: one %-formatting per event from a plan per format, equal to the field-by-field
rendering (integers in decimal, in hex where the kernel prints them so, strings escaped, arrays listed)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Dict, List, Tuple

import pytest

from npu_trace.events import LossLedger, TraceEvent
from npu_trace.ftrace.decode import PageDecoder, build_decoders
from npu_trace.ftrace.format import parse_format
from npu_trace.sinks.text import _fields_text, event_dict, format_ndjson, format_text
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


@pytest.mark.parametrize(
    "values, fields",
    [
        ((0x7F00, -12, "worker", [1, 2]), "addr=0x7f00 ret=-12 name=worker ids=[1,2]"),
        ((0, 0, "", []), "addr=0x0 ret=0 name= ids=[]"),
        ((1 << 63, 2**31 - 1, "a\x1b[31mb\nc", [0]),
         f"addr={hex(1 << 63)} ret=2147483647 name=a\\x1b[31mb\\nc ids=[0]"),
        (("not-an-int", 5, "x", [3]), "addr=not-an-int ret=5 name=x ids=[3]"),  # what the field does not declare
        ((1, 2, "short"), "addr=0x1 ret=2 name=short"),  # fewer values than fields
    ],
)
def test_a_line_is_its_fields_rendered_one_by_one(values: Tuple[Any, ...], fields: str) -> None:
    ev = TraceEvent(3_000_000_123, 1, 42, FMT, values)
    assert _fields_text(ev) == fields
    assert format_text(ev, "py\tthon") == f"     3.000000123 [001] py\\tthon-42 test:sample: {fields}"
    for comm in ("py\tthon", 'q"u\\o%te', "\u00e9\x00"):  # JSON's escapes, a % that is not a template's
        assert format_ndjson(ev, comm) == json.dumps(event_dict(ev, comm))


# a format whose field names repeat: json.dumps's dict keeps one. parse_format names a repeated field apart
# (`addr_2`), so it is made in code: a sink still renders what it is given as json.dumps does
DUPLICATE = replace(FMT, fields=tuple(replace(f, name="addr") if f.name == "ret" else f for f in FMT.fields))


def test_ndjson_of_a_format_with_repeated_field_names_is_json_dumps() -> None:
    assert "addr_2" in parse_format(FORMAT.replace("int ret;", "int addr;"), "test").field_names
    ev = TraceEvent(5, 0, 1, DUPLICATE, (1, 2, "x", [3]))
    assert format_ndjson(ev, "c") == json.dumps(event_dict(ev, "c"))


@pytest.mark.parametrize("root", kernel_dirs(), ids=lambda d: d.rsplit("/", 1)[-1])
def test_ndjson_of_every_golden_event_is_json_dumps(root: str) -> None:
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
