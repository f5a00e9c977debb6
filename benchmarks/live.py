"""Live benchmark: analysis at kernel speed, on cheap tracepoints, against `trace-cmd record` in the same run.

The workload (benchmarks/tasks.py, gen_tasks.c, built into a temporary folder): two threads, one on each CPU,
make calls (sched_get_priority_max: an entry and a return), submit tasks (tee) and complete each on the other
CPU (sync_file_range), paced at `--rate` trace events/s (default 1.2 M) for `--events` events (default 3.6 M);
the benchmark profile `benchmarks.tasks.PROFILE` maps them to calls, submits and completions. Traced by:

  stream decode   the live decoding path in-process: the live source and the columnar timeline (the page
                  walker, the ordered merge, blocks of columns taken as a live consumer takes them,
                  `LiveBlocks`: what `live`, the TUI's worker and the agent use), counted like
                  benchmarks.ingest (the reader pinned to --reader-cpu); "decode to objects": the reference
                  timeline (a TraceEvent per record, then the merge), for comparison
  live analysis   the same columnar path, each block handed to the analysis consumer (`analysis_consumer`:
                  `Analysis.feed_block`, the detectors of check and the TUI)
  TUI worker      the TUI's real worker process (started by FeedClient, no UI; its updates acknowledged at once)
                  running a live source on the workload (benchmarks.live_sources.WorkloadSource)
  TUI replay      the same worker fed a recording of the workload (made by npu-trace record in this run),
                  replayed at --rate by the clock (PacedReplay) for events / rate seconds, then drained as fast as
                  the worker takes it (for as long again and 5 s more at most: what is left is reported)
  trace-cmd       `trace-cmd record` of the same workload (its own instance, readers on --reader-cpu)

Per path, medians of --repeat runs: offered ev/s (the workload's own rate; the replay's pace), the workload's
events seen, lost (kernel counters), backlog (events still to read or analyse when the workload ended, or the
replay's offering time was over, and how long they then took: drain), analysed ev/s (events handled over the
time from the workload's start to the last one handled), reader CPU per event;
then the ratios to trace-cmd. The analysis paths' counts by kind are compared with the workload's truth.
Figures only, never pass/fail. The machine is a busy 2-vCPU VM: the workload's second thread shares its CPU
with the reader, as on a real host.

Run as root: scripts/bench live [--events N] [--rate R] [--repeat R] [--no-anchor] [--no-tui] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import time
from collections import Counter
from operator import itemgetter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks import tasks
from benchmarks.common import ANCHOR, BenchError, Run, add_common_options, cpu_self, log, median
from benchmarks.ingest import Bench, run_bench
from benchmarks.tasks import EVENTS, PROFILE, Truth
from npu_trace.pipeline.blocktimeline import TAKE_EVERY_S
from npu_trace.pipeline.pump import POLL_INTERVAL_S

DECODE, OBJECTS, ANALYSE = "stream decode", "decode to objects", "live analysis"
WORKER, REPLAY = "TUI worker", "TUI replay"
TARGET_RATE = 1_000_000.0
_pid_of = itemgetter(2)  # TraceEvent.pid (a Loss has its kind, a str, there)
Figures = Dict[str, Any]


# ---- the analysis consumer: the one place to switch to the fast path ----------------------------------------
def analysis_consumer(profile: Any) -> Any:
    """What the live analysis feeds: `feed_block(block, now)` with the columnar timeline's blocks, `finish()` ->
    the report ({"summary": {"events": {"by_kind": ...}}, ...}): the detectors' `Analysis`."""
    from npu_trace.detectors.analysis import Analysis

    return Analysis(profile)


