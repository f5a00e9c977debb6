"""Ingest benchmark: `npu-trace stream` to /dev/null against `trace-cmd record`, same workload, same run.

Workload A: `gen_syscalls N cpu [rate]` (benchmarks/gen_syscalls.c, built into a temporary folder) makes N raw
getpid syscalls pinned to one CPU; the event is `syscalls:sys_enter_getpid`. The tracer runs on another CPU.
"npu-trace" is stream's own path in-process, its text written to /dev/null (the live source, the pump, the
block timeline, `npu_trace.sinks.text.printing`); "npu-trace, no text" the same without the text (what the text
costs). Targets: stream lossless at >= 1.0x trace-cmd record's lossless rate (judged round by round when both
are lossless at full speed, as every bench judges its ratios: benchmarks.common.judged_ratio), its
reader's CPU per event at most 2x trace-cmd's.
For each tool the benchmark reports events seen (the generator's pid only), events lost (kernel counters),
the highest lossless rate (full speed, or stepping the generator's pace down when full speed loses), the
reader's CPU per million events, the generator's slowdown against an untraced run, and bytes on disk per event.
Every measurement is repeated `--repeat` times (workload A at full speed: `--stream-repeat` rounds, the tools in
the reverse order every other round) and the median is shown. Nothing here is a pass/fail test:
the figures and the npu-trace/trace-cmd ratios are printed (and written with `--json OUT`).
`npu-trace record` ("npu-record": the live source + Recorder + the pump, in-process) is measured beside them on the
same workload, then replay/check throughput and file sizes against trace-cmd's file (benchmarks/record.py;
`--no-record` skips it).

The check figures follow (benchmarks/checks.py: `check` where every event is analysed, on the simulator's mixed
scenario recorded by both tools at once, and on a generated recording of millions of events; `--no-check` skips
them, `--check-only` runs only them).

Run as root: `scripts/bench [--events N] [--buffer-kb KB] [--repeat R] [--stream-repeat R] [--no-anchor]
[--no-record] [--no-check] [--gen-events N] [--json OUT]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from benchmarks.checks import CHECK_ROUNDS, HEAVY, check_figures
from benchmarks.common import (
    ANCHOR,
    ANCHOR_INSTANCE,
    EVENT,
    NPU,
    NPU_NO_TEXT,
    UNTRACED,
    BenchError,
    PidCount,
    Run,
    add_common_options,
    alternated,
    cpu_children,
    cpu_self,
    gcc,
    judged_ratio,
    log,
    median,
    parse_gen,
)
from benchmarks.record import REC, record_run, report

HERE = os.path.dirname(os.path.abspath(__file__))
GEN_SOURCE = os.path.join(HERE, "gen_syscalls.c")
SHIM_SOURCE = "/work/shared/anchor-tools/trace-cmd-eperm-shim.c"
DEFAULT_RATES = "1.4e6,1.3e6,1.2e6,1.1e6,1e6,0.75e6,0.5e6"  # fine steps near the ~1.4M/s the generator reaches traced
GC_THRESHOLD = 100_000
# --stream-repeat's default: workload A's rounds at full speed, whose round-by-round ratio the lossless target is
# judged by. Both tools are lossless at the generator's full speed, so the ratio is of the generator's rates under
# each: at parity. Over 28 rounds (4 runs, the order alternated) 0.97-1.11, median 1.003, spread (SD) 0.028, 10
# under 1.0; the tool run first in a round gained ~1.5% (npu-trace first: median 1.014; trace-cmd first: 0.9995).
# A median of 7 rounds spreads about 2/3 as much as one of 3: it still lands on either side of 1.0.
STREAM_ROUNDS = 7
Events = Union[str, Sequence[str]]  # trace-cmd record -e: one event or system, or several
Tags = Union[bytes, Sequence[bytes]]
# Global tracefs files the benchmark (or trace-cmd) could change: snapshotted first, restored at the end.
GLOBAL_FILES = ("tracing_on", "current_tracer", "trace_clock", "buffer_size_kb", "set_event")
PROC_FILES = ("/proc/sys/kernel/kptr_restrict",)



def ensure_trace_cmd() -> str:
    path = shutil.which("trace-cmd")
    if path:
        return path
    log("trace-cmd is missing: installing it with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "trace-cmd"], check=False, env=env)
    path = shutil.which("trace-cmd")
    if not path:
        raise BenchError("trace-cmd could not be installed (apt-get install trace-cmd)")
    return path


# ---- global tracefs state -------------------------------------------------------------------------
class GlobalState:
    """A snapshot of the global tracefs files (and the proc files trace-cmd writes); `restore` puts back any
    that changed and returns what it restored."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.saved: Dict[str, str] = {}
        for name in GLOBAL_FILES:
            text = self._read(os.path.join(root, name))
            if text is not None:
                self.saved[os.path.join(root, name)] = text
        for path in PROC_FILES:
            text = self._read(path)
            if text is not None:
                self.saved[path] = text
        self.instances = set(os.listdir(os.path.join(root, "instances")))

    @staticmethod
    def _read(path: str) -> Optional[str]:
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return None

    @staticmethod
    def _value(path: str, text: str) -> str:
        if path.endswith("trace_clock"):
            m = re.search(r"\[(\S+)\]", text)
            return m.group(1) if m else text.strip()
        if path.endswith("buffer_size_kb"):
            return text.split()[0] if text.split() else text.strip()
        return text.strip()

    def changed(self) -> List[str]:
        return [p for p, t in self.saved.items() if self._value(p, self._read(p) or "") != self._value(p, t)]

    def restore(self) -> List[str]:
        restored = []
        for path in self.changed():
            value = self._value(path, self.saved[path])
            try:
                if path.endswith("set_event"):
                    with open(path, "w") as f:  # truncating write: disables every event
                        pass
                    for line in value.splitlines():
                        with open(path, "a") as f:
                            f.write(line + "\n")
                else:
                    with open(path, "w") as f:
                        f.write(value + "\n")
                restored.append(path)
            except OSError as exc:
                restored.append(f"{path} (restore FAILED: {exc})")
        return restored

    def new_instances(self) -> List[str]:
        return sorted(set(os.listdir(os.path.join(self.root, "instances"))) - self.instances)


