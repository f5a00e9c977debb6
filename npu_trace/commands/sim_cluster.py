"""`npu-trace sim cluster --hosts N --devices D --scenario ecc-reset -o DIR --truth FILE`: N simulated hosts of one
job on this machine at once (npu_trace.sim.cluster_plan plans them).

Each host is its own executor process (the simulator's C program) and its own recorder: an `npu-trace record`
process with a private tracefs instance scoped to that executor (`--pid`), following that host's application
log (`--app-log DIR/HOST/app.log`), and writing the host's simulated identity and wall clock (`--sim-host`) into
`DIR/HOST/trace.npt`. The order: the executors are started and hold; the recorders start and say they trace;
the plans are handed over at once (one t0 for all hosts); the application logs are written on the executors'
clock; when the executors are done, the recorders are stopped (SIGINT: their last read, the files closed). The
truth (`--truth`, default DIR/truth.json) says the origin, the consequences, each host's identity and clock
offset, and what the run cost: the wall time and each recorder's CPU time (os.wait4's rusage).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace import sim
from npu_trace.errors import SimulatorError, UsageError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import build, cluster_plan
from npu_trace.sim.runner import ScenarioRun, write_truth
from npu_trace.sim.side_channels import AppLogChannel

READY_TIMEOUT_S = 60.0  # a recorder must say it traces within this (8 of them start at once on 2 CPUs)
STOP_TIMEOUT_S = 60.0
BUFFER_KB = 512  # per CPU and host: a simulated host makes a few hundred events a second


def add_parser(sub: Any, add_host_options: Any) -> None:
    p = sub.add_parser("cluster", help="N simulated hosts of one job: one card's incident, the others' collective "
                       "timeouts; each host recorded to DIR/HOST/trace.npt",
                       description="Run N simulated hosts at once, each its own executor and its own recording "
                       "(a tracefs instance scoped to its executor, its application log, its own identity and a "
                       "wall clock off by up to 50 ms), for `npu-trace cluster DIR`. Needs root "
                       "(uprobes).")  # fmt: skip
    p.add_argument("--hosts", type=int, default=2, help="simulated hosts (default 2)")
    p.add_argument("--devices", type=int, default=2, help="devices per host, each a rank of the job (default 2)")
    p.add_argument("--scenario", choices=cluster_plan.SCENARIOS, default="ecc-reset",
                   help="ecc-reset (one card fails, the job's other ranks time out) or steady (a healthy cluster)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=8.0, help="seconds (default 8)")
    p.add_argument("--rate", type=float, default=100.0, help="background calls per second per host (default 100)")
    p.add_argument("--lag", default="1:5", metavar="MIN:MAX",
                   help="the other ranks time out MIN to MAX seconds after the card fails (default 1:5)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="DIR/HOST/trace.npt for every host")
    p.add_argument("--truth", metavar="FILE", help="the truth JSON (default DIR/truth.json)")
    add_host_options(p)
    p.set_defaults(func=run)


def parse_lag(text: str) -> Tuple[float, float]:
    lo, sep, hi = text.partition(":")
    try:
        return (float(lo), float(hi)) if sep else (float(lo), float(lo))
    except ValueError:
        raise UsageError(f"--lag {text!r}: MIN:MAX in seconds (1:5)") from None


class _Recorder:
    """One host's `npu-trace record` process; its stderr in a file (read for its start line)."""

    def __init__(self, host: cluster_plan.ClusterHost, pid: int, out: str, work: str) -> None:
        self.host, self.out = host, out
        self.app_log = os.path.join(os.path.dirname(out), "app.log")
        ident = os.path.join(work, f"{host.name}.json")
        with open(ident, "w", encoding="utf-8") as f:
            json.dump(host.identity.to_json(), f)
        self.log = os.path.join(work, f"{host.name}.log")
        argv = [sys.executable, "-m", "npu_trace", "record", "-o", out, "--profile", "sim", "--channels", "none",
                "--app-log", self.app_log, "--sim-host", ident, "--pid", str(pid),
                "--buffer-kb", str(BUFFER_KB)]  # fmt: skip
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self.rusage: Optional[Any] = None

    def said(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise SimulatorError(f"the recorder of {self.host.name} exited ({self.proc.returncode}): "
                                 f"{self.said().strip()[-400:]}")  # fmt: skip
        return "tracing " in self.said()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def reap(self, deadline: float) -> None:
        """Wait for it to end (its CPU time kept); killed past the deadline."""
        while time.monotonic() < deadline:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.rusage = usage
                return
            time.sleep(0.02)
        self.proc.kill()
        self.proc.wait()
        raise SimulatorError(f"the recorder of {self.host.name} did not stop within {STOP_TIMEOUT_S:.0f} s")


def run(args: argparse.Namespace) -> int:
    from npu_trace.commands.sim import host_from_args

    lag = parse_lag(args.lag)
    plan = cluster_plan.plan_cluster(args.hosts, args.devices, args.scenario, args.seed, args.duration, args.rate, lag,
                                host_from_args(args))  # fmt: skip
    os.makedirs(args.output, exist_ok=True)
    truth = run_cluster(plan, args.output, sim.load(Tracefs.find()).binary)
    path = args.truth or os.path.join(args.output, "truth.json")
    write_truth(truth, path)
    print(summary(truth, path), file=sys.stderr)
    return 0


def run_cluster(plan: cluster_plan.ClusterPlan, out_dir: str, binary: Optional[str] = None) -> Dict[str, Any]:
    """Run the plan (see the module docstring); its truth."""
    started = time.monotonic()
    meta = {"scenario": plan.scenario, "seed": plan.seed, "clock": "mono",
            "params": {"duration_s": plan.duration_s, "rate": plan.rate, "devices": plan.devices},
            "host": {}}  # fmt: skip
    runner = ScenarioRun(meta, plan.actions(), binary or build.ensure_built(), processes=len(plan.hosts), hold=True)
    work = tempfile.mkdtemp(prefix="npu-sim-cluster.")
    recorders: List[_Recorder] = []
    logs: List[AppLogChannel] = []
    try:
        for h, pid in zip(plan.hosts, runner.pids):
            os.makedirs(os.path.join(out_dir, h.name), exist_ok=True)
            recorders.append(_Recorder(h, pid, os.path.join(out_dir, h.name, "trace.npt"), work))
        ready_s = _wait_ready(recorders, started)
        runner.go()
        logs = [AppLogChannel(h.actions, r.app_log, pid, extra=h.reports) for h, r, pid in
                zip(plan.hosts, recorders, runner.pids)]  # fmt: skip
        for log in logs:
            log.start(runner.t0_ns)
        executed = runner.wait()
        _stop(logs, recorders)
    except BaseException:
        runner.terminate()
        for r in recorders:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _truth(plan, executed, recorders, logs, ready_s, time.monotonic() - started)


def _wait_ready(recorders: Sequence[_Recorder], started: float) -> float:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(r.ready() for r in recorders):
        if time.monotonic() > deadline:
            late = [r.host.name for r in recorders if not r.ready()]
            raise SimulatorError(f"recorders not tracing within {READY_TIMEOUT_S:.0f} s: {', '.join(late)}")
        time.sleep(0.05)
    return time.monotonic() - started


def _stop(logs: Sequence[AppLogChannel], recorders: Sequence[_Recorder]) -> None:
    for log in logs:
        log.join(timeout=5)
        log.stop()
    for r in recorders:
        r.stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for r in recorders:
        r.reap(deadline)
        if r.proc.returncode != 0:
            raise SimulatorError(f"the recorder of {r.host.name} failed ({r.proc.returncode}): "
                                 f"{r.said().strip()[-400:]}")  # fmt: skip


def _truth(plan: cluster_plan.ClusterPlan, executed: Dict[str, Any], recorders: Sequence[_Recorder],
           logs: Sequence[AppLogChannel], ready_s: float, wall_s: float) -> Dict[str, Any]:  # fmt: skip
    truth = plan.truth(int(executed["t0_ns"]))
    for entry, r, log, proc in zip(truth["hosts"], recorders, logs, executed["processes"]):
        usage = r.rusage
        cpu = round(usage.ru_utime + usage.ru_stime, 3) if usage is not None else None
        entry.update(recording=os.path.relpath(r.out, os.path.dirname(os.path.dirname(r.out))), pid=proc["pid"],
                     app_log=log.truth(int(executed["t0_ns"])), recorder_cpu_s=cpu)  # fmt: skip
    truth["actions"] = len(executed["actions"])
    truth["cost"] = {"wall_s": round(wall_s, 3), "recorders_ready_s": round(ready_s, 3),
                     "recorders_cpu_s": round(sum(h["recorder_cpu_s"] or 0 for h in truth["hosts"]), 3),
                     "load_avg": list(os.getloadavg())}  # fmt: skip
    return truth


def summary(truth: Dict[str, Any], path: str) -> str:
    origin = truth["origin"]
    what = (f"origin {origin['host']} device {origin['device']}, {len(truth['consequences'])} consequences"
            if origin else "healthy")  # fmt: skip
    cost = truth["cost"]
    return (f"sim cluster {truth['scenario']} seed={truth['seed']}: {len(truth['hosts'])} hosts x {truth['devices']} "
            f"devices, {truth['actions']} calls; {what}; {cost['wall_s']:.1f} s wall (recorders ready after "
            f"{cost['recorders_ready_s']:.1f} s, {cost['recorders_cpu_s']:.1f} s CPU in all); truth in {path}")