# ---- in-process: the live source and the timeline (and the analysis) ----------------------------------------
def inprocess(bench: Bench, exe: str, analyse: bool = False, objects: bool = False) -> Figures:
    """The workload traced by LiveTrace and the columnar timeline in this process (the reader), each block's
    rows counted by process (and analysed when `analyse`; with `objects`, the reference timeline instead: a
    TraceEvent per record)."""
    import numpy as np

    from npu_trace.pipeline import Batch, pump
    from npu_trace.pipeline.blocktimeline import LiveBlocks
    from npu_trace.sources.live_trace import LiveTrace
    from npu_trace.sources.tracefs_source import TracefsSession

    args = bench.args
    consumer = analysis_consumer(PROFILE) if analyse else None
    pids: Counter[Any] = Counter()
    session = TracefsSession(list(EVENTS), buffer_kb=args.buffer_kb, tag="benchlive", companions=())
    with LiveTrace(session) as source:
        if objects:  # the tests' reference timeline (tests/reference/timeline.py): an object per record
            from tests.reference.pages import CpuDecoders
            from tests.reference.timeline import Timeline

            assert session.header is not None and session.decoders is not None
            timeline = Timeline(CpuDecoders(session.header, session.decoders, ledger=session.ledger),
                                ledger=session.ledger, cpus=session.cpus)  # fmt: skip

            def sink(batch: Batch) -> None:
                pids.update(map(_pid_of, timeline.push(batch)))
        else:
            live = LiveBlocks(source.block_timeline(), time.monotonic)

            def sink(batch: Batch) -> None:
                block = live.push(batch)
                if block is None:
                    return
                who, count = np.unique(block.pid, return_counts=True)
                pids.update(dict(zip(who.tolist(), count.tolist())))
                if consumer is not None:
                    consumer.feed_block(block, live.timeline.now)

        t0, c0 = time.monotonic(), cpu_self()
        proc = subprocess.Popen(tasks.argv(exe, args.events, args.rate), stdout=subprocess.PIPE)
        end = _Ending(proc, lambda: sum(pids.values()))
        pump(source, sink, until=end, poll_s=args.poll_ms / 1000.0)
        done, cpu = time.monotonic(), cpu_self() - c0
        lost = session.ledger.total
    truth = _truth(proc)
    fig = _figures(truth, sum(pids[t] for t in truth.tids), lost, t0, end, done, cpu, sum(pids.values()))
    fig["other_events"] = sum(pids.values()) - fig["events"]
    if consumer is not None:
        summary = consumer.finish()["summary"]
        fig["by_kind"] = _kinds(summary["events"]["by_kind"])
        fig["unpaired"] = {**summary["pairing"], "unmatched_completes": summary["latency"]["unmatched_completes"]}
    return fig


class _Ending:
    """`until` for the pump: the workload has ended; notes when, and how much had been handled by then."""

    def __init__(self, proc: subprocess.Popen[bytes], handled: Callable[[], int]) -> None:
        self.proc, self.handled = proc, handled
        self.at: Optional[float] = None
        self.count = 0

    def __call__(self) -> bool:
        if self.proc.poll() is None:
            return False
        if self.at is None:
            self.at, self.count = time.monotonic(), self.handled()
        return True


def _truth(proc: subprocess.Popen[bytes]) -> Truth:
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    if proc.wait():
        raise BenchError(f"gen_tasks exited with {proc.returncode}")
    return tasks.parse(out)


def _figures(
    truth: Truth, seen: int, lost: int, t0: float, end: Any, done: float, cpu: float, handled: int
) -> Figures:
    """The figures of one live path: `seen` of the workload's events, `handled` items in all (`end`: an _Ending,
    or anything with .at and .count: when the workload ended and how many items had been handled by then)."""
    at = end.at if end.at is not None else done
    return {"offered": truth.rate, "workload_events": truth.events, "events": seen, "lost": lost,
            "backlog": max(0, handled - end.count), "drain_s": done - at, "analysed_rate": seen / (done - t0),
            "reader_cpu_ns": cpu / seen * 1e9 if seen else 0.0, "truth": truth.by_kind(),
            "waits": truth.waits}  # fmt: skip


def _kinds(by_kind: Dict[str, int]) -> Dict[str, int]:
    return {k: int(by_kind.get(k, 0)) for k in ("call", "submit", "complete")}


# ---- the TUI's worker process -----------------------------------------------------------------------------
def worker(spec: Any, timeout_s: float) -> Tuple[Any, float, float]:
    """Run the worker on `spec` (acknowledging every update at once) until its source has ended: (the last
    update, the worker's CPU seconds, when the last update came)."""
    from benchmarks.tui import cpu_s
    from tui.ui.client import FeedClient

    inbox: queue.Queue[Tuple[Any, ...]] = queue.Queue()
    client = FeedClient(spec, PROFILE, inbox.put, quiet=True)
    client.start()
    deadline, last = time.monotonic() + timeout_s, None
    try:
        while last is None or not last.counters.ended:
            msg = inbox.get(timeout=max(0.1, deadline - time.monotonic()))
            if msg[0] == "update":
                last = msg[1]
                client.ack(last.seq)
            elif msg[0] in ("error", "gone"):
                raise BenchError(f"the TUI worker failed: {msg[1]}")
        return last, cpu_s(client.pid), time.monotonic()
    except queue.Empty:
        raise BenchError(f"the TUI worker did not finish within {timeout_s:.0f} s") from None
    finally:
        client.close()


