"""Generated recordings: millions of valid simulator events, written as `npu-trace record` writes them, and their
ground truth. No kernel, no root: for measuring `check` and replay at sizes the simulator cannot record here
(its uprobe events top out near 0.1 M events/s per CPU).

What it writes is what a live recording of the simulator on a host-like executor would hold:
- the plan: `npu_trace.sim.scenarios.plan_stream` (the planner's scenario, e.g. `mixed`: calls with entry and
  return, tasks submitted and completed, IRQs, allocations, frees and failures, timeouts, heartbeat lost, ECC
  reports, a hot reset's steps), placed on the executor's threads (`Host`, host-like by default) and planned
  one second at a time, so millions of events never sit in memory at once; seeded: the same seed gives the same
  bytes;
- where and when each action runs: `npu_trace.sim.timing` (each thread's events on its CPU, threads moved every
  2 ms, a task's completion on another CPU than its submit, some calls returning on another CPU);
- the pages: this kernel's own `format` files of the simulator's uprobe events and its `header_page`
  (tests/data/kernel-6.18.44-x86_64), laid out by `npu_trace.ftrace.encode.PageEncoder` as the ring buffer
  lays them out;
- the recording: a simulated reader drains every CPU every `read_ms` (5 ms) of trace time, as the live source
  does: each read's pages (every event stamped before the read began), then its `Mark` (every CPU caught up,
  no channels), kept as `sinks.npt_sink.Recorder` keeps them (every read with pages, a quiet one every 100 ms),
  through `RecordingWriter` (1 MiB zstd chunks, and one at least every second of trace time); no loss; the
  header holds the formats, `trace_cpus`, the profile `sim`, and fixed host, clock and process names;
- the truth (`OUT.truth.json` beside it from the command line; `Generated.expectations` from code): what the
  detectors must find (`npu_trace.sim.synth.truth_expectations`), and the events written, by name.

Run: .venv/bin/python -m benchmarks.gen_recording OUT.npt [--events N | --duration S] [--rate CALLS/S]
     [--devices 8] [--seed 1] [--scenario mixed] [--cpus 2]
From code: generate(path, Spec(...)) -> Generated.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import npu_trace
from npu_trace.device import hal
from npu_trace.ftrace.encode import PageEncoder, Row
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format, parse_header_page
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.recording.writer import RecordingWriter
from npu_trace.sim.scenarios import NS, Action, plan_stream
from npu_trace.sim.synth import ProbeRow, TruthTally, probe_rows
from npu_trace.sim.threads import HOST_LIKE, Host
from npu_trace.sim.timing import HostTiming
from npu_trace.sinks.batch_writer import MARK_EVERY_NS

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_DIR = os.path.join(os.path.dirname(HERE), "tests", "data", "kernel-6.18.44-x86_64")
EVENTS_PER_CALL = 1.41  # trace events per planned call in the mixed scenario (HAL calls make two), measured
T0_NS = 1_000 * NS  # the executor's start on the trace clock (1000 s after boot)
REALTIME_NS = 1_767_225_600 * NS  # the clock anchor's wall time: 2026-01-01, fixed (no wall clock is read)
FLUSH_NS = NS  # a chunk is written once its first page is this old in trace time (the writer's flush interval)
PID = 4242  # the executor's main thread; thread i is PID + i
COMM = "npu-sim"


@dataclass(frozen=True)
class Spec:
    """What to generate; `duration_s` x `rate` calls (about EVENTS_PER_CALL events each in `mixed`)."""

    scenario: str = "mixed"
    seed: int = 1
    duration_s: float = 15.0
    rate: float = 20_000.0
    devices: int = 8
    cpus: Tuple[int, ...] = (0, 1)
    host: Host = HOST_LIKE
    read_ms: float = 5.0


@dataclass
class Generated:
    """What was written: the file, its counts, and what the detectors must find in it."""

    path: str
    spec: Spec
    events: int = 0
    by_event: Counter[str] = field(default_factory=Counter)
    actions: int = 0
    pages: int = 0
    chunks: int = 0
    reads: int = 0
    bytes: int = 0
    seconds: float = 0.0
    expectations: Dict[str, Any] = field(default_factory=dict)

    def truth(self) -> Dict[str, Any]:
        """The JSON truth file's content (`expectations_from_json` reads its expectations back)."""
        counts = {"events": self.events, "by_event": dict(sorted(self.by_event.items())), "actions": self.actions,
                  "pages": self.pages, "chunks": self.chunks, "bytes": self.bytes}  # fmt: skip
        return {"spec": asdict(self.spec), **counts, "generation_s": round(self.seconds, 3),
                "expectations": expectations_to_json(self.expectations)}  # fmt: skip


