"""Check figures where every event is analysed: `npu-trace check` against `trace-cmd report` on the same events.

1. Detector-heavy, the issue's workload: the simulator's mixed scenario on 8 devices at 20,000 calls/s for 15 s,
   host-like (threads on both CPUs; about 430 k events), recorded by npu-trace (in-process, as `npu-trace
   record` does: LiveTrace + Recorder in an instance of its own) and by `trace-cmd record` (instance npubench)
   at once: both files hold the same events. Each tool then runs as a user runs it, in a child process,
   once per round for `--check-repeat` rounds (medians; a ratio between two tools is judged round by round, its
   median taken: this VM's speed drifts by tens of percent between minutes, and a round's runs share their
   minute): `npu-trace check FILE --json OUT` and `trace-cmd report -q -i FILE > /dev/null`
   (formatting every event as text is what report does). A nearly empty recording made the same way
   (steady, 0.1 s at 100 calls/s) is timed too: its time is the tool's start-up, subtracted, so the figures
   are the work per event: events/s = (events - events_empty) / (wall - wall_empty), CPU per event likewise.
2. Generated: `npu-trace check` on a recording of millions of events (benchmarks.gen_recording: the mixed
   scenario on 8 devices, host-like on 2 CPUs; `--gen-events`, default 2 M; or `--gen-file FILE` with its
   OUT.truth.json), start-up subtracted likewise (a generated recording of a few events), with the child's
   peak RSS (wait4's ru_maxrss): the target is < 300 MiB for 10 M events.

On the detector-heavy recording, `npu-trace replay --headless --max --format text|ndjson FILE > /dev/null`
(every event printed, as report prints every one) is timed the same way, beside report.

`summary.events.total` (what check counted) is printed beside the events the reader read: they must be equal.
Targets, as figures (never pass/fail): check >= 1.5 M analysed events/s and >= 4.8x trace-cmd report's
events/s on the same events (the ratio the one-pipeline issue keeps); replay's text and NDJSON >= 3x report's
events/s. Run alone: `scripts/bench check [--check-repeat R] [--gen-events N] [--no-anchor]`.
Rounds: 7 by default (`--check-repeat`), more than the other figures' 3: each run here is a fraction of a
second, start-up included, so a round is a few seconds, and a run's work per event (its time less its start-up)
is a tenth of a second that a stall of the machine lengthens by tens of percent (the rounds of one run of the
same code spanned 4.3-8.8x report): the median of more rounds sees through more of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from benchmarks.common import ANCHOR_INSTANCE, BenchError, alternated, judged_ratio, log, median

if TYPE_CHECKING:  # pragma: no cover
    from benchmarks.ingest import Bench  # annotations only

CHECK_RATE_TARGET = 1_500_000.0
CHECK_ROUNDS = 7  # --check-repeat's default (see the docstring)
REPORT_RATIO_TARGET = 4.8  # the one-pipeline issue: check keeps its 4.8x (this bench said 2.5x before it)
OUTPUT_RATIO_TARGET = 3.0  # replay --headless --max, text and NDJSON, against trace-cmd report
OUTPUTS = ("text", "ndjson")
RSS_TARGET_MIB, RSS_TARGET_EVENTS = 300.0, 9_500_000  # "for 10 M events": judged from 9.5 M on
GEN_RATE = 100_000.0  # generated recordings: background calls/s (about 141,000 events per second of trace)


@dataclass(frozen=True)
class Workload:
    """A simulator scenario, host-like."""

    scenario: str
    duration_s: float
    rate: float
    devices: int

    def describe(self) -> str:
        return f"{self.scenario}, {self.devices} devices, {self.rate:g} calls/s, {self.duration_s:g} s"


HEAVY = Workload("mixed", 15.0, 20_000.0, 8)
EMPTY = Workload("steady", 0.1, 100.0, 1)


# ---- one child process, timed -------------------------------------------------------------------------------
# `npu-trace ARGS` as `python -m npu_trace` runs it, telling its own peak RSS (VmHWM: that of the program since
# its exec; the child's ru_maxrss would also count the bench's own pages, which the fork copied) into a file
PEAK_RSS = """import atexit, sys
def peak():
    with open("/proc/self/status") as f, open(sys.argv[1], "w") as out:
        out.write(next(line for line in f if line.startswith("VmHWM:")).split()[1])