def remove_instance(root: str, name: str) -> bool:
    path = os.path.join(root, "instances", name)
    if not os.path.isdir(path):
        return False
    for rel in ("tracing_on", "events/enable"):
        try:
            with open(os.path.join(path, rel), "w") as f:
                f.write("0\n")
        except OSError:
            pass
    for _ in range(50):
        try:
            os.rmdir(path)
            return True
        except OSError:
            time.sleep(0.1)
    raise BenchError(f"cannot remove tracefs instance {path}")


# ---- the tools -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, tmp: str, root: str) -> None:
        self.args = args
        self.tmp = tmp
        self.root = root
        self.gen = os.path.join(tmp, "gen_syscalls")
        self.shim = os.path.join(tmp, "eperm_shim.so")
        self.dat = os.path.join(tmp, "anchor.dat")
        self.trace_cmd = ""
        self.sim_loaded: Any = None  # npu_trace.sim.LoadedSim while workload B runs
        self.sim_plan = self.sim_out = ""
        self.sim_actions = 0
        # npu-trace record (benchmarks/record.py): the first full-speed recording and trace-cmd file are kept
        self.keep_files = not args.no_record
        self.rec_count = 0
        self.rec_kept: Optional[str] = None
        self.rec_kept_run: Optional[Run] = None
        self.dat_kept: Optional[str] = None
        self.dat_kept_run: Optional[Run] = None

    def build(self, anchor: bool) -> None:
        gcc(GEN_SOURCE, self.gen, ["-Wall"])
        if anchor:
            self.trace_cmd = ensure_trace_cmd()
            if not os.path.exists(SHIM_SOURCE):
                raise BenchError(f"{SHIM_SOURCE} is missing: trace-cmd records nothing here without it")
            gcc(SHIM_SOURCE, self.shim, ["-shared", "-fPIC"])

    def gen_argv(self, n: int, rate: float) -> List[str]:
        argv = [self.gen, str(n), str(self.args.gen_cpu)]
        if rate:
            argv.append(str(rate))
        return argv

    # -- untraced ---------------------------------------------------------------------------------
    def baseline(self, n: int) -> Run:
        run = Run(UNTRACED, n, 0)
        out = subprocess.run(self.gen_argv(n, 0), capture_output=True, check=True).stdout
        run.gen_pid, _, run.gen_elapsed_ns, run.gen_cpu_ns = parse_gen(out)
        return run

    # -- npu-trace --------------------------------------------------------------------------------
    def npu_trace(self, n: int, rate: float) -> Run:
        return self._npu_run(NPU, n, rate)

    def npu_trace_no_text(self, n: int, rate: float) -> Run:
        return self._npu_run(NPU_NO_TEXT, n, rate, text=False)

    def _npu_run(self, tool: str, n: int, rate: float, text: bool = True) -> Run:
        run = Run(tool, n, rate)
        out, total = self._npu_collect(run, [EVENT], self.gen_argv(n, rate), by_pid=True, text=text)
        run.gen_pid, _, run.gen_elapsed_ns, run.gen_cpu_ns = parse_gen(out)
        run.other_events = total - run.events
        return run

    def _npu_collect(
        self, run: Run, patterns: List[str], argv: List[str], by_pid: bool, text: bool = True
    ) -> Tuple[bytes, int]:
        """Trace `argv` as `npu-trace stream` does, to /dev/null (the live source, the one pump, the block
        timeline, each block's text made and written: `npu_trace.sinks.text.printing`), or without `text`
        only the blocks taken (what the text costs); fills run.events (the child's, or all when not `by_pid`),
        lost, CPU and wall time. Returns (the child's stdout, every event walked)."""
        from npu_trace.pipeline import Batch, pump
        from npu_trace.pipeline.blocktimeline import LiveBlocks
        from npu_trace.sinks.text import StreamPrinter, printing
        from npu_trace.sources.comm import CommCache
        from npu_trace.sources.live_trace import LiveTrace
        from npu_trace.sources.tracefs_source import TracefsSession

        mine = PidCount()
        # the events trace-cmd records on the same workload, no more (no task:task_newtask companion)
        session = TracefsSession(patterns, buffer_kb=self.args.buffer_kb, tag="bench", companions=())
        with LiveTrace(session) as source, open(os.devnull, "w") as devnull:
            timeline = source.block_timeline(keep_unknown=True)

            class Counted(StreamPrinter):
                def write_block(self, block: Any) -> None:
                    mine.add(block)
                    super().write_block(block)

            if text:
                sink = printing(timeline, Counted(devnull, "text", CommCache()))
            else:
                live = LiveBlocks(timeline, time.monotonic)

                def sink(batch: Batch) -> None:
                    block = live.push(batch)
                    if block is not None:
                        mine.add(block)

            t0, c0 = time.monotonic(), cpu_self()
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
            gpid = mine.pid = proc.pid
            pump(source, sink, until=lambda: proc.poll() is not None, poll_s=self.args.poll_ms / 1000.0)
            total = timeline.events
            run.reader_cpu_s = cpu_self() - c0
            run.wall_s = time.monotonic() - t0
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.stdout.close()
            run.lost = session.ledger.total
            run.incomplete = session.ledger.incomplete()
            if timeline.malformed:
                run.notes.append(f"{timeline.malformed} malformed records")
            if run.incomplete:
                run.notes.append(session.ledger.summary())
        if proc.returncode:
            raise BenchError(f"{argv[0]} exited with {proc.returncode}")
        run.gen_pid = gpid
        run.events = mine.count if by_pid else total
        return out, total

    def anchor(self, n: int, rate: float) -> Run:
        run = Run(ANCHOR, n, rate)
        out, children = self.anchor_record(
            run, EVENT, ["taskset", "-c", str(self.args.gen_cpu), *self.gen_argv(n, rate)]
        )
        run.gen_pid, _, run.gen_elapsed_ns, run.gen_cpu_ns = parse_gen(out)
        # trace-cmd's children (its per-CPU recorders) and the generator are all in RUSAGE_CHILDREN.
        run.reader_cpu_s = max(0.0, children - run.gen_cpu_ns / 1e9)
        run.events, total = self.count_dat(f"-{run.gen_pid} ".encode(), b"sys_enter_getpid:")
        run.other_events = total - run.events
        run.lost = self.anchor_loss()
        if self.keep_files and rate == 0 and self.dat_kept is None:
            self.dat_kept, self.dat_kept_run = os.path.join(self.tmp, "anchor-kept.dat"), run
            os.rename(self.dat, self.dat_kept)
        else:
            os.unlink(self.dat)
        return run

    # -- npu-trace record -------------------------------------------------------------------------
    def record(self, n: int, rate: float) -> Run:

        return record_run(self, n, rate)

    def anchor_record(self, run: Run, event: Events, command: List[str]) -> Tuple[bytes, float]:
        """`trace-cmd record` of `command` in instance npubench; returns (its output, CPU of the child tree)."""
        remove_instance(self.root, ANCHOR_INSTANCE)  # a leftover of a killed run
        if os.path.exists(self.dat):
            os.unlink(self.dat)
        argv = ["taskset", "-c", str(self.args.reader_cpu), *self.trace_cmd_record(event, self.dat, command)]
        try:
            c0, t0 = cpu_children(), time.monotonic()
            proc = subprocess.run(argv, env=self.anchor_env(), cwd=self.anchor_cwd(), capture_output=True, check=False)
            run.wall_s = time.monotonic() - t0
            children = cpu_children() - c0
        finally:
            if remove_instance(self.root, ANCHOR_INSTANCE):
                run.notes.append("trace-cmd left its instance behind: removed")
        if proc.returncode:
            raise BenchError(f"trace-cmd record exited with {proc.returncode}: {proc.stderr.decode()[-800:]}")
        run.dat_bytes = os.path.getsize(self.dat)
        return proc.stdout + proc.stderr, children

    def trace_cmd_record(self, event: Events, dat: str, command: List[str]) -> List[str]:
        """`trace-cmd record` of `command` into `dat`, in instance npubench (run it with anchor_env/anchor_cwd);
        `event`: one event (or system) or several."""
        events = [event] if isinstance(event, str) else list(event)
        return [
            self.trace_cmd, "record", "-q", "-d",  # -d: do not touch the function tracer (EPERM here)
            "-B", ANCHOR_INSTANCE, *(x for e in events for x in ("-e", e)), "-C", "mono",
            "-b", str(self.args.buffer_kb), "-o", dat, "--", *command,
        ]  # fmt: skip

    def anchor_env(self) -> Dict[str, str]:
        return dict(os.environ, LD_PRELOAD=self.shim)

    def anchor_cwd(self) -> str:
        workdir = os.path.join(self.tmp, "tc-cwd")  # trace-cmd drops "(null).cpuN" files in its cwd
        os.makedirs(workdir, exist_ok=True)
        return workdir

    # -- workload B: the simulated NPU ------------------------------------------------------------
    def sim_prepare(self) -> Tuple[int, int]:
        """Register the simulator's uprobes and write the plan; returns (actions, events expected)."""
        from npu_trace import sim
        from npu_trace.device import hal
        from npu_trace.ftrace.tracefs import Tracefs
        from npu_trace.sim import runner, scenarios

        a = self.args
        self.sim_loaded = sim.load(Tracefs(self.root))
        actions = scenarios.plan(a.sim_scenario, 1, a.sim_duration, a.sim_rate, a.sim_devices)
        self.sim_plan = os.path.join(self.tmp, "plan.txt")
        self.sim_out = os.path.join(self.tmp, "sim-out.txt")
        with open(self.sim_plan, "w") as f:
            f.writelines(runner.plan_line(x) for x in actions)
        self.sim_actions = len(actions)
        return len(actions), sum(1 + int(hal.FUNC_BY_NAME[x.func].hal) for x in actions)

    def sim_release(self) -> None:
        from npu_trace import sim
        from npu_trace.ftrace.tracefs import Tracefs

        if getattr(self, "sim_loaded", None) is not None and self.sim_loaded.changed:
            sim.unload(Tracefs(self.root))  # registered by this bench: leave uprobe_events as found
            self.sim_loaded = None

    def _sim_elapsed(self) -> int:
        from npu_trace.sim import runner

        with open(self.sim_out) as f:
            rows = runner.parse_output(f.read(), self.sim_actions).rows
        return max(r.end_ns for r in rows) - min(r.start_ns for r in rows) if rows else 0

    def sim_npu(self, n: int, rate: float) -> Run:
        run = Run(NPU, n, rate)
        argv = ["taskset", "-c", str(self.args.gen_cpu), self.sim_loaded.binary, self.sim_plan, self.sim_out]
        self._npu_collect(run, ["ascend:*"], argv, by_pid=False)
        run.gen_elapsed_ns = self._sim_elapsed()
        return run

    def sim_anchor(self, n: int, rate: float) -> Run:
        run = Run(ANCHOR, n, rate)
        cpu_file = os.path.join(self.tmp, "sim-cpu.txt")
        command = ["/usr/bin/time", "-o", cpu_file, "-f", "%U %S", "taskset", "-c", str(self.args.gen_cpu),
                   self.sim_loaded.binary, self.sim_plan, self.sim_out]  # fmt: skip
        _, children = self.anchor_record(run, "ascend", command)
        with open(cpu_file) as f:
            user, system = (float(x) for x in f.read().split()[-2:])
        run.gen_cpu_ns = int((user + system) * 1e9)
        run.reader_cpu_s = max(0.0, children - user - system)
        run.gen_elapsed_ns = self._sim_elapsed()
        run.events, _ = self.count_dat(b": ascend_", b": ascend_")
        run.lost = self.anchor_loss()
        os.unlink(self.dat)
        return run

    def count_dat(self, mine_tag: Tags, event_tag: bytes, dat: Optional[str] = None) -> Tuple[int, int]:
        """(lines with `mine_tag` (or any of several), lines with `event_tag`) of `trace-cmd report` on the file
        (`dat`, default the last record's). For the generator, `mine_tag` is "-<pid> " ("gen_syscalls-1234  [000]
        ...")."""
        tags = (mine_tag,) if isinstance(mine_tag, bytes) else tuple(mine_tag)
        mine = total = 0
        proc = subprocess.Popen(
            [self.trace_cmd, "report", "-q", "-i", dat or self.dat], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        pending = b""
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            pending += chunk
            cut = pending.rfind(b"\n") + 1  # count whole lines only: a tag is never split across chunks
            if cut:
                text, pending = pending[:cut], pending[cut:]
                mine += sum(map(text.count, tags))
                total += text.count(event_tag)
        mine += sum(map(pending.count, tags))
        total += pending.count(event_tag)
        if proc.wait():
            raise BenchError(f"trace-cmd report exited with {proc.returncode}")
        return mine, total

    def anchor_loss(self, dat: Optional[str] = None) -> int:
        """Overrun + dropped events of the instance, from the stats trace-cmd stored at the end of the record
        (`dat`, default the last record's file)."""
        out = subprocess.run(
            [self.trace_cmd, "report", "--stat", "-i", dat or self.dat], capture_output=True, text=True, check=False
        ).stdout
        lost = 0
        section = out.split(f"Buffer: {ANCHOR_INSTANCE}", 1)[-1]
        for m in re.finditer(r"^(overrun|dropped events):\s*(\d+)", section, re.M):
            lost += int(m.group(2))
        return lost


# ---- orchestration ---------------------------------------------------------------------------------
def describe(run: Run) -> str:
    text = (
        f"  {run.tool:<9} target={'max' if not run.target_rate else f'{run.target_rate / 1e6:g}M/s':<8} "
        f"events={run.events:>9,} lost={run.lost:>8,} rate={run.rate / 1e6:6.3f} M/s "
        f"gen={run.gen_elapsed_ns / 1e9:6.3f}s reader_cpu={run.reader_cpu_s:6.3f}s wall={run.wall_s:6.3f}s"
    )
    if run.other_events:
        text += f" other_pids={run.other_events}"
    if run.dat_bytes:
        text += f" dat={run.dat_bytes:,}B"
    if run.mismatch:
        text += f"  *** MISMATCH: events {run.events:,} + lost {run.lost:,} != N {run.n:,} ***"
    elif run.incomplete and not run.lost:
        text += "  (page-missed flag without a count)"
    for note in run.notes:
        text += f"  [{note}]"
    return text


def measure(fn: Callable[[int, float], Run], n: int, rate: float, repeat: int, runs: List[Run]) -> List[Run]:
    got = []
    for _ in range(repeat):
        run = fn(n, rate)
        log(describe(run))
        got.append(run)
        runs.append(run)
    return got


def summarize(tool: str, full: List[Run], steps: List[Tuple[float, List[Run]]], baseline_ns: float) -> Dict[str, Any]:
    """Medians of the full-speed runs, and the highest lossless rate (full speed or the best lossless step)."""
    s: Dict[str, Any] = {"tool": tool}
    if not full:
        return s
    s["n"] = full[0].n
    s["events"] = int(median([r.events for r in full]))
    s["lost"] = int(median([r.lost for r in full]))
    s["full_speed_rate"] = median([r.rate for r in full])
    s["full_speed_lossless_runs"] = sum(r.lossless for r in full)
    s["reader_cpu_s_per_m"] = median([r.reader_cpu_s / (r.events / 1e6) for r in full if r.events])
    s["gen_slowdown"] = median([r.gen_elapsed_ns for r in full]) / baseline_ns if baseline_ns else 0.0
    s["wall_s"] = median([r.wall_s for r in full])
    s["mismatches"] = sum(r.mismatch for r in full) + sum(r.mismatch for _, rs in steps for r in rs)
    dat = [r.dat_bytes for r in full if r.dat_bytes]
    s["bytes_per_event"] = median(dat) / full[0].n if dat else None
    s["lossless_rate"] = None
    s["lossless_at"] = None
    if all(r.lossless for r in full):
        pace = full[0].target_rate
        s["lossless_rate"], s["lossless_at"] = s["full_speed_rate"], f"{pace / 1e6:g}M/s" if pace else "max"
    else:
        for target, rs in steps:
            if rs and all(r.lossless for r in rs):
                s["lossless_rate"], s["lossless_at"] = median([r.rate for r in rs]), f"{target / 1e6:g}M/s"
                break
    return s


def fmt_rate(v: Optional[float]) -> str:
    return f"{v / 1e6:.3f} M/s" if v else "none"


def print_table(summaries: List[Dict[str, Any]], baseline_rate: Optional[float]) -> None:
    head = (
        "tool",
        "events",
        "lost",
        "lossless ev/s",
        "(at pace)",
        "full-speed ev/s",
        "reader CPU s/M ev",
        "gen slowdown",
        "B/event on disk",
        "wall s",
    )
    rows = [head]
    for s in summaries:
        if "n" not in s:
            continue
        bpe = s["bytes_per_event"]
        slow = f"x{s['gen_slowdown']:.2f}" if s["gen_slowdown"] else "-"
        rows.append((
            s["tool"], f"{s['events']:,}", f"{s['lost']:,}", fmt_rate(s["lossless_rate"]), s["lossless_at"] or "-",
            fmt_rate(s["full_speed_rate"]), f"{s['reader_cpu_s_per_m']:.3f}", slow,
            f"{bpe:.2f}" if bpe is not None else "n/a (not written)", f"{s['wall_s']:.2f}",
        ))  # fmt: skip
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    log("")
    if baseline_rate:
        log(f"untraced generator: {baseline_rate / 1e6:.3f} M calls/s (median)")
    for i, row in enumerate(rows):
        log("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            log("  ".join("-" * w for w in widths))


def ratios(npu: Dict[str, Any], anchor: Dict[str, Any]) -> Dict[str, Optional[float]]:
    def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return a / b if a and b else None

    return {
        "lossless_rate": ratio(npu.get("lossless_rate"), anchor.get("lossless_rate")),
        "reader_cpu_per_event": ratio(npu.get("reader_cpu_s_per_m"), anchor.get("reader_cpu_s_per_m")),
        "gen_slowdown": ratio(npu.get("gen_slowdown"), anchor.get("gen_slowdown")),
    }


def lossless_rounds(npu: List[Run], anchor: List[Run]) -> List[float]:
    """Round by round, npu-trace's rate over trace-cmd's, when both were lossless at full speed in every round
    (their lossless rates are then their full-speed rates, and the runs of a round share their minute: this VM's
    speed drifts by tens of percent between minutes); [] otherwise (a lossless rate found by pacing)."""
    if not npu or not anchor or not all(r.lossless for r in [*npu, *anchor]):
        return []
    return [a.rate / b.rate for a, b in zip(npu, anchor) if a.rate and b.rate]


def workload_b(args: argparse.Namespace, bench: Bench) -> Dict[str, Any]:
    """The simulated NPU's uprobe events, when npu_trace.sim offers run_scenario: the same planned scenario
    traced by each tool (the executor pinned like the generator); events expected come from the plan."""
    try:
        import npu_trace.sim as sim
    except ImportError as exc:
        log(f"workload B: sim not available ({exc})")
        return {"skipped": "sim not available"}
    if not hasattr(sim, "run_scenario"):
        log("workload B: sim not available (npu_trace.sim has no run_scenario)")
        return {"skipped": "sim not available"}
    tools: List[Tuple[str, Callable[[int, float], Run]]] = [(NPU, bench.sim_npu)]
    if not args.no_anchor:
        tools.append((ANCHOR, bench.sim_anchor))
    try:
        actions, expected = bench.sim_prepare()
        log("")
        log(
            f"workload B: simulated NPU uprobes (ascend:*), scenario {args.sim_scenario}, "
            f"{args.sim_duration:g} s at {args.sim_rate:g} calls/s on {args.sim_devices} device(s): "
            f"{actions:,} calls, {expected:,} events expected"
        )
        full: Dict[str, List[Run]] = {t: [] for t, _ in tools}
        runs: List[Run] = []
        for i in range(args.repeat):
            log(f"round {i + 1}/{args.repeat}")
            for tool, fn in tools:
                full[tool] += measure(fn, expected, args.sim_rate, 1, runs)
    finally:
        bench.sim_release()
    summaries = [summarize(t, full[t], [], 0.0) for t, _ in tools]
    print_table(summaries, None)
    result: Dict[str, Any] = {
        "workload": "B", "scenario": args.sim_scenario, "duration_s": args.sim_duration, "rate": args.sim_rate,
        "devices": args.sim_devices, "actions": actions, "expected_events": expected,
        "summaries": summaries, "runs": [r.to_json() for r in runs],
    }  # fmt: skip
    if len(summaries) > 1:
        r = result["ratios"] = ratios(summaries[0], summaries[1])
        log("npu-trace / trace-cmd: " + ", ".join(f"{k} {v:.2f}x" if v else f"{k} n/a" for k, v in r.items()))
    return result


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=5_000_000, help="getpid calls per run (N)")
    add_common_options(p)
    p.add_argument("--gen-cpu", type=int, default=0, help="CPU the generator is pinned to")
    p.add_argument("--rates", default=DEFAULT_RATES, help="paces (calls/s) tried when full speed loses events")
    p.add_argument("--no-sweep", action="store_true", help="do not step the pace down when full speed loses")
    p.add_argument("--no-sim", action="store_true", help="skip workload B (the simulated NPU)")
    p.add_argument("--no-record", action="store_true", help="skip npu-trace record and the replay/check figures")
    p.add_argument("--sim-scenario", default="steady", help="workload B: the simulator's scenario")
    p.add_argument("--sim-duration", type=float, default=2.0, help="workload B: seconds of scenario")
    p.add_argument("--sim-rate", type=float, default=50_000, help="workload B: calls/s (the sim allows <= 200k)")
    p.add_argument("--sim-devices", type=int, default=2, help="workload B: simulated devices")
    p.add_argument("--no-check", action="store_true", help="skip the check figures (benchmarks.checks)")
    p.add_argument("--check-only", action="store_true", help="only the check figures (benchmarks.checks)")
    p.add_argument("--stream-repeat", type=int, default=STREAM_ROUNDS,
                   help=f"workload A: rounds at full speed (default {STREAM_ROUNDS}; each ~15 s, see STREAM_ROUNDS)")
    p.add_argument("--check-repeat", type=int, default=CHECK_ROUNDS,
                   help=f"check figures: rounds (default {CHECK_ROUNDS}; each a few seconds, see benchmarks.checks)")
    p.add_argument("--gen-events", type=float, default=2e6,
                   help="check figures: events of the generated recording (0: none; the RSS target is for 1e7)")
    p.add_argument("--gen-file", metavar="NPT", help="check figures: this generated recording (and its .truth.json)")
    p.add_argument("--heavy-duration", type=float, default=HEAVY.duration_s, metavar="S",
                   help=f"check figures: seconds of the detector-heavy workload (default {HEAVY.duration_s:g})")
    args = p.parse_args(argv)
    if min(args.events, args.repeat, args.stream_repeat, args.check_repeat, args.buffer_kb, args.heavy_duration) <= 0:
        p.error("--events, --repeat, --stream-repeat, --check-repeat, --buffer-kb and --heavy-duration must be "
                "positive")  # fmt: skip
    args.rate_steps = sorted((float(x) for x in args.rates.split(",") if x.strip()), reverse=True)
    return args


def run_all(args: argparse.Namespace, bench: Bench) -> Dict[str, Any]:
    n, repeat, rounds_a = args.events, args.repeat, args.stream_repeat
    tools: List[Tuple[str, Callable[[int, float], Run]]] = [(NPU, bench.npu_trace)]
    tools.append((NPU_NO_TEXT, bench.npu_trace_no_text))
    if not args.no_record:
        tools.append((REC, bench.record))
    if not args.no_anchor:
        tools.append((ANCHOR, bench.anchor))
    runs: List[Run] = []
    base: List[Run] = []
    full: Dict[str, List[Run]] = {t: [] for t, _ in tools}
    log(
        f"workload A: {EVENT}, N={n:,}, generator on cpu{args.gen_cpu}, tracers on cpu{args.reader_cpu}, "
        f"buffer {args.buffer_kb} KiB per CPU, {rounds_a} round(s) at full speed, medians reported"
    )
    # Interleaved (untraced, then the tools) x rounds, so that a drift of the host hits every tool alike; the
    # tools in the reverse order every other round (benchmarks.common.alternated)
    for i in range(rounds_a):
        log(f"round {i + 1}/{rounds_a} at full speed")
        run = bench.baseline(n)
        log(describe(run))
        base.append(run)
        runs.append(run)
        for tool, fn in alternated(tools, i):
            full[tool] += measure(fn, n, 0, 1, runs)
    baseline_ns = median([r.gen_elapsed_ns for r in base])
    steps: Dict[str, List[Tuple[float, List[Run]]]] = {t: [] for t, _ in tools}
    for tool, fn in tools:
        if args.no_sweep or all(r.lossless for r in full[tool]):
            continue
        top = median([r.rate for r in full[tool]])
        for target in args.rate_steps:
            if target >= top:
                continue
            log(f"{tool} lost events at full speed: pacing the generator at {target / 1e6:g}M calls/s")
            got = measure(fn, n, target, repeat, runs)
            steps[tool].append((target, got))
            if all(r.lossless for r in got):
                break
    summaries = [summarize(t, full[t], steps[t], baseline_ns) for t, _ in tools]
    baseline_rate = n / (baseline_ns / 1e9)
    print_table(summaries, baseline_rate)
    result: Dict[str, Any] = {
        "workload": "A", "event": EVENT, "n": n, "buffer_kb": args.buffer_kb, "repeat": repeat, "rounds": rounds_a,
        "gen_cpu": args.gen_cpu, "reader_cpu": args.reader_cpu, "poll_ms": args.poll_ms,
        "gc": {"frozen": True, "threshold": list(gc.get_threshold())},
        "baseline_rate": baseline_rate, "summaries": summaries, "runs": [r.to_json() for r in runs],
    }  # fmt: skip
    by_tool = {s["tool"]: s for s in summaries}
    npu = by_tool[NPU]
    anchor = by_tool.get(ANCHOR)
    mism = sum(s.get("mismatches", 0) for s in summaries)
    if mism:
        log(f"*** {mism} run(s) where events + lost != N: see the MISMATCH lines above ***")
    log("")
    cpu_m = npu.get("reader_cpu_s_per_m")
    if cpu_m:
        log(
            f"npu-trace decode capacity: {1 / cpu_m:.3f} M events per reader-CPU-second "
            f"({cpu_m * 1000:.0f} ns of reader CPU per event)"
        )
    bare = by_tool[NPU_NO_TEXT].get("reader_cpu_s_per_m")
    if cpu_m and bare:
        result["text_cost"] = cpu_m / bare - 1
        log(f"the text: {cpu_m * 1000:.0f} vs {bare * 1000:.0f} ns of reader CPU per event without it "
            f"(+{(cpu_m / bare - 1) * 100:.0f}%)")  # fmt: skip
    rounds_ = result["lossless_rounds"] = lossless_rounds(full[NPU], full[ANCHOR]) if anchor is not None else []
    if anchor is not None:
        r = result["ratios"] = ratios(npu, anchor)
        log(
            "npu-trace / trace-cmd: "
            + ", ".join(f"{k} {v:.2f}x" if v is not None else f"{k} n/a" for k, v in r.items())
        )
    lr = npu.get("lossless_rate") or 0.0
    goal = [f"npu-trace (stream to /dev/null) lossless {lr / 1e6:.3f} M ev/s vs target 1.0 M ev/s: "
            f"{'met' if lr >= 1e6 else 'NOT met'}"]  # fmt: skip
    if anchor is not None and result["ratios"]["lossless_rate"] is not None:
        rl, text = judged_ratio(result["ratios"]["lossless_rate"], rounds_, "trace-cmd's lossless rate")
        goal.append(f"{text} vs target 1.0x: {'met' if rl >= 1.0 else 'NOT met'}")
    if anchor is not None and result["ratios"]["reader_cpu_per_event"] is not None:
        rc = result["ratios"]["reader_cpu_per_event"]
        goal.append(f"reader CPU per event {rc:.2f}x trace-cmd's vs target at most 2x: "
                    f"{'met' if rc <= 2 else 'NOT met'}")  # fmt: skip
    log("targets: " + "; ".join(goal))
    if not args.no_record:
        result["record"] = report(args, bench, by_tool)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_bench(parse_args(argv), ingest_parts)


def ingest_parts(args: argparse.Namespace, bench: Bench) -> Dict[str, Any]:
    """Workload A (with npu-trace record and its replay/check figures), workload B, the check figures."""
    bench.build(anchor=not args.no_anchor)
    result: Dict[str, Any] = {}
    if not args.check_only:
        result = run_all(args, bench)
        result["workload_b"] = {"skipped": "--no-sim"} if args.no_sim else workload_b(args, bench)
    if not args.no_check:
        result["check"] = check_figures(args, bench)
    return result


def run_bench(args: argparse.Namespace, body: Callable[[argparse.Namespace, Bench], Dict[str, Any]]) -> int:
    """Root, the reader pinned to its CPU, GC tuned, a temporary folder and a `Bench`: `body(args, bench)`; then the
    global tracefs state put back as found, instances left behind named, the figures written (--json)."""
    if os.geteuid() != 0:
        log("bench: needs root (tracefs instances, trace-cmd)")
        return 2
    sys.path.insert(0, os.path.dirname(HERE))
    from npu_trace.ftrace.tracefs import Tracefs

    root = Tracefs.find().root
    state = GlobalState(root)
    try:
        os.sched_setaffinity(0, {args.reader_cpu})
    except OSError as exc:
        log(f"bench: cannot pin the reader to cpu{args.reader_cpu}: {exc}")
        return 2
    # Cyclic GC would scan the millions of event tuples the reader builds: freeze what exists, collect rarely.
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 50)
    log(f"bench: reader pinned to cpu{args.reader_cpu}; gc.freeze() done, gc.set_threshold{gc.get_threshold()}")
    result: Dict[str, Any] = {}
    rc = 0
    with tempfile.TemporaryDirectory(prefix="npu-bench-") as tmp:
        bench = Bench(args, tmp, root)
        try:
            result = body(args, bench)
        except BenchError as exc:
            log(f"bench: {exc}")
            rc = 1
        finally:
            if not args.no_anchor:
                remove_instance(root, ANCHOR_INSTANCE)
            restored = state.restore()
            left = state.new_instances()
    for path in restored:
        log(f"bench: restored {path}")
    if left:
        log(f"bench: *** tracefs instances left behind: {', '.join(left)} ***")
    result["restored"] = restored
    result["instances_left"] = left
    if args.json and result:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        log(f"bench: figures written to {args.json}")
    return rc


if __name__ == "__main__":
    # benchmarks/record.py imports this module by name: let it find this very module (one BenchError, one Run)
    sys.modules.setdefault("benchmarks.ingest", sys.modules[__name__])
    sys.exit(main())
