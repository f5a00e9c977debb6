"""Writes tests/data/ftrace-text/own-*: one short run traced in a private instance, kept as every text people paste
and as the binary trace of the same records, so the text import can be held to the binary one field by field.

Run as root on a host with trace-cmd (`apt-get install trace-cmd`) and, where the function tracer's files fail
with EPERM (these VMs), the anchor-tools shim built as an LD_PRELOAD library (see ../shared/anchor-tools):
    python tests/make_ftrace_text.py --shim /tmp/eperm_shim.so

For each trace clock (local: seconds; counter: raw counts) one run of the simulator's `steady` scenario, markers,
a few forks, with the scheduler's, interrupt and softirq events, and saves under `own-<clock>/`:
  events/<system>/<name>/format   the formats the records were written with (an import's `--formats`)
  trace.txt.zst                   the instance's `trace` file (the header, the irq-flags columns)
  header_page, pages.bin.zst, pages.json   the ring-buffer pages of `trace-cmd extract -B <instance>` (the same
                                  buffer, read after the text), as npu-trace's trace.dat reader takes them out of
                                  the file ([cpu, offset, length]; the trace.dat itself, with the host's kallsyms
                                  and 2,300 formats, is 1 MB compressed)
  report.txt.zst, report-R.txt.zst, report-l.txt.zst   `trace-cmd report`, `-R`, `-l` of that trace.dat (with
                                  `-t`, the full time, for the counter clock: its counts are not nanoseconds)
Never `trace-cmd reset` on a shared host: it clears every uprobe event, the simulator's included.

`--tracedat FILE NAME` does the same for a trace.dat someone else recorded (no root needed): `NAME/` gets its used
event formats, its pages and trace-cmd's reports of it (tests/data/ftrace-text/trappy-raw_trace: ARM's trappy
tests/raw_trace.dat).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "ftrace-text")
EVENTS = ["ascend:*", "sched:sched_switch", "sched:sched_wakeup", "sched:sched_waking", "sched:sched_process_fork",
          "irq:irq_handler_entry", "irq:irq_handler_exit", "irq:softirq_entry", "irq:softirq_exit",
          "irq:softirq_raise", "task:task_newtask"]  # fmt: skip
REPORTS = {"report.txt": [], "report-R.txt": ["-R"], "report-l.txt": ["-l"]}


def _save(path: str, data: bytes) -> None:
    with open(path + ".zst", "wb") as f:
        f.write(zstandard.ZstdCompressor(level=19).compress(data))


def _workload(session: Any) -> None:
    from npu_trace import sim

    instance = session.instance
    for i in range(5):
        instance.write_marker(f"marker {i}: phase {'warm' if i < 2 else 'run'}\n")
        subprocess.run(["true"], check=True)  # a fork, its wakeup and switches
    sim.run_scenario("steady", 3, 0.3, 200, 2, ensure_loaded=False)
    instance.write_marker("marker end\n")


def _formats(session: Any, fs: Any, dest: str) -> None:
    for fmt in session.formats:
        d = os.path.join(dest, "events", fmt.system, fmt.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "format"), "w") as f:
            f.write(fs.event_format(fmt.system, fmt.name))


def _pages(dat: str, dest: str, formats: bool = False) -> None:
    from npu_trace.ftrace import tracedat

    data = tracedat.read(dat)
    for entry in data.used_formats() if formats else []:
        d = os.path.join(dest, "events", entry["system"], entry["name"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "format"), "w") as f:
            f.write(entry["text"])
    index, offset, blob = [], 0, bytearray()
    for cpu, page in data.pages_in_time_order():
        blob += page
        index.append([cpu, offset, len(page)])
        offset += len(page)
    _save(os.path.join(dest, "pages.bin"), bytes(blob))
    with open(os.path.join(dest, "pages.json"), "w") as f:
        json.dump({"kernel": platform.release(), "machine": platform.machine(), "clock": data.clock,
                   "pages": index}, f)  # fmt: skip
    with open(os.path.join(dest, "header_page"), "w") as f:
        f.write(data.header_page)


def _reports(trace_cmd: str, dat: str, dest: str, full: List[str]) -> None:
    for name, options in REPORTS.items():
        out = subprocess.run([trace_cmd, "report", *options, *full, "-i", dat], capture_output=True, check=True).stdout
        _save(os.path.join(dest, name), out)


def capture(clock: str, dest: str, trace_cmd: str, env: Dict[str, str]) -> None:
    from npu_trace.ftrace.tracefs import Tracefs
    from npu_trace.sources.tracefs_source import TracefsSession

    fs = Tracefs.find()
    with TracefsSession(EVENTS, fs=fs, tag="text", clock=clock) as session, tempfile.TemporaryDirectory() as tmp:
        assert session.instance is not None
        _workload(session)
        session.instance.tracing_on(False)
        text = session.instance.trace_text()
        dat = os.path.join(tmp, "trace.dat")
        subprocess.run([trace_cmd, "extract", "-B", session.instance.name, "-o", dat], env=env, check=True,
                       capture_output=True)  # fmt: skip
        os.makedirs(dest, exist_ok=True)
        _formats(session, fs, dest)
        _save(os.path.join(dest, "trace.txt"), text.encode())
        _pages(dat, dest)
        _reports(trace_cmd, dat, dest, ["-t"] if clock == "counter" else [])


def main(argv: Optional[List[str]] = None) -> int:
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shim", help="the eperm shim (.so) to preload into trace-cmd")
    ap.add_argument("--tracedat", nargs=2, metavar=("FILE", "NAME"), help="a trace.dat recorded elsewhere")
    args = ap.parse_args(argv)
    trace_cmd = shutil.which("trace-cmd")
    if trace_cmd is None:
        raise SystemExit("trace-cmd is not installed")
    if args.tracedat:
        dest = os.path.join(OUT, args.tracedat[1])
        _pages(args.tracedat[0], dest, formats=True)
        _reports(trace_cmd, args.tracedat[0], dest, [])
        return 0
    env = dict(os.environ, LD_PRELOAD=args.shim) if args.shim else dict(os.environ)
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    try:
        for clock in ("local", "counter"):
            capture(clock, os.path.join(OUT, f"own-{clock}"), trace_cmd, env)
    finally:
        if not was_loaded:
            sim.unload(fs)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
