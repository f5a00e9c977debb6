"""BPF benchmark (figures and ratios only, never asserted): npu-trace's bcc path, beside the tracefs path.

1. Streaming, workload A of benchmarks.ingest: `gen_syscalls N 0` (getpid in a tight loop pinned to CPU 0,
   waiting on stdin so the program can filter its pid) drives `bpf/bench_getpid.bpf.c`: one 32-byte event per
   call into a 32 MiB ring buffer. The reader, pinned to CPU 1, drains it every 2 ms (at once again while
   256 KiB or more are waiting, in reads of 256 KiB) and decodes every record into a TraceEvent, with each of
   the two ring buffer readers of `BpfSource`:
     mmap          the ring buffer read from its own mapping, runs decoded in bulk (npu_trace.bpf.ringbuf)
     bcc callback  bcc's ring_buffer_consume(), one ctypes callback per record (the fallback)
   Reported per reader: delivered decoded events/s (events over the time from the generator's start to the
   last record drained), loss (the rate counts only when zero: when full speed loses, the generator is paced
   down in steps until a pace delivers everything), reader CPU per event (its inverse: the events/s one reader
   core can decode), the generator's time per call and its slowdown against an untraced run.
   Beside them, same workload, same run: npu-trace's tracefs reader and `trace-cmd record` (benchmarks.ingest,
   trace-cmd in its own instance `npubpfbench`); --no-tracefs / --no-anchor skip them.
2. HAL uprobes on the simulator (`steady` scenario), untraced, streaming and aggregate mode: the traced
   program's slowdown per HAL call (median of end - start - injected delay, against untraced; the uprobe and
   uretprobe run in the caller's context, so this is also the kernel side's CPU per call) and the CPU of
   `BpfSource.read()` per poll and per HAL call. In aggregate mode only histograms and calls above 1 ms leave
   the kernel: its CPU per event is the kernel side's plus that reader figure.

Run as root: `python -m benchmarks.bpf [--events N] [--repeat R] [--no-tracefs] [--no-anchor] [--json OUT]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import ingest
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource
from npu_trace.events import Loss

HERE = os.path.dirname(os.path.abspath(__file__))
POLL_S = 0.002
RINGBUF_PAGES = 8192  # 32 MiB
READ_BYTES = 256 << 10  # at most this much of the ring buffer per read: batches of ~6,500 events stay in cache
READERS = {"mmap": True, "bcc callback": False}  # name -> BpfConfig.ringbuf_direct
DEFAULT_RATES = "1.4e6,1.2e6,1e6,0.75e6,0.5e6,0.35e6,0.25e6"
ANCHOR_INSTANCE = "npubpfbench"  # not benchmarks.ingest's "npubench": both benchmarks may run at once
GEN_CPU, READER_CPU = 0, 1
Runs = List[Dict[str, Any]]  # one dict per run (stream_once)
Steps = List[Tuple[float, Runs]]  # (pace, runs at that pace)


def build_generator(workdir: str) -> str:
    exe = os.path.join(workdir, "gen_syscalls")
    subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(HERE, "gen_syscalls.c")], check=True)
    return exe


def gen_figures(out: bytes) -> Dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", out.decode())}


def untraced(exe: str, n: int) -> float:
    out = subprocess.run([exe, str(n), str(GEN_CPU)], check=True, capture_output=True).stdout
    return gen_figures(out)["elapsed_ns"] / n


# ---- 1. streaming ------------------------------------------------------------------------------------------
def stream_once(exe: str, n: int, direct: bool, rate: float = 0.0) -> Dict[str, Any]:
    pace = f" {rate:.0f}" if rate else ""
    gen = subprocess.Popen(
        ["sh", "-c", f"read go; exec {exe} {n} {GEN_CPU}{pace}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    src = BpfSource(BpfConfig(pid=gen.pid, ringbuf_pages=RINGBUF_PAGES, ringbuf_direct=direct))
    try:
        src.start_bench()
        got = drain(src, gen, n)
        got["reader"] = src.readers.get("bench_getpid", "?")
        got["pace"] = rate
        return got
    finally:
        src.close()
        if gen.poll() is None:
            gen.kill()
            gen.wait()


def drain(src: BpfSource, gen: subprocess.Popen[bytes], n: int) -> Dict[str, Any]:
    delivered = lost = 0
    batch: List[Any] = []
    cpu0, t0 = time.process_time(), time.monotonic()
    assert gen.stdin is not None
    gen.stdin.write(b"go\n")
    gen.stdin.close()
    while delivered + lost < n:
        src.read(batch, READ_BYTES)
        losses = list(map(type, batch)).count(Loss)  # counted at C speed: the reader, not this loop, is measured
        delivered += len(batch) - losses
        if losses:
            lost += sum(item.lost for item in batch if isinstance(item, Loss))
        batch.clear()
        if src.pending() >= READ_BYTES:
            continue  # a full batch is waiting: no sleep (as npu-trace's tracefs reader does on full pages)
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
        "gen_rate": n / (figures["elapsed_ns"] / 1e9),
    }


def describe(name: str, r: Dict[str, Any]) -> str:
    pace = f"{r['pace'] / 1e6:g}M/s" if r.get("pace") else "max"
    return (
        f"  {name:<17} pace={pace:<8} delivered={r['delivered']:>9,} lost={r['lost']:>9,} "
        f"{r['events_per_s'] / 1e6:5.2f} M ev/s, reader CPU {r['reader_cpu_ns_per_event']:5.0f} ns/event, "
        f"generator {r['gen_ns_per_call']:5.0f} ns/call  [{r.get('reader', '')}]"
    )


def summarize(runs: Runs, steps: Steps, base: float) -> Dict[str, Any]:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
    med["lossless_runs"] = sum(r["lost"] == 0 for r in runs)
    med["gen_slowdown_ns_per_call"] = med["gen_ns_per_call"] - base
    med["reader_capacity_per_s"] = 1e9 / med["reader_cpu_ns_per_event"] if med["reader_cpu_ns_per_event"] else 0
    med["lossless_events_per_s"], med["lossless_at"] = None, None
    if all(r["lost"] == 0 for r in runs):
        med["lossless_events_per_s"], med["lossless_at"] = med["events_per_s"], "max"
    for pace, got in steps:
        if got and all(r["lost"] == 0 for r in got):
            med["lossless_events_per_s"] = statistics.median(r["events_per_s"] for r in got)
            med["lossless_at"] = f"{pace / 1e6:g}M/s"
            break
    return med


def sweep(exe: str, n: int, direct: bool, name: str, top: float, rates: Sequence[float], repeat: int) -> Steps:
    steps: Steps = []
    for pace in rates:
        if pace >= top:
            continue
        print(f"{name} lost events at full speed: pacing the generator at {pace / 1e6:g}M calls/s", flush=True)
        got: Runs = []
        for _ in range(repeat):
            got.append(stream_once(exe, n, direct, pace))
            print(describe(name, got[-1]), flush=True)
        steps.append((pace, got))
        if all(r["lost"] == 0 for r in got):
            break
    return steps


# ---- the tracefs path (benchmarks.ingest's tools on the same workload) --------------------------------------
class Tracefs:
    """npu-trace's tracefs reader and trace-cmd, through benchmarks.ingest.Bench (its own trace-cmd instance)."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        from npu_trace.ftrace.tracefs import Tracefs as Fs

        self.root = Fs.find().root
        self.state = ingest.GlobalState(self.root)
        self.anchor = not args.no_anchor
        bench_args = argparse.Namespace(
            buffer_kb=args.buffer_kb, gen_cpu=GEN_CPU, reader_cpu=READER_CPU, poll_ms=POLL_S * 1000,
            no_record=True,
        )  # fmt: skip
        self.bench = ingest.Bench(bench_args, tmp, self.root)
        self.bench.build(anchor=self.anchor)

    def run(self, tool: str, n: int) -> Dict[str, Any]:
        saved, ingest.ANCHOR_INSTANCE = ingest.ANCHOR_INSTANCE, ANCHOR_INSTANCE
        try:
            run = self.bench.npu_trace(n, 0) if tool == "npu-trace tracefs" else self.bench.anchor(n, 0)
        finally:
            ingest.ANCHOR_INSTANCE = saved
        return {
            "delivered": run.events,
            "lost": run.lost,
            "events_per_s": run.events / run.wall_s if run.wall_s else 0.0,
            "reader_cpu_ns_per_event": run.reader_cpu_s * 1e9 / max(run.events, 1),
            "gen_ns_per_call": run.gen_elapsed_ns / n,
            "gen_rate": run.rate,
            "reader": "tracefs pages" if tool == "npu-trace tracefs" else "trace-cmd record",
            "pace": 0.0,
        }

    def tools(self) -> List[str]:
        return ["npu-trace tracefs", *(["trace-cmd"] if self.anchor else [])]

    def close(self) -> None:
        for path in self.state.restore():
            print(f"restored {path}")
        ingest.remove_instance(self.root, ANCHOR_INSTANCE)  # only if trace-cmd left it (ours)


