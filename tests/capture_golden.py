"""Regenerate tests/data/kernel-<release>/: real format files, raw ring-buffer pages and the kernel's own text.

Run as root on a kernel with tracefs and uprobes: `.venv/bin/python tests/capture_golden.py`.
It loads the simulator, runs a short scenario plus syscalls, IRQs, scheduler switches and trace_marker writes
(with control characters), pauses long enough to force time-extend records, and saves:
  events/<system>/<name>/format, header_page, header_event   the formats the pages were written with
  pages.bin + pages.json                                     raw trace_pipe_raw pages, [cpu, offset, length]
  trace.txt                                                  the instance's `trace` file, read before the pages
A second capture, overrun/, uses a tiny buffer so that pages carry the missed-events flag.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import List, Tuple

from npu_trace import sim
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sources.tracefs_source import TracefsSession

EVENTS = ["syscalls:sys_enter_getpid", "raw_syscalls:sys_enter", "sched:sched_switch", "irq:irq_handler_entry",
          "irq:irq_handler_exit", "ascend:*"]  # fmt: skip


def _save(dest: str, fs: Tracefs, session: TracefsSession, pages: List[Tuple[int, bytes]], text: str) -> None:
    os.makedirs(dest, exist_ok=True)
    for name in ("header_page", "header_event"):
        with open(os.path.join(dest, name), "w") as f:
            f.write(fs.read_text(f"events/{name}"))
    for fmt in session.formats:
        d = os.path.join(dest, "events", fmt.system, fmt.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "format"), "w") as f:
            f.write(fs.event_format(fmt.system, fmt.name))
    index, offset = [], 0
    with open(os.path.join(dest, "pages.bin"), "wb") as f:
        for cpu, page in pages:
            f.write(page)
            index.append([cpu, offset, len(page)])
            offset += len(page)
    with open(os.path.join(dest, "pages.json"), "w") as f:
        json.dump({"kernel": platform.release(), "machine": platform.machine(), "pages": index}, f)
    with open(os.path.join(dest, "trace.txt"), "w") as f:
        f.write(text)


def _workload(session: TracefsSession) -> None:
    assert session.instance is not None
    for i in range(300):
        os.getpid()
        if i % 100 == 0:
            session.instance.write_marker(f"marker {i} \x1b[31mred\x1b[0m [b]bold[/b]\n")
    time.sleep(0.3)  # > 2^27 ns: the next record needs a time-extend
    sim.run_scenario("steady", 7, 0.3, 300, 2, ensure_loaded=False)
    time.sleep(0.2)
    for _ in range(50):
        os.getpid()


def capture(dest: str) -> None:
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    try:
        _capture(fs, dest)
    finally:
        if not was_loaded:
            sim.unload(fs)


def _capture(fs: Tracefs, dest: str) -> None:
    with TracefsSession(EVENTS, fs=fs, tag="golden") as session:
        assert session.instance is not None
        fs.write_text(f"{session.instance.rel}/events/raw_syscalls/sys_enter/filter", "id == 39")
        _workload(session)
        session.instance.tracing_on(False)
        text = session.instance.trace_text()
        pages = list(session.raw_pages())
        _save(dest, fs, session, pages, text)
    with TracefsSession(["syscalls:sys_enter_getpid"], fs=fs, tag="overrun", buffer_kb=8) as session:
        for _ in range(20000):
            os.getpid()
        assert session.instance is not None
        session.instance.tracing_on(False)
        stats = {cpu: session.instance.cpu_stats(cpu) for cpu in session.instance.cpus()}
        pages = list(session.raw_pages())
        _save(os.path.join(dest, "overrun"), fs, session, pages, "")
        with open(os.path.join(dest, "overrun", "stats.json"), "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    capture(os.path.join(here, f"kernel-{platform.release().split('-')[0]}-{platform.machine()}"))
    sys.exit(0)
