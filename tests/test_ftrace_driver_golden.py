"""The real Ascend driver's five tracepoints: formats written from their TRACE_EVENT definitions and
hand-annotated record bytes (tests/data/ascend-driver/records.txt) decode to the annotated values."""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any, Dict, List, Tuple

import pytest

from goldens import DATA, by_name, load_formats, read
from npu_trace.device.profiles import ASCEND_LAYOUTS
from npu_trace.events import TraceEvent
from npu_trace.ftrace.decode import build_decoders, make_decoder
from oracle import render_pattern
from reference.pages import PageDecoder

ROOT = os.path.join(DATA, "ascend-driver")
Block = Tuple[str, bytes, str, Dict[str, Any]]


def parse_records(text: str) -> List[Block]:
    blocks: List[Block] = []
    name, raw, shown, expect = "", b"", "", {}
    for line in [*text.splitlines(), "== end"]:
        if line.startswith("== "):
            if name:
                blocks.append((name, raw, shown, expect))
            name, raw = line[3:].strip(), b""
        elif line.startswith("text "):
            shown = line[5:]
        elif line.startswith("expect "):
            expect = json.loads(line[7:])
        elif line and not line.startswith("#"):
            hex_part = re.match(r"^((?:[0-9a-f]{2} )*[0-9a-f]{2})(?:\s{2,}|$)", line)
            assert hex_part, f"bad record line {line!r}"
            raw += bytes.fromhex(hex_part.group(1))
    return blocks


BLOCKS = parse_records(read(os.path.join(ROOT, "records.txt")))


def test_all_five_driver_events_are_covered() -> None:
    _, formats = load_formats(ROOT)
    assert sorted(f.full_name for f in formats) == sorted(b[0] for b in BLOCKS) == [
        "trs_chan:cqe", "trs_chan:recv", "trs_chan:sqe", "trs_core:logic_cq_recv", "trs_core:logic_cqe",
    ]  # fmt: skip


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b[0])
def test_record_decodes_to_annotated_values(block: Block) -> None:
    name, raw, _, expect = block
    assert len(raw) % 4 == 0, "ring-buffer payloads are 4-byte aligned"
    fmt = by_name(load_formats(ROOT)[1])[name]
    pid, values = make_decoder(fmt, "little", ASCEND_LAYOUTS).decode(raw, 0, len(raw))
    assert pid == struct.unpack_from("<i", raw, 4)[0]
    assert dict(zip(fmt.field_names, values)) == expect


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b[0])
def test_decoded_values_render_as_the_kernel_prints_them(block: Block) -> None:
    name, raw, shown, _ = block
    fmt = by_name(load_formats(ROOT)[1])[name]
    _, values = make_decoder(fmt, "little", ASCEND_LAYOUTS).decode(raw, 0, len(raw))
    pattern = render_pattern(fmt.print_fmt, dict(zip(fmt.field_names, values)))
    assert pattern is not None and re.fullmatch(pattern, shown), (pattern, shown)


def test_struct_fields_without_a_layout_stay_raw_bytes() -> None:
    name, raw, _, _ = BLOCKS[0]
    fmt = by_name(load_formats(ROOT)[1])[name]
    _, values = make_decoder(fmt, "little").decode(raw, 0, len(raw))
    fields = dict(zip(fmt.field_names, values))
    assert fields["inst"] == "0300000000000000"
    assert fields["str"] == "Task Send"


def test_a_page_of_driver_records_decodes_in_order_with_timestamps() -> None:
    header, formats = load_formats(ROOT)
    page = bytearray(header.page_size)
    pos, ts0, deltas = header.data_offset, 5_000_000_000, [0, 1500, 20, 3, 7]
    for (_, raw, _, _), delta in zip(BLOCKS, deltas):
        struct.pack_into("<I", page, pos, (delta << 5) | (len(raw) // 4))
        page[pos + 4 : pos + 4 + len(raw)] = raw
        pos += 4 + len(raw)
    struct.pack_into("<QQ", page, 0, ts0, pos - header.data_offset)
    out: List[Any] = []
    dec = PageDecoder(header, build_decoders(formats, "little", ASCEND_LAYOUTS), cpu=3)
    assert dec.decode(bytes(page), out) == 5
    assert [e.fmt.full_name for e in out] == [b[0] for b in BLOCKS]
    assert all(isinstance(e, TraceEvent) and e.cpu == 3 for e in out)
    expected_ts, t = [], ts0
    for d in deltas:
        t += d
        expected_ts.append(t)
    assert [e.ts_ns for e in out] == expected_ts
    assert [e.fields() for e in out] == [b[3] for b in BLOCKS]