atexit.register(peak)
from npu_trace.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_child(argv: List[str], peak_file: Optional[str] = None) -> Dict[str, Any]:
    """Wall time and CPU (user + system, os.wait4: that child alone) of one child process; its peak RSS when
    it writes it to `peak_file` (in KiB)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    fig = {"wall_s": time.monotonic() - t0, "cpu_s": usage.ru_utime + usage.ru_stime, "rc": proc.returncode}
    if peak_file is not None:
        with open(peak_file) as f:
            fig["rss_mib"] = int(f.read()) / 1024
    return fig


def npu_trace_argv(args: List[str], peak_file: str) -> List[str]:
    return [sys.executable, "-c", PEAK_RSS, peak_file, *args]


class Job(NamedTuple):
    argv: List[str]
    ok: Tuple[int, ...] = (0,)
    peak_file: Optional[str] = None
    out: Optional[str] = None  # a file the command writes: removed before each run (a run writes a new one)


def run_job(job: Job) -> Dict[str, Any]:
    """One run of a job (run_child), its `out` removed first."""
    if job.out is not None and os.path.exists(job.out):
        os.unlink(job.out)
    return run_child(job.argv, job.peak_file)


def rounds(jobs: Dict[str, Job], repeat: int,
           run: Callable[[Job], Dict[str, Any]] = run_job) -> Dict[str, Dict[str, Any]]:  # fmt: skip
    """Every job run once per round (`run`: how), `repeat` rounds one after another: a slow spell of the machine
    (this VM's speed drifts by tens of percent from minute to minute) falls on the tools of one round alike, so
    that a ratio taken round by round (`paired`) sees through it. Every other round runs the jobs in the reverse
    order (`alternated`), so that a drift within a round favours no job. Each job's figure as `timed` gives it."""
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in jobs}
    for i in range(repeat):
        for name in alternated(list(jobs), i):
            runs[name].append(run(jobs[name]))
    return {name: figure(job, runs[name]) for name, job in jobs.items()}


def timed(argv: List[str], repeat: int, ok: Tuple[int, ...] = (0,), peak_file: Optional[str] = None) -> Dict[str, Any]:
    """run_child `repeat` times: medians (and the largest peak RSS)."""
    return rounds({"job": Job(argv, ok, peak_file)}, repeat)["job"]


