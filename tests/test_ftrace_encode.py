"""The page encoder (test data and benchmark recordings) is the exact inverse of the decoder: what it writes
decodes to the same events, with time extends for long gaps, long records, page breaks and the missed flag."""

from __future__ import annotations

import os
from typing import Any, List

from hypothesis import given, settings
from hypothesis import strategies as st

from goldens import kernel_dirs, read
from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import parse_header_page
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import formats, synth_events
from reference.pages import CpuDecoders

HEADER = parse_header_page(read(os.path.join(kernel_dirs()[0], "header_page")))
FORMATS = formats()


def decode(pages: List[bytes]) -> List[Any]:
    out: List[Any] = []
    CpuDecoders(HEADER, build_decoders(FORMATS.values())).decode([(0, p) for p in pages], out)
    return out


def rows(events: List[TraceEvent]) -> Any:
    return [(e.ts_ns, e.pid, e.fmt, e.values) for e in events]


def test_a_scenario_round_trips_through_pages() -> None:
    events = synth_events(plan("mixed", 2, 1.0, 2000, 2))
    pages = PageEncoder(HEADER).pages(rows(events))
    assert len(pages) > 10 and all(len(p) == HEADER.page_size for p in pages)
    assert decode(pages) == events


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.text(min_size=0, max_size=200)), min_size=1, max_size=60))
def test_gaps_of_any_length_and_long_strings_round_trip(items: List[Any]) -> None:
    fmt = FORMATS["ascend_devdrv_reset_step"]  # dev, step, step_name (a __data_loc string), ret
    ts, events = 1, []
    for gap, name in items:
        ts += gap  # beyond 2**27 ns: a time extend; long names: records whose length needs a second word
        events.append(TraceEvent(ts, 0, 7, fmt, (0x400000, 1, 2, name.replace("\0", ""), -5)))
    assert decode(PageEncoder(HEADER).pages(rows(events))) == events


def test_the_first_page_can_say_events_were_lost_before_it() -> None:
    events = synth_events(plan("steady", 1, 0.2, 500, 1))
    got = decode(PageEncoder(HEADER).pages(rows(events), missed=12))
    assert got[0] == Loss("tracefs", 0, "page_missed", 12, events[0].ts_ns) and got[1:] == events