def tui_live(bench: Bench, exe: str) -> Figures:
    from benchmarks.live_sources import parse_detail
    from tui.messages import SourceSpec

    args = bench.args
    out = os.path.join(bench.tmp, "tasks-out.txt")
    spec = SourceSpec("benchmarks.live_sources:WorkloadSource", (tasks.argv(exe, args.events, args.rate), out,
                                                                 args.buffer_kb))  # fmt: skip
    update, cpu, _ = worker(spec, 120 + args.events / 1e5)
    with open(out, "rb") as f:
        truth = tasks.parse(f.read())
    times = parse_detail(update.counters.detail)
    end = argparse.Namespace(at=times.get("ended"), count=int(times.get("at_end", 0)))
    fig = _figures(truth, update.counters.events, update.counters.loss, times["started"], end, times["done"], cpu,
                   int(times.get("items", 0)))  # fmt: skip
    fig["by_kind"] = _op_counts(update)
    return fig


def _op_counts(update: Any) -> Dict[str, int]:
    """Calls paired and tasks completed, from the worker's per-operation rows (as the TUI shows them)."""
    ops: Counter[str] = Counter()
    for row in update.ops:
        ops[row.op] += row.count
    return {"call pairs": ops[tasks.CALL], "tasks completed": ops["task"]}


def tui_replay(bench: Bench, recording: str, events: int) -> Figures:
    """The worker fed the recording at --rate for events / rate seconds, then drained (for as long again and
    5 s more at most: what is left then is reported)."""
    from benchmarks.live_sources import parse_detail
    from tui.messages import SourceSpec

    rate = bench.args.rate or 1e9
    window = events / rate
    spec = SourceSpec("benchmarks.live_sources:PacedReplay", (recording, rate, window, 2 * window + 5))
    update, cpu, _ = worker(spec, 60 + 4 * window)
    times = parse_detail(update.counters.detail)
    end = argparse.Namespace(at=times["ended"], count=int(times["at_end"]))
    span = times["done"] - times["started"]
    truth = Truth(0, events, int(span * 1e9), 0, (0, 0), 0, 0, 0, 0)
    fig = _figures(truth, update.counters.events, update.counters.loss, times["started"], end, times["done"], cpu,
                   int(times["sent"]))  # fmt: skip
    fig.update(offered=min(rate, events / window), left=events - int(times["sent"]))
    del fig["truth"], fig["waits"]  # a replay's truth is its recording's events
    return fig


def record_workload(bench: Bench, exe: str) -> Tuple[str, int]:
    """The workload recorded by npu-trace (LiveTrace + Recorder in-process): the TUI replay's input, and the
    events it holds."""
    from npu_trace.pipeline import pump
    from npu_trace.sinks.npt_sink import Recorder
    from npu_trace.sources.live_trace import LiveTrace
    from npu_trace.sources.tracefs_source import TracefsSession

    path = os.path.join(bench.tmp, "tasks.npt")
    session = TracefsSession(list(EVENTS), buffer_kb=bench.args.buffer_kb, tag="benchrec", companions=())
    with LiveTrace(session) as source:
        recorder = Recorder(session, path, PROFILE.name)
        proc = subprocess.Popen(tasks.argv(exe, bench.args.events, bench.args.rate), stdout=subprocess.PIPE)
        try:
            pump(source, recorder, until=lambda: proc.poll() is not None)
        finally:
            recorder.close()
        lost = session.ledger.total
    truth = _truth(proc)
    if lost:
        log(f"  (the recording for the TUI replay lost {lost:,} events: it replays what it holds)")
    return path, truth.events - lost


# ---- the anchor -----------------------------------------------------------------------------------------------
def trace_cmd(bench: Bench, exe: str) -> Figures:
    run = Run(ANCHOR, bench.args.events, bench.args.rate)
    out, children = bench.anchor_record(run, list(EVENTS), tasks.argv(exe, bench.args.events, bench.args.rate))
    truth = tasks.parse(out)
    seen, _ = bench.count_dat([f"-{t} ".encode() for t in truth.tids], b"sys_e", bench.dat)
    lost = bench.anchor_loss()
    os.unlink(bench.dat)
    cpu = max(0.0, children - truth.cpu_ns / 1e9)  # its readers: the child tree less the workload
    return {"offered": truth.rate, "workload_events": truth.events, "events": seen, "lost": lost, "backlog": None,
            "drain_s": None, "analysed_rate": None, "reader_cpu_ns": cpu / seen * 1e9 if seen else 0.0,
            "wall_s": run.wall_s, "truth": truth.by_kind()}  # fmt: skip