def figure(job: Job, runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A job's runs: the medians of wall and CPU time, the largest peak RSS; a run that exited otherwise than
    `job.ok` allows is a BenchError naming the command (after the peak-RSS wrapper's script and file)."""
    bad = [r["rc"] for r in runs if r["rc"] not in job.ok]
    if bad:
        wrapped = job.peak_file is not None and job.argv[3:4] == [job.peak_file]  # python -c SCRIPT PEAK ARGS
        words = job.argv[4:7] if wrapped else job.argv[:4]
        raise BenchError(f"{' '.join(words)} ... exited with {bad[0]}")
    fig = {"wall_s": median([r["wall_s"] for r in runs]), "cpu_s": median([r["cpu_s"] for r in runs]), "runs": runs}
    if job.peak_file is not None:
        fig["rss_mib"] = max(r["rss_mib"] for r in runs)
    return fig


def check_job(path: str) -> Job:
    """`npu-trace check PATH --json` (exit 1 is fine: the workloads inject faults)."""
    peak = path + ".peak"
    return Job(npu_trace_argv(["check", path, "--quiet", "--json", path + ".report.json"], peak), (0, 1), peak)


def npu_check(path: str, repeat: int) -> Dict[str, Any]:
    """`npu-trace check PATH --json` timed, and what it read."""
    return check_read(path, rounds({"check": check_job(path)}, repeat)["check"])


def check_read(path: str, fig: Dict[str, Any]) -> Dict[str, Any]:
    """A check's figure with what it read (its JSON report)."""
    report = path + ".report.json"
    with open(report) as f:
        rep = json.load(f)
    summary = rep["summary"]
    fig.update(events=int(rep["reading"]["events"]), total=int(summary["events"]["total"]),
               by_kind=dict(summary["events"]["by_kind"]), findings=len(rep["findings"]),
               lost=int(rep["reading"]["lost"]))  # fmt: skip
    return fig


def replay_job(path: str, fmt: str) -> Job:
    """`npu-trace replay --headless --max --format FMT PATH > /dev/null`."""
    peak = path + ".peak"
    return Job(npu_trace_argv(["replay", "--headless", "--max", "--format", fmt, path], peak), (0,), peak)


def report_job(bench: Bench, dat: str) -> Job:
    return Job([bench.trace_cmd, "report", "-q", "-i", dat])


def per_event(full: Dict[str, Any], empty: Dict[str, Any]) -> Dict[str, Any]:
    """The work per event: the nearly empty run's time (start-up) taken off."""
    n = full["events"] - empty["events"]
    wall, cpu = full["wall_s"] - empty["wall_s"], full["cpu_s"] - empty["cpu_s"]
    return {"events": n, "wall_s": wall, "cpu_s": cpu, "startup_wall_s": empty["wall_s"],
            "events_per_s": n / wall if wall > 0 else 0.0, "cpu_ns_per_event": cpu / n * 1e9 if n else 0.0,
            "rss_mib": full.get("rss_mib")}  # fmt: skip


# ---- 1. detector-heavy: the simulator recorded by both tools at once ----------------------------------------
@dataclass
class Recorded:
    npt: str
    dat: Optional[str]
    expected: int  # events the executor's plan makes
    tc_lost: int = 0


def record_both(bench: Bench, binary: str, work: Workload, tag: str, anchor: bool) -> Recorded:
    """`work` run by the executor (host-like) while npu-trace records it in-process, and trace-cmd (it runs
    the executor as its command) records it too."""
    from npu_trace.device import hal
    from npu_trace.pipeline import pump
    from npu_trace.sim import runner, scenarios
    from npu_trace.sim.threads import HOST_LIKE
    from npu_trace.sinks.npt_sink import Recorder
    from npu_trace.sources.live_trace import LiveTrace
    from npu_trace.sources.tracefs_source import TracefsSession

    actions = scenarios.plan(work.scenario, 1, work.duration_s, work.rate, work.devices, host=HOST_LIKE)
    plan_path, out_path = (os.path.join(bench.tmp, f"{tag}.{x}") for x in ("plan", "out"))
    with open(plan_path, "w") as f:
        f.writelines(runner.plan_line(a) for a in actions)
    executor = [binary, "-m", str(HOST_LIKE.migrate_us), plan_path, out_path]
    got = Recorded(os.path.join(bench.tmp, f"{tag}.npt"), os.path.join(bench.tmp, f"{tag}.dat") if anchor else None,
                   sum(1 + int(hal.FUNC_BY_NAME[a.func].hal) for a in actions))  # fmt: skip
    argv = bench.trace_cmd_record("ascend", got.dat, executor) if got.dat else executor
    env = bench.anchor_env() if got.dat else None
    # the events trace-cmd records beside it, no more (no task:task_newtask: a handful of the host's clones)
    session = TracefsSession(["ascend:*"], buffer_kb=bench.args.buffer_kb, tag="benchcheck", companions=())
    err = os.path.join(bench.tmp, f"{tag}.stderr")
    with LiveTrace(session) as source, open(err, "wb") as errors:
        recorder = Recorder(session, got.npt, "sim")
        proc = subprocess.Popen(argv, env=env, cwd=bench.anchor_cwd(), stdout=subprocess.DEVNULL, stderr=errors)
        try:
            pump(source, recorder, until=lambda: proc.poll() is not None)
        finally:
            recorder.close()
            _reap(proc, bench, "trace-cmd record" if got.dat else "the simulator's executor", err)
    with open(out_path) as f:
        runner.parse_output(f.read(), len(actions))  # the executor ran every action
    if got.dat:
        got.tc_lost = bench.anchor_loss(got.dat)
    return got


def _reap(proc: subprocess.Popen[bytes], bench: Bench, name: str, err: str) -> None:
    from benchmarks.ingest import remove_instance

    if proc.poll() is None:
        proc.kill()
    proc.wait()
    remove_instance(bench.root, ANCHOR_INSTANCE)
    if proc.returncode:
        with open(err, errors="replace") as f:
            raise BenchError(f"{name} exited with {proc.returncode}: {f.read()[-800:]}")


def detector_heavy(bench: Bench, repeat: int, anchor: bool, work: Workload = HEAVY) -> Dict[str, Any]:
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs

    fs = Tracefs(bench.root)
    loaded = sim.load(fs)
    try:
        full = record_both(bench, loaded.binary, work, "heavy", anchor)
        empty = record_both(bench, loaded.binary, EMPTY, "heavy-empty", anchor)
    finally:
        if loaded.changed:
            sim.unload(fs)  # registered here: leave uprobe_events as found
    out: Dict[str, Any] = {"workload": work.describe(), "expected_events": full.expected}
    out["trace_cmd_lost"] = full.tc_lost
    jobs = {"check": check_job(full.npt), "check-empty": check_job(empty.npt)}
    for fmt in OUTPUTS:
        jobs.update({fmt: replay_job(full.npt, fmt), f"{fmt}-empty": replay_job(empty.npt, fmt)})
    if full.dat and empty.dat:
        jobs.update({"report": report_job(bench, full.dat), "report-empty": report_job(bench, empty.dat)})
    got = rounds(jobs, repeat)
    npu_full, npu_empty = check_read(full.npt, got["check"]), check_read(empty.npt, got["check-empty"])
    out["npu_check"] = dict(per_event(npu_full, npu_empty), read=npu_full["events"], total=npu_full["total"],
                            by_kind=npu_full["by_kind"], findings=npu_full["findings"], lost=npu_full["lost"],
                            startup=npu_empty)  # fmt: skip
    for fmt in OUTPUTS:
        some, none = dict(got[fmt], events=npu_full["events"]), dict(got[f"{fmt}-empty"], events=npu_empty["events"])
        out[f"npu_replay_{fmt}"] = dict(per_event(some, none), read=some["events"], startup=none)
    if "report" in got:
        counted = (bench.count_dat(b": ascend_", b": ascend_", dat)[1] for dat in (full.dat, empty.dat))
        tc_full, tc_empty = (dict(got[name], events=n) for name, n in zip(("report", "report-empty"), counted))
        out["trace_cmd_report"] = dict(per_event(tc_full, tc_empty), read=tc_full["events"], startup=tc_empty)
        for name in ("check", *OUTPUTS):
            out[f"paired_{name}"] = paired((got[name], got[f"{name}-empty"]), npu_full["events"] - npu_empty["events"],
                                           (tc_full, tc_empty), tc_full["events"] - tc_empty["events"])  # fmt: skip
    return out


def paired(a: Tuple[Dict[str, Any], Dict[str, Any]], a_events: int, b: Tuple[Dict[str, Any], Dict[str, Any]],
           b_events: int) -> List[float]:  # fmt: skip
    """Round by round (see `rounds`), tool a's events/s over tool b's: (full, nearly empty) figures of each;
    each round's wall time of the full run less the tool's start-up (the median of its nearly empty runs)."""
    out = []
    for ra, rb in zip(a[0]["runs"], b[0]["runs"]):
        wa, wb = ra["wall_s"] - a[1]["wall_s"], rb["wall_s"] - b[1]["wall_s"]
        if wa > 0 and wb > 0:
            out.append((a_events / wa) / (b_events / wb))
    return out


# ---- 2. a generated recording of millions of events ---------------------------------------------------------
def generated(bench: Bench, repeat: int, events: float, path: Optional[str]) -> Dict[str, Any]:
    from benchmarks.gen_recording import Spec, duration_for, generate, truth_path

    t0 = time.monotonic()
    if path is None:
        path = os.path.join(bench.tmp, "generated.npt")
        big = generate(path, Spec(duration_s=duration_for(events, GEN_RATE), rate=GEN_RATE))
        made = {"events": big.events, "generation_s": big.seconds, "bytes": big.bytes}
    else:
        with open(truth_path(path)) as f:
            truth = json.load(f)
        made = {"events": truth["events"], "generation_s": None, "bytes": os.path.getsize(path), "file": path}
    made["spec"] = f"mixed, 8 devices, {GEN_RATE:g} calls/s, host-like on 2 CPUs" if "file" not in made else "given"
    tiny = generate(os.path.join(bench.tmp, "generated-empty.npt"), Spec(duration_s=0.01, rate=1000.0))
    log(f"check (generated): {made['events']:,} events ready in {time.monotonic() - t0:.1f} s")
    full, empty = npu_check(path, repeat), npu_check(tiny.path, repeat)
    return dict(made, npu_check=dict(per_event(full, empty), read=full["events"], total=full["total"],
                                     findings=full["findings"], lost=full["lost"], startup=empty))  # fmt: skip


# ---- reporting ----------------------------------------------------------------------------------------------
def check_figures(args: Any, bench: Bench) -> Dict[str, Any]:
    """Both figures, printed as tables with the ratios and targets; the JSON part."""
    out: Dict[str, Any] = {"repeat": args.check_repeat}
    work = replace(HEAVY, duration_s=args.heavy_duration)
    log("")
    log(f"check: detector-heavy workload ({work.describe()}, host-like) recorded by npu-trace"
        f"{' and trace-cmd at once' if not args.no_anchor else ''}; each tool in a child process, median of "
        f"{args.check_repeat}, start-up (a nearly empty recording: {EMPTY.describe()}) subtracted")  # fmt: skip
    heavy = out["detector_heavy"] = detector_heavy(bench, args.check_repeat, not args.no_anchor, work)
    rows = [("tool", "events read", "counted", "wall s", "start-up s", "events/s", "CPU ns/event", "peak RSS MiB")]
    rows.append(_row("npu-trace check", heavy["npu_check"]))
    for fmt in OUTPUTS:
        rows.append(_row(f"npu-trace replay --max {fmt} > /dev/null", heavy[f"npu_replay_{fmt}"]))
    if "trace_cmd_report" in heavy:
        rows.append(_row("trace-cmd report > /dev/null", heavy["trace_cmd_report"]))
    if args.gen_events or args.gen_file:
        gen = out["generated"] = generated(bench, args.check_repeat, args.gen_events, args.gen_file)
        rows.append(_row(f"npu-trace check, generated ({gen['events']:,} events)", gen["npu_check"]))
    _table(rows)
    _notes(heavy, out.get("generated"))
    out["targets"] = targets(heavy, out.get("generated"))
    return out


def _row(name: str, fig: Dict[str, Any]) -> Tuple[str, ...]:
    counted = f"{fig['total']:,}" if "total" in fig else "-"
    return (name, f"{fig['read']:,}", counted, f"{fig['wall_s'] + fig['startup_wall_s']:.3f}",
            f"{fig['startup_wall_s']:.3f}", f"{fig['events_per_s'] / 1e6:.3f} M/s", f"{fig['cpu_ns_per_event']:.0f}",
            f"{fig['rss_mib']:.0f}" if fig.get("rss_mib") is not None else "-")  # fmt: skip


def _table(rows: List[Tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        log("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            log("  ".join("-" * w for w in widths))


def _notes(heavy: Dict[str, Any], gen: Optional[Dict[str, Any]]) -> None:
    npu = heavy["npu_check"]
    kinds = ", ".join(f"{k} {v:,}" for k, v in npu["by_kind"].items())
    log(f"  detector-heavy: {heavy['expected_events']:,} events planned; npu-trace read {npu['read']:,} "
        f"(lost {npu['lost']}), trace-cmd {heavy.get('trace_cmd_report', {}).get('read', 'n/a')} "
        f"(lost {heavy['trace_cmd_lost']}); by kind: {kinds}; {npu['findings']} findings")  # fmt: skip
    for name, fig in (("detector-heavy", npu), ("generated", gen["npu_check"] if gen else None)):
        if fig is not None and fig["total"] != fig["read"]:
            log(f"  *** {name}: check counted {fig['total']:,} (summary.events.total) of {fig['read']:,} read ***")
    if gen is not None and gen.get("generation_s"):
        log(f"  generated recording: {gen['events']:,} events, {gen['bytes']:,} bytes, generated in "
            f"{gen['generation_s']:.1f} s ({gen['events'] / gen['generation_s'] / 1e3:.0f} k events/s)")  # fmt: skip


def targets(heavy: Dict[str, Any], gen: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    rate = heavy["npu_check"]["events_per_s"]
    text = f"check {rate / 1e6:.3f} M analysed ev/s (start-up subtracted) vs target 1.5 M ev/s"
    out.append(_target("check rate, detector-heavy", rate, CHECK_RATE_TARGET, rate >= CHECK_RATE_TARGET, text))
    tc = heavy.get("trace_cmd_report")
    if tc is not None and tc["events_per_s"]:
        r, text = _ratio(rate, tc, heavy.get("paired_check", []))
        out.append(_target("check / trace-cmd report", r, REPORT_RATIO_TARGET, r >= REPORT_RATIO_TARGET,
                           f"check {text} on the same events vs target {REPORT_RATIO_TARGET}x"))  # fmt: skip
    for fmt in OUTPUTS:
        out += _output_target(fmt, heavy[f"npu_replay_{fmt}"], tc, heavy.get(f"paired_{fmt}", []))
    if gen is not None:
        fig = gen["npu_check"]
        g = fig["events_per_s"]
        out.append(_target("check rate, generated", g, CHECK_RATE_TARGET, g >= CHECK_RATE_TARGET,
                           f"check {g / 1e6:.3f} M analysed ev/s on {fig['read'] / 1e6:.1f} M generated events "
                           "vs target 1.5 M ev/s"))  # fmt: skip
        big = fig["read"] >= RSS_TARGET_EVENTS
        text = f"check peak RSS {fig['rss_mib']:.0f} MiB for {fig['read'] / 1e6:.1f} M events vs target < 300 MiB"
        text += " for 10 M events" + ("" if big else " (judged at about 10 M events: --gen-events 1e7)")
        met = fig["rss_mib"] < RSS_TARGET_MIB if big else None
        out.append(_target("check peak RSS", fig["rss_mib"], RSS_TARGET_MIB, met, text))
    for t in out:
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
        log(f"targets: {t['text']}: {verdict}")
    return out


def _output_target(fmt: str, fig: Dict[str, Any], tc: Optional[Dict[str, Any]],
                   rounds_: List[float]) -> List[Dict[str, Any]]:  # fmt: skip
    """replay --max FMT against report on the same events (none without the anchor)."""
    if tc is None or not tc["events_per_s"]:
        return []
    r, text = _ratio(fig["events_per_s"], tc, rounds_)
    return [_target(f"replay {fmt} / trace-cmd report", r, OUTPUT_RATIO_TARGET, r >= OUTPUT_RATIO_TARGET,
                    f"replay --headless --max --format {fmt}: {fig['events_per_s'] / 1e6:.3f} M ev/s, {text} "
                    f"(start-up subtracted) vs target {OUTPUT_RATIO_TARGET:g}x")]  # fmt: skip


def _ratio(rate: float, tc: Dict[str, Any], rounds_: List[float]) -> Tuple[float, str]:
    """The ratio judged against trace-cmd report (benchmarks.common.judged_ratio)."""
    return judged_ratio(rate / tc["events_per_s"], rounds_, "trace-cmd report",
                        f"report {tc['events_per_s'] / 1e6:.3f} M ev/s")  # fmt: skip


def _target(name: str, value: float, target: float, met: Optional[bool], text: str) -> Dict[str, Any]:
    return {"name": name, "value": value, "target": target, "met": met, "text": text}