# ---- this kernel's formats ----------------------------------------------------------------------------------
def kernel_formats() -> Tuple[Dict[str, EventFormat], Dict[str, str], str]:
    """(event name -> format, "system:name" -> format text, header_page text) of the captured kernel: the
    simulator's ascend:* events and ftrace:print (which every session decodes). The simulator's probes must be
    the captured ones, field by field."""
    texts: Dict[str, str] = {}
    formats: Dict[str, EventFormat] = {}
    for system in ("ascend", "ftrace"):
        for path in sorted(glob.glob(os.path.join(KERNEL_DIR, "events", system, "*", "format"))):
            with open(path) as f:
                text = f.read()
            fmt = parse_format(text, system)
            texts[fmt.full_name], formats[fmt.name] = text, fmt
    for func in hal.FUNCS:
        _same_fields(formats, func.event, ("__probe_ip", *func.field_names))
        if func.hal:
            _same_fields(formats, func.ret_event, ("__probe_func", "__probe_ret_ip", "ret"))
    with open(os.path.join(KERNEL_DIR, "header_page")) as f:
        return formats, texts, f.read()


def _same_fields(formats: Dict[str, EventFormat], name: str, want: Sequence[str]) -> None:
    fmt = formats.get(name)
    if fmt is None or fmt.field_names != tuple(want):
        got = fmt.field_names if fmt is not None else "no format"
        raise ValueError(f"captured format of {name} does not match the simulator's probe: {got} != {tuple(want)}")


def header(spec: Spec, texts: Dict[str, str], header_page: str, page_size: int) -> Dict[str, Any]:
    """The recording header, as build_header writes one, with fixed values where it reads the host."""
    with open(os.path.join(KERNEL_DIR, "pages.json")) as f:
        captured = json.load(f)
    return {
        "tool_version": npu_trace.__version__, "host": "npu-trace-generated", "kernel": captured["kernel"],
        "machine": captured["machine"], "cpus": max(spec.cpus) + 1, "byteorder": "little", "clock": "mono",
        "clock_anchor": {"mono_ns": T0_NS, "realtime_ns": REALTIME_NS}, "profile": "sim",
        "events": list(hal.event_names()), "trace_cpus": list(spec.cpus),
        "formats": [{"system": n.split(":")[0], "name": n.split(":")[1], "text": t} for n, t in texts.items()],
        "header_page": header_page, "page_size": page_size,
        "created_by": f"npu-trace {npu_trace.__version__} (benchmarks.gen_recording: the simulator's plan "
                      "replayed on a host-like executor, pages encoded as the kernel lays them out)",
        "extra": {"comms": {str(PID + t): COMM for t in range(spec.host.threads)}, "generated": asdict(spec)},
    }  # fmt: skip


