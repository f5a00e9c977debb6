"""BPF benchmark (figures only, never asserted): the bcc ring buffer path of npu-trace.

1. Streaming: `gen_syscalls N 0` (pinned to CPU 0, waiting on stdin so the program can filter its pid) drives
   `bpf/bench_getpid.bpf.c` (one 32-byte event per getpid); the reader, pinned to CPU 1, drains the ring buffer
   every few ms and decodes every record into a TraceEvent. Reported: delivered decoded events/s (events over
   the time from the generator's start to the last record drained), loss (must be 0 for the figure to count),
   reader CPU per event, and the generator's slowdown per call against an untraced run.
2. HAL uprobes on the simulator (`steady` scenario): the traced program's slowdown per HAL call (mean of
   end-start-delay against an untraced run), streaming vs aggregate mode, and the reader's CPU per event.

Run as root: `python -m benchmarks.bpf [--events N] [--repeat R] [--json OUT]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource
from npu_trace.events import Loss

HERE = os.path.dirname(os.path.abspath(__file__))
POLL_S = 0.002


def build_generator(workdir: str) -> str:
    exe = os.path.join(workdir, "gen_syscalls")
    subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(HERE, "gen_syscalls.c")], check=True)
    return exe


def gen_figures(out: bytes) -> Dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", out.decode())}


def untraced(exe: str, n: int) -> float:
    out = subprocess.run([exe, str(n), "0"], check=True, capture_output=True).stdout
    return gen_figures(out)["elapsed_ns"] / n


def stream_once(exe: str, n: int) -> Dict[str, float]:
    gen = subprocess.Popen(["sh", "-c", f"read go; exec {exe} {n} 0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    src = BpfSource(BpfConfig(pid=gen.pid, ringbuf_pages=8192))
    try:
        src.start_bench()
        return drain(src, gen, n)
    finally:
        src.close()
        if gen.poll() is None:
            gen.kill()


def drain(src: BpfSource, gen: subprocess.Popen[bytes], n: int) -> Dict[str, float]:
    delivered = lost = 0
    batch: List[Any] = []
    cpu0, t0 = time.process_time(), time.monotonic()
    assert gen.stdin is not None
    gen.stdin.write(b"go\n")
    gen.stdin.close()
    while delivered + lost < n:
        src.read(batch)
        for item in batch:
            if isinstance(item, Loss):
                lost += item.lost
            else:
                delivered += 1
        batch.clear()
        if gen.poll() is not None and not src.read(batch) and not batch:
            break
        time.sleep(POLL_S)
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    assert gen.stdout is not None
    figures = gen_figures(gen.stdout.read())
    gen.wait()
    return {
        "delivered": delivered,
        "lost": lost,
        "events_per_s": delivered / wall,
        "reader_cpu_ns_per_event": cpu * 1e9 / max(delivered, 1),
        "gen_ns_per_call": figures["elapsed_ns"] / n,
    }


def hal_overhead(config: Optional[BpfConfig], rate: float, seconds: float) -> Tuple[float, int, float]:
    """(mean ns per HAL call beyond its injected delay, events read, reader CPU ns per event)."""
    from npu_trace.sim import start_scenario

    src = BpfSource(config) if config else None
    try:
        if src:
            src.start()
        run = start_scenario("steady", 11, seconds, rate, 2, ensure_loaded=False)
        batch: List[Any] = []
        cpu0 = time.process_time()
        while run.poll() is None:
            if src:
                src.read(batch)
            time.sleep(0.01)
        truth = run.wait()
        if src:
            src.read(batch)
        cpu = time.process_time() - cpu0
    finally:
        if src:
            src.close()
    hal = [a for a in truth["actions"] if a["func"].startswith("hal")]
    extra = statistics.mean(a["end_ns"] - a["start_ns"] - a["delay_ns"] for a in hal)
    events = sum(1 for i in batch if not isinstance(i, Loss))
    return extra, events, cpu * 1e9 / max(len(hal), 1)


def run(events: int, repeat: int) -> Dict[str, Any]:
    from npu_trace.runner import tune_gc

    tune_gc()  # as the CLI does: millions of small tuples, no cycles
    os.sched_setaffinity(0, {1})
    workdir = tempfile.mkdtemp(prefix="npu-bpf-bench.")
    try:
        exe = build_generator(workdir)
        base = statistics.median(untraced(exe, events) for _ in range(repeat))
        runs = [stream_once(exe, events) for _ in range(repeat)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["gen_untraced_ns_per_call"] = base
    med["gen_slowdown_ns_per_call"] = med["gen_ns_per_call"] - base
    from npu_trace.sim import build

    binary = build.ensure_built()
    hal = {
        name: hal_overhead(cfg, 2000, 2.0)
        for name, cfg in (
            ("untraced", None),
            ("stream", BpfConfig(binary=binary)),
            ("aggregate", BpfConfig(binary=binary, aggregate=True, threshold_ns=1_000_000)),
        )
    }
    return {"ringbuf": med, "runs": runs, "hal": hal}


def report(res: Dict[str, Any]) -> None:
    rb = res["ringbuf"]
    print(
        f"ringbuf stream: {rb['events_per_s'] / 1e6:.2f} M decoded events/s delivered, lost {rb['lost']:.0f} "
        f"(all runs: {[r['lost'] for r in res['runs']]}), reader CPU {rb['reader_cpu_ns_per_event']:.0f} ns/event"
    )
    print(
        f"  generator: {rb['gen_untraced_ns_per_call']:.0f} ns/call untraced, {rb['gen_ns_per_call']:.0f} traced "
        f"(+{rb['gen_slowdown_ns_per_call']:.0f} ns per call)"
    )
    base = res["hal"]["untraced"][0]
    for name, (extra, events, cpu) in res["hal"].items():
        print(
            f"HAL uprobes {name:9}: {extra:8.0f} ns/call beyond the injected delay (+{extra - base:.0f} vs "
            f"untraced), {events} events out, reader CPU {cpu:.0f} ns per HAL call"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args()
    res = run(args.events, args.repeat)
    report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