# ---- the run ----------------------------------------------------------------------------------------------
def paths(args: argparse.Namespace, bench: Bench, exe: str) -> List[Tuple[str, Callable[[], Figures]]]:
    out: List[Tuple[str, Callable[[], Figures]]] = [
        (DECODE, lambda: inprocess(bench, exe)),
        (OBJECTS, lambda: inprocess(bench, exe, objects=True)),
        (ANALYSE, lambda: inprocess(bench, exe, analyse=True)),
    ]
    if not args.no_tui:
        out.append((WORKER, lambda: tui_live(bench, exe)))
    if not args.no_anchor:
        out.append((ANCHOR, lambda: trace_cmd(bench, exe)))
    return out


def live_parts(args: argparse.Namespace, bench: Bench) -> Dict[str, Any]:
    bench.build(anchor=not args.no_anchor)
    exe = tasks.build(bench.tmp)
    log(f"live: the task workload ({', '.join(EVENTS)}), {args.events:,} events at {args.rate / 1e6:g} M ev/s "
        f"on cpu0 and cpu1, readers on cpu{args.reader_cpu}, buffer {args.buffer_kb} KiB per CPU, "
        f"{args.repeat} repeat(s), medians")  # fmt: skip
    runs: Dict[str, List[Figures]] = {}
    replay_input = None if args.no_tui else record_workload(bench, exe)
    for i in range(args.repeat):
        log(f"round {i + 1}/{args.repeat}")
        for name, fn in paths(args, bench, exe):
            runs.setdefault(name, []).append(_logged(name, fn()))
        if replay_input is not None:
            fig = tui_replay(bench, *replay_input)
            runs.setdefault(REPLAY, []).append(_logged(REPLAY, fig))
    summary = {name: summarize(figs) for name, figs in runs.items()}
    print_table(summary)
    result: Dict[str, Any] = {"events": args.events, "rate": args.rate, "repeat": args.repeat, "runs": runs,
                              "summary": summary}  # fmt: skip
    result["ratios"] = ratios(summary)
    result["targets"] = targets(summary)
    return result


def _logged(name: str, fig: Figures) -> Figures:
    extra = f" by kind {fig['by_kind']} (truth {fig.get('truth')})" if "by_kind" in fig else ""
    extra += f" left unanalysed {fig['left']:,}" if fig.get("left") else ""
    backlog = "-" if fig["backlog"] is None else f"{fig['backlog']:,}"
    log(f"  {name:<14} offered {fig['offered'] / 1e6:.3f} M/s events {fig['events']:>10,} lost {fig['lost']:>9,} "
        f"backlog {backlog} reader {fig['reader_cpu_ns']:.0f} ns/ev{extra}")  # fmt: skip
    return fig


def summarize(figs: List[Figures]) -> Figures:
    keys = ("offered", "events", "lost", "backlog", "drain_s", "analysed_rate", "reader_cpu_ns")
    out = {k: median([f[k] for f in figs]) if figs[0].get(k) is not None else None for k in keys}
    out["lossless_runs"] = sum(f["lost"] == 0 and f["events"] >= f["workload_events"] for f in figs)
    out["runs"] = len(figs)
    return out


def print_table(summary: Dict[str, Figures]) -> None:
    from benchmarks.record import table

    head = ("path", "offered ev/s", "events", "lost", "lossless runs", "backlog at end", "drain s", "analysed ev/s",
            "reader CPU ns/event")  # fmt: skip
    rows: List[Sequence[str]] = [head]
    for name, s in summary.items():
        rows.append((name, _m(s["offered"]), f"{s['events']:,.0f}", f"{s['lost']:,.0f}",
                     f"{s['lossless_runs']}/{s['runs']}", "-" if s["backlog"] is None else f"{s['backlog']:,.0f}",
                     "-" if s["drain_s"] is None else f"{s['drain_s']:.2f}", _m(s["analysed_rate"]),
                     f"{s['reader_cpu_ns']:.0f}"))  # fmt: skip
    log("")
    table(rows)


def _m(v: Optional[float]) -> str:
    return f"{v / 1e6:.3f} M/s" if v else "-"


def ratios(summary: Dict[str, Figures]) -> Dict[str, Optional[float]]:
    anchor = summary.get(ANCHOR)
    out: Dict[str, Optional[float]] = {}
    if anchor is None:
        return out
    for name, s in summary.items():
        if name != ANCHOR and s["reader_cpu_ns"] and anchor["reader_cpu_ns"]:
            out[f"{name}: reader CPU per event vs trace-cmd"] = s["reader_cpu_ns"] / anchor["reader_cpu_ns"]
        if name in (DECODE, OBJECTS, ANALYSE, WORKER) and s["events"] and anchor["events"]:
            out[f"{name}: events seen vs trace-cmd"] = s["events"] / anchor["events"]
    for k, v in out.items():
        log(f"ratio: {k}: {v:.2f}x" if v is not None else f"ratio: {k}: n/a")
    return out


