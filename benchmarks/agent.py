"""The agent's costs (root; `scripts/bench agent`), figures and ratios only, each beside its anchor:

1. Scrape: rendering /metrics for 8 devices x 20 operations (every family the agent exports), in ms per scrape
   and bytes, beside prometheus-client rendering the same latency series kept in its own Histogram objects
   (the anchor: what any exporter of these series pays).
2. Steady load: the simulator's steady scenario at `--rate` calls/s for `--duration` seconds (180 s; `--long`:
   30 minutes) while `npu-trace agent` traces it and Prometheus-style scrapes come every second: the agent's
   RSS sampled every 10 s (first, last, max, and the growth over the second half: flat when memory is
   bounded), its CPU per analysed event, and the traced program's slowdown: the mean duration of the
   simulator's HAL calls (no delay injected) traced against the same scenario untraced, run just before (the
   anchor).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional, Sequence

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from benchmarks.common import log, median
from npu_trace.detectors import Analysis
from npu_trace.device.profiles import PROFILES
from npu_trace.events import NpuEvent
from npu_trace.sim.scenarios import MAX_ACTIONS
from npu_trace.sinks.exposition import registry_of, render
from npu_trace.sinks.metrics import LATENCY_BUCKETS_S, MetricsState, SnapshotCollector

DEVICES, OPS, SAMPLES = 8, 20, 2000
CLI = [sys.executable, "-m", "npu_trace"]


def scrape_bench(runs: int = 50) -> Dict[str, Any]:
    rng = random.Random(1)
    analysis = Analysis(PROFILES["sim"])
    anchor_reg = CollectorRegistry(auto_describe=False)
    anchor = Histogram("anchor_op_latency_seconds", "anchor", ["id", "op"], buckets=LATENCY_BUCKETS_S,
                       registry=anchor_reg)  # fmt: skip
    events = []
    for dev in range(DEVICES):
        for op in range(OPS):
            for i in range(SAMPLES):
                lat = int(rng.lognormvariate(10, 1.2))
                events.append(NpuEvent(i * 1000, "call", dev, f"halOp{op:02d}", 1, 0, {"latency_ns": lat}))
                anchor.labels(str(dev), f"halOp{op:02d}").observe(lat / 1e9)
    analysis.feed_events(events)
    state = MetricsState()
    state.publish(analysis, {"tracefs": 0})
    registry = registry_of([SnapshotCollector(state)])
    ours = _time(lambda: render(registry), runs)
    theirs = _time(lambda: generate_latest(anchor_reg), runs)
    publish = _time(lambda: state.publish(analysis, {"tracefs": 0}), runs)
    size = len(render(registry))
    log(f"scrape: {DEVICES} devices x {OPS} ops: {ours * 1e3:.2f} ms per /metrics ({size} bytes), anchor "
        f"prometheus-client Histograms {theirs * 1e3:.2f} ms ({ours / theirs:.2f}x); snapshot {publish * 1e3:.2f} ms")
    return {"scrape_ms": ours * 1e3, "anchor_ms": theirs * 1e3, "bytes": size, "snapshot_ms": publish * 1e3}


def _time(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return median(times)


def call_durations(truth: Dict[str, Any]) -> float:
    """Mean duration (ns) of the HAL calls without injected delay."""
    d = [a["end_ns"] - a["start_ns"] for a in truth["actions"] if a.get("delay_ns", 0) == 0 and a["kind"] == "call"]
    return sum(d) / len(d) if d else 0.0


def proc_figures(pid: int) -> Dict[str, float]:
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024  # type: ignore[union-attr]
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"rss": rss, "cpu_s": (int(fields[11]) + int(fields[12])) / ticks}


def events_analysed(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(int(float(m)) for m in re.findall(r'^npu_trace_events_total\{kind="[^"]+"\} (\S+)$', text, re.M))


def steady_bench(duration: float, rate: float) -> Dict[str, Any]:
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs

    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    try:
        base = sim.run_scenario("steady", 1, min(duration, 30.0), rate, 2, ensure_loaded=False)
        return _traced(duration, rate, call_durations(base))
    finally:
        if not was_loaded:
            sim.unload(fs)


def _traced(duration: float, rate: float, untraced_ns: float) -> Dict[str, Any]:
    from npu_trace import sim

    with tempfile.TemporaryDirectory() as tmp:
        err = open(os.path.join(tmp, "agent.log"), "w")  # noqa: SIM115
        agent = subprocess.Popen([*CLI, "agent", "--metrics-addr", "127.0.0.1:0", "--channels", "none"],
                                 stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        port = _port(os.path.join(tmp, "agent.log"), agent)
        run = sim.start_scenario("steady", 2, duration, rate, 2, ensure_loaded=False)
        samples: List[Dict[str, float]] = []
        start = time.monotonic()
        while run.poll() is None:
            events_analysed(port)  # a scrape a second, as Prometheus would
            if not samples or time.monotonic() - start >= 10 * len(samples):
                samples.append({**proc_figures(agent.pid), "t_s": time.monotonic() - start})
            time.sleep(1.0)
        truth = run.wait()
        time.sleep(2.0)  # the last reads analysed
        events, last = events_analysed(port), {**proc_figures(agent.pid), "t_s": time.monotonic() - start}
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
        err.close()
    traced_ns = call_durations(truth)
    rss = [s["rss"] for s in samples] + [last["rss"]]
    cpu = last["cpu_s"] - samples[0]["cpu_s"]
    out = {"duration_s": duration, "rate": rate, "events": events, "rss_first_mib": rss[0] / 2**20,
           "rss_last_mib": rss[-1] / 2**20, "rss_max_mib": max(rss) / 2**20,
           "rss_growth_second_half_mib": second_half_growth([*samples, last]) / 2**20,
           "cpu_us_per_event": cpu / events * 1e6 if events else None, "call_ns_untraced": untraced_ns,
           "call_ns_traced": traced_ns, "slowdown": traced_ns / untraced_ns if untraced_ns else None}  # fmt: skip
    log(f"steady {duration:g} s at {rate:g} calls/s: {events} events analysed; RSS {out['rss_first_mib']:.1f} -> "
        f"{out['rss_last_mib']:.1f} MiB (max {out['rss_max_mib']:.1f}; {out['rss_growth_second_half_mib']:+.1f} MiB "
        f"over the second half); CPU {out['cpu_us_per_event'] or 0:.1f} us per event; HAL call "
        f"{untraced_ns / 1e3:.1f} us untraced (anchor) -> {traced_ns / 1e3:.1f} us traced "
        f"({out['slowdown'] or 0:.2f}x)")  # fmt: skip
    return out


def second_half_growth(samples: List[Dict[str, float]]) -> float:
    """RSS growth (bytes) from the first sample of the run's second half to the last: what a warm-up does
    not explain (the first samples are taken before the load has reached the agent)."""
    half = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] / 2]
    return half[-1]["rss"] - half[0]["rss"]


def _port(path: str, agent: subprocess.Popen[bytes]) -> int:
    while True:
        with open(path) as f:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", f.read())
        if m:
            return int(m.group(1))
        if agent.poll() is not None:
            with open(path) as f:
                raise SystemExit(f"the agent exited: {f.read()}")
        time.sleep(0.1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/bench agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=180.0, help="steady load, seconds (default 180)")
    p.add_argument("--long", action="store_true", help="30 minutes of steady load")
    p.add_argument("--rate", type=float, default=2000.0, help="HAL calls per second (default 2000)")
    p.add_argument("--scrape-only", action="store_true", help="only the scrape figures (no root needed)")
    p.add_argument("--json", metavar="OUT", help="write the figures to OUT")
    args = p.parse_args(argv)
    duration = 1800.0 if args.long else args.duration
    if not args.scrape_only and duration * args.rate > MAX_ACTIONS:  # the executor's plan limit
        p.error(f"{duration:g} s at {args.rate:g} calls/s is over the simulator's {MAX_ACTIONS} calls: lower --rate "
                f"(at most {MAX_ACTIONS / duration:g})")  # fmt: skip
    figures: Dict[str, Any] = {"scrape": scrape_bench()}
    if not args.scrape_only:
        figures["steady"] = steady_bench(duration, args.rate)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