# ---- the simulated reader and recorder ----------------------------------------------------------------------
class Reader:
    """Every CPU's events not read yet; `read(read_ns)` hands over those stamped before `read_ns` as the live
    source would: one Batch of pages (CPU by CPU, in time order) with its Mark (every CPU caught up)."""

    def __init__(self, spec: Spec, encoder: PageEncoder, formats: Dict[str, EventFormat]):
        self.cpus = tuple(spec.cpus)
        self.encoder = encoder
        self.formats = formats
        self.pending: Dict[int, List[Tuple[int, int, EventFormat, Tuple[Any, ...]]]] = {c: [] for c in self.cpus}
        self.reads = 0

    def add(self, rows: Sequence[ProbeRow]) -> None:
        for ts, cpu, tid, name, values in rows:
            self.pending[cpu].append((ts, tid, self.formats[name], values))

    def waiting(self) -> int:
        return sum(map(len, self.pending.values()))

    def read(self, read_ns: int) -> Batch:
        pages = [(cpu, page) for cpu in self.cpus for page in self.encoder.pages(self._take(cpu, read_ns))]
        self.reads += 1
        return Batch(pages, [], Mark(read_ns, self.cpus, None))

    def _take(self, cpu: int, read_ns: int) -> List[Row]:
        rows = self.pending[cpu]
        rows.sort(key=_ts)  # stable: one thread's entry before its return when both have the same time
        cut = next((i for i, row in enumerate(rows) if row[0] >= read_ns), len(rows))
        self.pending[cpu] = rows[cut:]
        return rows[:cut]


class Keeper:
    """The recorder's part: each read's pages and mark kept as `sinks.npt_sink.Recorder` keeps them, chunks
    flushed by trace time (at least one every FLUSH_NS)."""

    def __init__(self, writer: RecordingWriter) -> None:
        self.writer = writer
        self.mark_ns = 0
        self.since: Optional[int] = None  # trace time of the oldest read queued in the writer

    def __call__(self, batch: Batch) -> None:
        writer, chunks, mark = self.writer, self.writer.chunks, batch.mark
        assert mark is not None
        for cpu, page in batch.pages:
            writer.add_page(cpu, page)
        if writer.chunks != chunks:  # a full chunk went out: what is queued now came with this read
            self.since = mark.read_ns
        if batch.pages or mark.read_ns - self.mark_ns >= MARK_EVERY_NS:
            writer.add_mark(mark)
            self.mark_ns = mark.read_ns
            self.since = mark.read_ns if self.since is None else self.since
        if self.since is not None and mark.read_ns - self.since >= FLUSH_NS:
            writer.flush()
            self.since = None


def _ts(row: Tuple[Any, ...]) -> int:
    return int(row[0])


# ---- the generator ------------------------------------------------------------------------------------------
def generate(path: str, spec: Spec = Spec(), overwrite: bool = False) -> Generated:
    """Write the recording `path` (see the module docstring); returns its counts and expectations."""
    t0 = time.monotonic()
    formats, texts, header_page = kernel_formats()
    page_header = parse_header_page(header_page)
    out = Generated(path, spec)
    with RecordingWriter(path, header(spec, texts, header_page, page_header.page_size), overwrite=overwrite) as w:
        keep = Keeper(w)
        run = Run(spec, formats, page_header, out)
        for batch in run.batches():
            keep(batch)
    out.pages, out.chunks, out.reads = w.pages, w.chunks, run.reader.reads
    out.bytes, out.seconds = os.path.getsize(path), time.monotonic() - t0
    out.expectations = run.tally.expectations()
    return out


class Run:
    """The simulated live session of one plan: `batches()` yields every read, as the live source makes them
    (tests feed them to live consumers: the flight recorder); `t0_ns`: the executor's start on the trace clock."""

    def __init__(self, spec: Spec, formats: Dict[str, EventFormat], page_header: PageHeader,
                 out: Optional[Generated] = None, t0_ns: int = T0_NS) -> None:  # fmt: skip
        self.spec, self.t0_ns = spec, t0_ns
        self.out = out if out is not None else Generated("", spec)
        self.tally = TruthTally()
        self.timing = HostTiming(spec.host, spec.cpus, t0_ns, PID)
        self.reader = Reader(spec, PageEncoder(page_header, "little"), formats)
        self.end_ns = t0_ns  # the last read's time, once batches() is done

    def batches(self) -> Iterator[Batch]:
        spec, reader, t0 = self.spec, self.reader, self.t0_ns
        step = int(spec.read_ms * 1_000_000)
        next_read = t0 + step
        for a in plan_stream(spec.scenario, spec.seed, spec.duration_s, spec.rate, spec.devices, spec.host):
            while t0 + a.t_ns >= next_read:  # every event stamped before next_read is known
                yield reader.read(next_read)
                next_read += step
            self._run(a)
        while reader.waiting():
            yield reader.read(next_read)
            next_read += step
        yield reader.read(next_read)
        self.end_ns = next_read

    def _run(self, a: Action) -> None:
        rows = probe_rows(a, self.timing.run(a))
        self.reader.add(rows)
        self.out.actions += 1
        self.out.events += len(rows)
        self.out.by_event.update(row[3] for row in rows)
        self.tally.add_action(a)