def streaming(args: argparse.Namespace, exe: str, tmp: str) -> Dict[str, Any]:
    n, repeat = args.events, args.repeat
    tracefs = None if args.no_tracefs else Tracefs(args, tmp)
    tools = list(READERS) + (tracefs.tools() if tracefs else [])
    runs: Dict[str, Runs] = {t: [] for t in tools}
    base: List[float] = []
    ring_mib = RINGBUF_PAGES * 4 // 1024
    print(f"streaming: syscalls:sys_enter_getpid, N={n:,}, generator on cpu{GEN_CPU}, readers on cpu{READER_CPU}, "
          f"BPF ring buffer {ring_mib} MiB, tracefs {args.buffer_kb} KiB per CPU", flush=True)  # fmt: skip
    try:
        for i in range(repeat):  # interleaved, so that a drift of the host hits every reader alike
            print(f"round {i + 1}/{repeat} at full speed", flush=True)
            base.append(untraced(exe, n))
            print(f"  {'untraced':<17} generator {base[-1]:5.0f} ns/call", flush=True)
            for tool in tools:
                r = stream_once(exe, n, READERS[tool]) if tool in READERS else tracefs.run(tool, n)  # type: ignore
                runs[tool].append(r)
                print(describe(tool, r), flush=True)
    finally:
        if tracefs:
            tracefs.close()
    untraced_ns = statistics.median(base)
    rates = sorted((float(x) for x in args.rates.split(",") if x.strip()), reverse=True)
    steps: Dict[str, Steps] = {t: [] for t in tools}
    for tool, direct in READERS.items():
        if args.no_sweep or (tool == "bcc callback" and not args.sweep_callback):
            continue
        if any(r["lost"] for r in runs[tool]):
            top = statistics.median(r["gen_rate"] for r in runs[tool])
            steps[tool] = sweep(exe, n, direct, tool, top, rates, repeat)
    summary = {t: summarize(runs[t], steps[t], untraced_ns) for t in tools}
    return {
        "n": n, "untraced_ns_per_call": untraced_ns, "summary": summary, "runs": runs,
        "steps": {t: [[p, rs] for p, rs in s] for t, s in steps.items() if s},
    }  # fmt: skip


