"""Decoding oracle: every field npu-trace decodes from real pages equals the kernel's own text rendering.

The captures under tests/data/kernel-* hold raw trace_pipe_raw pages and the `trace` text the kernel printed
for the same records (tests/data/capture_golden.py made them). The privileged test does the same live.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Tuple

import pytest

from goldens import kernel_dirs, load_formats, load_pages, read
from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.format import EventFormat, PageHeader
from oracle import LINE_RE, render_pattern
from reference.pages import PageDecoder

# Event names as the kernel's text shows them, where they differ from the format name.
_TEXT_NAME = {"ftrace:print": "tracing_mark_write"}


def kernel_print_fmt(fmt: EventFormat) -> str:
    """The print fmt the kernel really follows. Uprobe events print their addresses with their own routine
    (kernel/trace/trace_uprobe.c print_uprobe_event): "(0x<ip>)" and "(0x<ret_ip> <- 0x<func>)"."""
    text = fmt.print_fmt
    if "__probe_ip" in fmt.field_names:
        text = text.replace('"(%lx)', '"(0x%lx)', 1)
    if "__probe_func" in fmt.field_names:
        text = text.replace('"(%lx <- %lx)', '"(0x%lx <- 0x%lx)', 1)
        text = text.replace("REC->__probe_func, REC->__probe_ret_ip", "REC->__probe_ret_ip, REC->__probe_func", 1)
    return text


def decode_all(header: PageHeader, formats: List[EventFormat], pages: List[Tuple[int, bytes]]) -> List[Any]:
    table = build_decoders(formats)
    decoders: Dict[int, PageDecoder] = {}
    out: List[Any] = []
    for cpu, page in pages:
        dec = decoders.setdefault(cpu, PageDecoder(header, table, cpu))
        dec.decode(page, out)
    return out


def kernel_lines(text: str) -> Dict[int, List[re.Match[str]]]:
    lines: Dict[int, List[re.Match[str]]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = LINE_RE.match(line)
        assert m, f"unparsed trace line {line!r}"
        lines.setdefault(int(m.group("cpu")), []).append(m)
    return lines


def check_against_text(events: List[TraceEvent], text: str) -> int:
    lines = kernel_lines(text)
    per_cpu: Dict[int, List[TraceEvent]] = {}
    for ev in events:
        per_cpu.setdefault(ev.cpu, []).append(ev)
    assert sorted(per_cpu) == sorted(lines)
    checked = 0
    for cpu, evs in per_cpu.items():
        assert len(evs) == len(lines[cpu]), f"cpu{cpu}: {len(evs)} decoded, kernel printed {len(lines[cpu])}"
        for ev, m in zip(evs, lines[cpu]):
            where = f"cpu{cpu} {m.group(0)!r}"
            assert (ev.ts_ns + 500) // 1000 == round(float(m.group("ts")) * 1e6), where  # kernel rounds to us
            assert ev.pid == int(m.group("pid")), where
            pattern = render_pattern(kernel_print_fmt(ev.fmt), ev.fields())
            if pattern is None:  # syscall events print through their own routine
                continue
            assert _TEXT_NAME.get(ev.fmt.full_name, ev.fmt.name) == m.group("name"), where
            rest = m.group("rest")
            if ev.fmt.full_name == "ftrace:print":  # printed without the event name: "%ps: %s" is the whole line
                rest = f"{m.group('name')}: {rest}\n"
            assert re.fullmatch(pattern, rest), f"{where} !~ {pattern!r}"
            checked += 1
    return checked


@pytest.mark.parametrize("root", kernel_dirs(), ids=os.path.basename)
def test_golden_pages_match_kernel_text(root: str) -> None:
    header, formats = load_formats(root)
    out = decode_all(header, formats, load_pages(root))
    assert not [x for x in out if isinstance(x, Loss)]
    events = [x for x in out if isinstance(x, TraceEvent)]
    names = {e.fmt.full_name for e in events}
    # the capture exercises: uprobe events with strings and hex, arrays, char arrays, markers, data_loc
    assert {"ascend:ascend_irq_handler_entry", "raw_syscalls:sys_enter", "sched:sched_switch",
            "ftrace:print"} <= names  # fmt: skip
    assert check_against_text(events, read(os.path.join(root, "trace.txt"))) > 500


@pytest.mark.parametrize("root", kernel_dirs(), ids=os.path.basename)
def test_golden_time_extends_are_applied(root: str) -> None:
    header, formats = load_formats(root)
    events = [x for x in decode_all(header, formats, load_pages(root)) if isinstance(x, TraceEvent)]
    per_cpu: Dict[int, List[int]] = {}
    for e in events:
        per_cpu.setdefault(e.cpu, []).append(e.ts_ns)
    gaps = [b - a for ts in per_cpu.values() for a, b in zip(ts, ts[1:])]
    assert min(gaps) >= 0
    assert max(gaps) > (1 << 27), "the capture pauses 0.3 s: a time-extend record must carry the gap"


@pytest.mark.parametrize("root", kernel_dirs(), ids=os.path.basename)
def test_golden_overrun_pages_flag_missed_events(root: str) -> None:
    import json

    sub = os.path.join(root, "overrun")
    header, formats = load_formats(sub)
    out = decode_all(header, formats, load_pages(sub))
    losses = [x for x in out if isinstance(x, Loss)]
    events = [x for x in out if isinstance(x, TraceEvent)]
    stats = json.loads(read(os.path.join(sub, "stats.json")))
    overrun = sum(s["overrun"] for s in stats.values())
    assert overrun > 0
    assert losses and all(x.kind == "page_missed" for x in losses)
    assert sum(x.lost for x in losses) <= overrun
    assert events and all(e.fmt.name == "sys_enter_getpid" for e in events)


@pytest.mark.privileged
def test_live_capture_matches_kernel_text(tmp_path: Any) -> None:
    """The same oracle on pages captured now, from this kernel: formats, clock and all."""
    from capture_golden import capture

    capture(str(tmp_path))
    header, formats = load_formats(str(tmp_path))
    out = decode_all(header, formats, load_pages(str(tmp_path)))
    events = [x for x in out if isinstance(x, TraceEvent)]
    assert check_against_text(events, read(os.path.join(tmp_path, "trace.txt"))) > 500