def targets(summary: Dict[str, Figures]) -> List[Dict[str, Any]]:
    out = [t for t in (_stream_target(summary),) if t is not None]
    for name in (WORKER, REPLAY, ANALYSE):
        s = summary.get(name)
        if s is None:
            continue
        # zero backlog: the consumer keeps up. A live consumer takes its block every TAKE_EVERY_S (LiveBlocks),
        # so at the workload's end up to that much (and the read under way) is still to be taken, by design
        inherent = s["offered"] * (TAKE_EVERY_S + POLL_INTERVAL_S)
        lossless = s["lossless_runs"] == s["runs"]
        ok = s["offered"] >= TARGET_RATE and lossless and (s["backlog"] or 0) <= inherent
        out.append({"name": f"{name} at >= 1 M ev/s offered, zero backlog", "met": ok, "offered": s["offered"],
                    "analysed_rate": s["analysed_rate"], "backlog": s["backlog"], "lost": s["lost"],
                    "lossless_runs": s["lossless_runs"], "runs": s["runs"], "inherent_backlog": inherent})  # fmt: skip
        log(f"targets: {name}: offered {_m(s['offered'])}, analysed {_m(s['analysed_rate'])}, backlog "
            f"{s['backlog'] or 0:,.0f} (one take interval and a read hold {inherent:,.0f}), lossless in "
            f"{s['lossless_runs']}/{s['runs']} runs vs target >= 1 M ev/s offered with zero backlog (no more than "
            f"that) and no loss: {'met' if ok else 'NOT met'}")  # fmt: skip
    return out


def _stream_target(summary: Dict[str, Figures]) -> Optional[Dict[str, Any]]:
    """stream lossless >= 1.0x trace-cmd record: here at the one rate offered (every run lossless, or not)."""
    s, anchor = summary.get(DECODE), summary.get(ANCHOR)
    if s is None or anchor is None:
        return None
    ours, theirs = s["lossless_runs"] == s["runs"], anchor["lossless_runs"] == anchor["runs"]
    met = ours if theirs else None
    log(f"targets: stream decode lossless in {s['lossless_runs']}/{s['runs']} runs at {_m(s['offered'])} offered, "
        f"trace-cmd record in {anchor['lossless_runs']}/{anchor['runs']} vs target: lossless wherever trace-cmd is: "
        f"{'n/a' if met is None else 'met' if met else 'NOT met'}")  # fmt: skip
    cpu = s["reader_cpu_ns"] / anchor["reader_cpu_ns"] if s["reader_cpu_ns"] and anchor["reader_cpu_ns"] else None
    cpu_met = None if cpu is None else cpu <= 3.0
    log(f"targets: stream decode reader CPU per event {s['reader_cpu_ns']:.0f} ns vs trace-cmd record's "
        f"{anchor['reader_cpu_ns']:.0f} ns: {'n/a' if cpu is None else f'{cpu:.2f}x'} vs target <= 3x: "
        f"{'n/a' if cpu_met is None else 'met' if cpu_met else 'NOT met'}")  # fmt: skip
    return {"name": "stream lossless where trace-cmd record is", "met": met, "offered": s["offered"],
            "lossless_runs": s["lossless_runs"], "anchor_lossless_runs": anchor["lossless_runs"],
            "reader_cpu_ratio": cpu, "reader_cpu_met": cpu_met}  # fmt: skip


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench live", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=3_600_000, help="trace events the workload makes per run")
    p.add_argument("--rate", type=float, default=1.2e6, help="events/s the workload offers (0: as fast as it can)")
    add_common_options(p)  # the TUI's worker runs on --reader-cpu too
    p.add_argument("--no-tui", action="store_true", help="skip the TUI worker (live and replay)")
    args = p.parse_args(argv)
    if args.events < 6 or args.repeat <= 0 or args.buffer_kb <= 0 or args.rate < 0:
        p.error("--events >= 6, --repeat and --buffer-kb > 0, --rate >= 0")
    args.no_record, args.gen_cpu = True, 0  # what benchmarks.ingest's Bench reads
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_bench(parse_args(argv), live_parts)


if __name__ == "__main__":
    raise SystemExit(main())