# ---- 2. HAL uprobes: slowdown per call, aggregate mode -----------------------------------------------------
def hal_overhead(config: Optional[BpfConfig], rate: float, seconds: float) -> Dict[str, float]:
    from npu_trace.sim import start_scenario

    src = BpfSource(config) if config else None
    read_cpu, polls = 0.0, 0
    try:
        if src:
            src.start()
        run = start_scenario("steady", 11, seconds, rate, 2, ensure_loaded=False)
        batch: List[Any] = []
        while run.poll() is None:
            if src:
                cpu0 = time.process_time()
                src.read(batch)
                read_cpu += time.process_time() - cpu0
                polls += 1
            time.sleep(0.01)
        truth = run.wait()
        if src:
            cpu0 = time.process_time()
            src.read(batch)
            read_cpu += time.process_time() - cpu0
            polls += 1
    finally:
        if src:
            src.close()
    hal = [a for a in truth["actions"] if a["func"].startswith("hal")]
    extra = [a["end_ns"] - a["start_ns"] - a["delay_ns"] for a in hal]
    return {
        "calls": len(hal),
        "extra_ns_median": statistics.median(extra),
        "extra_ns_mean": statistics.mean(extra),
        "events": sum(1 for i in batch if not isinstance(i, Loss) and i.pid == run.pid),
        "lost": sum(i.lost for i in batch if isinstance(i, Loss)),
        "polls": polls,
        "read_cpu_us_per_poll": read_cpu * 1e6 / max(polls, 1),
        "read_cpu_ns_per_call": read_cpu * 1e9 / max(len(hal), 1),
    }


def hal_modes(repeat: int, rate: float, seconds: float) -> Dict[str, Any]:
    from npu_trace.sim import build

    binary = build.ensure_built()
    modes = {
        "untraced": None,
        "stream": BpfConfig(binary=binary),
        "aggregate": BpfConfig(binary=binary, aggregate=True, threshold_ns=1_000_000),
    }
    runs: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
    for _ in range(repeat):
        for mode, cfg in modes.items():
            runs[mode].append(hal_overhead(cfg, rate, seconds))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
    return {"rate": rate, "seconds": seconds, "median": med, "runs": runs}


# ---- report ------------------------------------------------------------------------------------------------
def fmt_rate(v: Optional[float]) -> str:
    return f"{v / 1e6:.2f} M/s" if v else "none"