# ---- the truth as JSON --------------------------------------------------------------------------------------
def expectations_to_json(exp: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "spikes": sorted([dev, op, n] for (dev, op), n in exp["spikes"].items()),
        "alloc_fail": sorted([dev, n] for dev, n in exp["alloc_fail"].items()),
        "timeouts": sorted([dev, op, n] for (dev, op), n in exp["timeouts"].items()),
        "resets": {str(dev): steps for dev, steps in sorted(exp["resets"].items())},
        "precursor": {str(dev): p for dev, p in sorted(exp["precursor"].items())},
        "leaks": {str(dev): list(v) for dev, v in sorted(exp["leaks"].items())},
    }


def expectations_from_json(data: Dict[str, Any]) -> Dict[str, Any]:
    """The inverse of expectations_to_json: the form truth_expectations returns."""
    return {
        "spikes": Counter({(dev, op): n for dev, op, n in data["spikes"]}),
        "alloc_fail": Counter({dev: n for dev, n in data["alloc_fail"]}),
        "timeouts": Counter({(dev, op): n for dev, op, n in data["timeouts"]}),
        "resets": {int(dev): steps for dev, steps in data["resets"].items()},
        "precursor": {int(dev): p for dev, p in data["precursor"].items()},
        "leaks": {int(dev): tuple(v) for dev, v in data["leaks"].items()},
    }


def duration_for(events: float, rate: float) -> float:
    """The run time (s) that gives about `events` events at `rate` calls/s (the mixed scenario)."""
    return round(events / EVENTS_PER_CALL / rate, 3)


def truth_path(path: str) -> str:
    """run.npt -> run.truth.json"""
    return os.path.splitext(path)[0] + ".truth.json"


# ---- command line -------------------------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]]) -> Tuple[argparse.Namespace, Spec]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gen_recording", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the recording to write (.npt); its truth goes to OUT.truth.json")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--events", type=float, help="about this many events (sets the duration from the rate)")
    size.add_argument("--duration", type=float, default=15.0, help="seconds of trace time (default 15)")
    p.add_argument("--rate", type=float, default=20_000.0, help="background calls/s, every device (<= 200000)")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scenario", default="mixed")
    p.add_argument("--cpus", type=int, default=2, help="CPUs the executor's threads run on (0..N-1)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    args = p.parse_args(argv)
    duration = duration_for(args.events, args.rate) if args.events else args.duration
    spec = Spec(args.scenario, args.seed, round(duration, 3), args.rate, args.devices, tuple(range(args.cpus)))
    return args, spec


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, spec = parse_args(argv)
    got = generate(args.out, spec, overwrite=args.overwrite)
    with open(truth_path(args.out), "w") as f:
        json.dump(got.truth(), f, indent=1)
    print(f"gen_recording: {got.events:,} events ({got.actions:,} actions, {spec.scenario}, {spec.devices} devices, "
          f"{spec.duration_s:g} s at {spec.rate:g} calls/s, {len(spec.cpus)} CPUs) in {got.pages:,} pages, "
          f"{got.chunks:,} chunks, {got.bytes:,} bytes; generated in {got.seconds:.1f} s "
          f"({got.events / got.seconds / 1e3:.0f} k events/s); truth: {truth_path(args.out)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