def report_streaming(st: Dict[str, Any]) -> None:
    summary = st["summary"]
    print()
    print(f"untraced generator: {st['untraced_ns_per_call']:.0f} ns/call (median)")
    head = ("reader", "lossless ev/s", "(at pace)", "full-speed ev/s", "lost (median)", "reader CPU ns/ev",
            "ev/s per reader core", "gen ns/call", "slowdown/call")  # fmt: skip
    rows = [head]
    for tool, s in summary.items():
        rows.append((
            tool, fmt_rate(s["lossless_events_per_s"]), s["lossless_at"] or "-", fmt_rate(s["events_per_s"]),
            f"{s['lost']:,.0f}", f"{s['reader_cpu_ns_per_event']:.0f}", fmt_rate(s["reader_capacity_per_s"]),
            f"{s['gen_ns_per_call']:.0f}", f"+{s['gen_slowdown_ns_per_call']:.0f} ns",
        ))  # fmt: skip
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    for i, row in enumerate(rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    mm = summary["mmap"]
    ratios = []
    for other in summary:
        if other == "mmap":
            continue
        o = summary[other]
        parts = [f"reader CPU per event {mm['reader_cpu_ns_per_event'] / o['reader_cpu_ns_per_event']:.2f}x"]
        if mm["lossless_events_per_s"] and o["lossless_events_per_s"]:
            parts.append(f"lossless ev/s {mm['lossless_events_per_s'] / o['lossless_events_per_s']:.2f}x")
        parts.append(f"full-speed ev/s {mm['events_per_s'] / o['events_per_s']:.2f}x")
        if o["gen_slowdown_ns_per_call"] > 0:
            parts.append(f"slowdown per call {mm['gen_slowdown_ns_per_call'] / o['gen_slowdown_ns_per_call']:.2f}x")
        ratios.append(f"  mmap / {other}: " + ", ".join(parts))
    if "trace-cmd" in summary:
        print("(trace-cmd's reader CPU: its recorders splicing pages to a file; it decodes nothing while recording)")
    print("ratios:")
    print("\n".join(ratios))


def report_hal(res: Dict[str, Any]) -> None:
    hal = res["median"]
    base = hal["untraced"]
    print(f"HAL uprobes on the simulator (steady, {res['rate']:g} calls/s for {res['seconds']:g} s, polled every "
          f"10 ms, medians of {len(res['runs']['untraced'])} runs):")  # fmt: skip
    for mode, h in hal.items():
        kernel = h["extra_ns_median"] - base["extra_ns_median"]
        line = f"  {mode:9}: {h['extra_ns_median']:6.0f} ns/call beyond the injected delay (+{kernel:.0f} vs untraced)"
        if mode != "untraced":
            line += (
                f", {h['events']:.0f} events out, lost {h['lost']:.0f}; BpfSource.read() CPU "
                f"{h['read_cpu_us_per_poll']:.0f} us per poll = {h['read_cpu_ns_per_call']:.0f} ns per HAL call"
            )
        print(line)
    agg = hal["aggregate"]
    kernel = agg["extra_ns_median"] - base["extra_ns_median"]
    print(
        f"aggregate mode CPU per HAL call: {kernel + agg['read_cpu_ns_per_call']:.0f} ns = {kernel:.0f} in the traced "
        f"program's context (uprobe + uretprobe + histogram: its slowdown per call) + "
        f"{agg['read_cpu_ns_per_call']:.0f} in the reader (a fixed cost per poll, spread over the calls)"
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=5_000_000, help="getpid calls per streaming run")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; medians are reported")
    p.add_argument("--rates", default=DEFAULT_RATES, help="paces (calls/s) tried when full speed loses events")
    p.add_argument("--no-sweep", action="store_true", help="do not pace the generator down when full speed loses")
    p.add_argument("--sweep-callback", action="store_true", help="pace down for the bcc callback reader too")
    p.add_argument("--buffer-kb", type=int, default=8192, help="tracefs buffer per CPU (npu-trace and trace-cmd)")
    p.add_argument("--no-tracefs", action="store_true", help="skip the tracefs path (npu-trace and trace-cmd)")
    p.add_argument("--no-anchor", action="store_true", help="skip trace-cmd")
    p.add_argument("--no-hal", action="store_true", help="skip the HAL uprobe figures")
    p.add_argument("--hal-rate", type=float, default=2000, help="HAL calls/s of the simulator's steady scenario")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("bench: needs root (BPF, tracefs)")
        return 2
    from npu_trace.process import tune_gc

    tune_gc()  # as the CLI does: millions of small tuples, no cycles
    os.sched_setaffinity(0, {READER_CPU})
    res: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="npu-bpf-bench.") as tmp:
        exe = build_generator(tmp)
        res["streaming"] = streaming(args, exe, tmp)
    if not args.no_hal:
        res["hal"] = hal_modes(args.repeat, args.hal_rate, 2.0)
    report_streaming(res["streaming"])
    if "hal" in res:
        report_hal(res["hal"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
