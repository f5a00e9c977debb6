"""Run a planned scenario through the native executor and produce its ground truth.

Plan file (one action per line, in plan order):
`t_ns thread after flags func ret delay_ns a0 a1 a2 a3 a4 a5 str` where `thread` is the executor thread that runs
the action (0..63, 0 = its main thread; npu_trace.sim.threads says which thread does what), `after` the index of
an earlier action that must have returned before this one starts (-1: none), `flags` 1 = away (run on a CPU
other than the one `after` returned on) + 2 = hop (change CPU inside the call); then the numeric arguments in C
order with the string argument left out and given last ("-" when none). The single-thread plan of old is every
action on thread 0 with `after` -1 and flags 0. With `Host.migrate_ms` the executor runs with
`-m MIGRATE_US` and moves threads 1.. between CPUs that often.

The executor answers with a first line `cpus N c0 .. cN-1 pinned P` (the CPUs it could use; P 1 when it pinned
each thread to one CPU at a time, so the CPU it observed is the one its probes fired on), then one line per action
in plan order: `start_ns end_ns ret tid cpu_in cpu_out` (CLOCK_MONOTONIC, the `mono` trace clock, just before /
after the call; the thread id; sched_getcpu() just before / after the call).

Truth file: `counts`, `kind_counts`, `event_counts`, `start_ns` (earliest start), `end_ns` (latest end) and
`actions` (seq, kind, phase, group, func, events, dev, args, ret, delay_ns, t_ns, start_ns, end_ns), as ever;
added: per action `thread`, `after` (seq of the action it waited for, or null), `away`, `hop`, `tid` and
`cpus` (the CPU of each of its `events`, as the executor observed), and `host` (threads, app_threads,
migrate_ms, hop_share, cpus, pinned).

The executor's t0 (its clock's origin: the planned offsets count from it) is taken right after it has read the
plan. The plan is therefore handed over through a FIFO: once the executor has taken every byte from the pipe,
closing the write end gives it end-of-file, and it takes t0 at once. `t0_ns` is the time just before that close:
never later than the executor's t0, typically tens of microseconds earlier. The side channels
(npu_trace.sim.side_channels) start on it. The truth carries it and `t0_bound_ns`, the latest t0 the executor's own
timestamps allow (min over actions of start_ns - t_ns): the executor's t0 lies between the two.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import os
import shutil
import struct
import subprocess
import tempfile
import termios
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from npu_trace.device import hal
from npu_trace.errors import SimulatorError
from npu_trace.sim import build
from npu_trace.sim.scenarios import Action, Share, plan_run
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sim.threads import HOST_LIKE, Host

OPEN_TIMEOUT_S = 10.0  # the executor must open its plan within this

Truth = Dict[str, Any]
AWAY, HOP = 1, 2  # plan line flags


class Observed(NamedTuple):
    """One output line of the executor: what happened to one action."""

    start_ns: int
    end_ns: int
    ret: int
    tid: int
    cpu_in: int
    cpu_out: int


class Output(NamedTuple):
    """The executor's output file: the CPUs it could use, whether it pinned its threads, one row per action."""

    cpus: List[int]
    pinned: bool
    rows: List[Observed]


def plan_line(a: Action, local: Optional[Dict[int, int]] = None, out: Optional[int] = None) -> str:
    """One plan line; `local`: plan index -> index in this executor's own plan (several processes); `out`: what a
    halMemAlloc through the real-ABI library writes to *pp (`npu-sim -H`: its a3), the address it allocated."""
    func = hal.FUNC_BY_NAME[a.func]
    nums: List[int] = []
    text = "-"
    for param, value in zip(func.params, a.args):
        if param.type == "string":
            text = str(value)
        else:
            nums.append(int(value))
    nums += [0] * (6 - len(nums))
    if out is not None:
        nums[3] = out
    ret = 0 if a.ret is None else a.ret
    after = -1 if a.after is None else a.after if local is None else local[a.after]
    flags = (AWAY if a.away else 0) | (HOP if a.hop else 0)
    head = f"{a.t_ns} {a.thread} {after} {flags} {a.func} {ret} {a.delay_ns} "
    return head + " ".join(map(str, nums)) + f" {text}\n"


def parse_output(text: str, count: int) -> Output:
    """The executor's output file (see the module docstring); a SimulatorError when it is not whole."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    try:
        ncpus = int(head[1]) if head[:1] == ["cpus"] else -1
        cpus, pinned = [int(c) for c in head[2 : 2 + ncpus]], head[2 + ncpus :] == ["pinned", "1"]
        rows = [Observed(*map(int, line.split())) for line in lines[1:]]
    except (ValueError, TypeError, IndexError) as exc:
        raise SimulatorError(f"executor output is malformed: {exc}") from None
    if ncpus < 1 or len(cpus) != ncpus:
        raise SimulatorError(f"executor output starts with {lines[0] if lines else 'nothing'!r}, not its CPUs")
    if len(rows) != count:
        raise SimulatorError(f"executor reported {len(rows)} of {count} actions")
    return Output(cpus, pinned, rows)


def action_record(seq: int, a: Action, row: Sequence[int]) -> Dict[str, Any]:
    """One truth record; `row` is an Observed (or only its first three: start_ns, end_ns, ret)."""
    func = hal.FUNC_BY_NAME[a.func]
    events = [func.event] + ([func.ret_event] if func.hal else [])
    rec = {
        "seq": seq,
        "kind": a.kind,
        "phase": a.phase,
        "group": a.group,
        "func": a.func,
        "events": events,
        "dev": a.dev,
        "args": a.fields(),
        "ret": a.ret,
        "delay_ns": a.delay_ns,
        "t_ns": a.t_ns,
        "start_ns": row[0],
        "end_ns": row[1],
        "thread": a.thread,
        "after": a.after,
        "away": a.away,
        "hop": a.hop,
        "process": a.proc,
    }
    if len(row) >= 6:
        rec["tid"] = row[3]
        rec["cpus"] = [row[4], row[5]] if func.hal else [row[4]]
    return rec


def alloc_addresses(actions: Sequence[Action]) -> Dict[int, int]:
    """Plan index of each halMemAlloc -> the address its allocation got (its group's devmm_alloc_done, the
    driver side that tells it; 0 for a failed one): what the real-ABI call hands back through *pp."""
    done = {(a.proc, a.group): int(a.args[2]) for a in actions if a.func == "devmm_alloc_done"}
    return {i: done.get((a.proc, a.group), 0) for i, a in enumerate(actions) if a.func == "halMemAlloc"}


def returned(a: Action, real: bool) -> Optional[int]:
    """What the call must return: as planned, but a real-ABI halCqReportRecv that received reports returns 0
    (their count goes to info->report_cqe_num)."""
    if real and a.func == "halCqReportRecv" and a.ret is not None and a.ret >= 0:
        return 0
    return a.ret


def build_truth(meta: Dict[str, Any], actions: List[Action], rows: Sequence[Sequence[int]]) -> Truth:
    real = meta.get("hal_abi") == "real"
    for a, row in zip(actions, rows):
        want = returned(a, real)
        if want is not None and want != row[2]:
            raise SimulatorError(f"executor returned {row[2]} from {a.func}, planned {want}")
    records = [action_record(i, a, r) for i, (a, r) in enumerate(zip(actions, rows))]
    truth = dict(meta)
    truth["actions"] = records
    truth["counts"] = dict(sorted(collections.Counter(a.func for a in actions).items()))
    truth["event_counts"] = dict(sorted(collections.Counter(e for r in records for e in r["events"]).items()))
    truth["kind_counts"] = dict(sorted(collections.Counter(a.kind for a in actions).items()))
    truth["start_ns"] = min((r[0] for r in rows), default=0)
    truth["end_ns"] = max((r[1] for r in rows), default=0)
    return truth


class ScenarioRun:
    """A running executor (Popen-like): poll(), terminate(), pid, t0_ns, and wait() -> the truth dict.

    A plan whose actions name several processes (Action.proc: shared-weights) runs one executor process per
    process, each with its own actions (`after` never crosses processes); `pids` are theirs in order, `pid` the
    first's, and every plan is handed over before any is let start (the same t0 bound for all)."""

    def __init__(
        self,
        meta: Dict[str, Any],
        actions: List[Action],
        binary: str,
        truth_path: Optional[str] = None,
        channels: Optional[SideChannels] = None,
        host: Host = HOST_LIKE,
        shares: Sequence[Share] = (),
        processes: int = 1,
        hold: bool = False,
        hal_lib: Optional[str] = None,
    ) -> None:
        """`hold`: the executors are started and wait for their plans until `go()` (a tracer started meanwhile,
        scoped to their `pids`, sees them from their first action). `hal_lib`: send the HAL calls through this
        real-ABI library (`npu-sim -H`), tasks as STARS SQEs."""
        self.meta, self.actions, self.truth_path, self.channels = meta, actions, truth_path, channels
        self.shares = list(shares)
        self.workdir = tempfile.mkdtemp(prefix="npu-sim-run.")
        self.truth: Optional[Truth] = None
        n = max([processes] + [a.proc + 1 for a in actions])
        self.index = [[i for i, a in enumerate(actions) if a.proc == k] for k in range(n)]
        self.plans = [os.path.join(self.workdir, f"plan{k}.fifo") for k in range(n)]
        self.outs = [os.path.join(self.workdir, f"out{k}.txt") for k in range(n)]
        if channels is not None:
            channels.prepare(actions, int(meta["params"]["devices"]), self.shares)
        self.procs: List[subprocess.Popen[bytes]] = []
        try:
            for plan_path, out_path in zip(self.plans, self.outs):
                os.mkfifo(plan_path, 0o600)
                argv = [binary, *(["-m", str(host.migrate_us)] if host.migrate_us else []),
                        *(["-H", hal_lib] if hal_lib else []), plan_path, out_path]  # fmt: skip
                self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            self.proc = self.procs[0]
            self.pid, self.pids = self.proc.pid, [p.pid for p in self.procs]
            locals_ = [{g: j for j, g in enumerate(index)} for index in self.index]  # built once per process
            outs = alloc_addresses(actions) if hal_lib else {}
            self._lines = [[plan_line(actions[i], local, outs.get(i)) for i in index]
                           for index, local in zip(self.index, locals_)]  # fmt: skip
        except BaseException:
            self.terminate()
            raise
        self.t0_ns = 0
        if not hold:
            self.go()

    def go(self) -> None:
        """Hand the plans over (the executors start) and start the side channels on their clock."""
        try:
            self.t0_ns = hand_over_plans(self.procs, self.plans, self._lines)
        except BaseException:
            self.terminate()
            raise
        if self.channels is not None:
            self.channels.start(self.t0_ns, self.pid, self.pids)

    def poll(self) -> Optional[int]:
        codes = [p.poll() for p in self.procs]
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c), 0)

    def terminate(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            p.wait()
        if self.channels is not None:
            self.channels.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def wait(self, timeout: Optional[float] = None) -> Truth:
        if self.truth is not None:
            return self.truth
        outputs: List[Output] = []
        try:
            for proc, out_path, index in zip(self.procs, self.outs, self.index):
                _, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    msg = err.decode(errors="replace").strip() or f"exit code {proc.returncode}"
                    raise SimulatorError(f"simulator executor failed: {msg}")
                with open(out_path) as f:
                    outputs.append(parse_output(f.read(), len(index)))
        finally:
            if all(p.poll() is not None for p in self.procs):
                if self.channels is not None:
                    self.channels.stop(drain=all(p.returncode == 0 for p in self.procs))
                shutil.rmtree(self.workdir, ignore_errors=True)
        rows: List[Observed] = [Observed(0, 0, 0, 0, 0, 0)] * len(self.actions)
        for index, output in zip(self.index, outputs):
            for i, row in zip(index, output.rows):
                rows[i] = row
        self.truth = build_truth(self.meta, self.actions, rows)
        self.truth["host"] = {**self.truth["host"], "cpus": outputs[0].cpus, "pinned": outputs[0].pinned}
        self.truth["t0_ns"] = self.t0_ns
        self.truth["t0_bound_ns"] = min((r[0] - a.t_ns for a, r in zip(self.actions, rows)), default=self.t0_ns)
        self.truth["processes"] = [{"index": k, "pid": pid} for k, pid in enumerate(self.pids)]
        for rec in self.truth["actions"]:  # whose memory it is: the executor process's (`tid` is its thread)
            rec["pid"] = self.pids[rec["process"]]
        self.truth["shared"] = [{**vars(sh), "pid": self.pids[sh.proc]} for sh in self.shares]
        if self.channels is not None:
            self.truth["channels"] = self.channels.truth()
        if self.truth_path:
            write_truth(self.truth, self.truth_path)
        return self.truth


def hand_over_plans(procs: Sequence[subprocess.Popen[bytes]], fifos: Sequence[str],
                    plans: Sequence[Sequence[str]]) -> int:  # fmt: skip
    """Write each executor's plan into its FIFO; returns CLOCK_MONOTONIC just before the closes that let them
    start (a lower bound of their t0s)."""
    fds: List[int] = []
    try:
        for proc, fifo in zip(procs, fifos):
            fds.append(_open_writer(proc, fifo))
        for proc, fd, lines in zip(procs, fds, plans):
            os.set_blocking(fd, True)
            data = memoryview("".join(lines).encode())
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except BrokenPipeError as exc:
                raise SimulatorError(f"simulator executor stopped reading its plan: {_stderr(proc)}") from exc
        for proc, fd in zip(procs, fds):
            while _unread(fd) and proc.poll() is None:  # its stdio buffer now holds the rest (<= one page)
                time.sleep(0.0001)
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    finally:
        for fd in fds:
            os.close(fd)
    return t0


def _open_writer(proc: subprocess.Popen[bytes], fifo: str) -> int:
    deadline = time.monotonic() + OPEN_TIMEOUT_S
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise SimulatorError(f"cannot open the simulator's plan FIFO {fifo}: {exc.strerror}") from exc
        if proc.poll() is not None:
            raise SimulatorError(f"simulator executor failed before reading its plan: {_stderr(proc)}")
        if time.monotonic() > deadline:
            raise SimulatorError(f"simulator executor did not open its plan within {OPEN_TIMEOUT_S:.0f} s")
        time.sleep(0.0005)


def _unread(fd: int) -> int:
    """Bytes still in the pipe (FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return "it is still running"
    err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
    return err or f"exit code {proc.returncode}"


def write_truth(truth: Truth, path: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise SimulatorError(f"cannot write truth file {path}: {exc.strerror}") from exc


def start(
    scenario: str,
    seed: int,
    duration_s: float,
    rate: float,
    devices: int,
    truth_path: Optional[str] = None,
    binary: Optional[str] = None,
    channels: Optional[SideChannels] = None,
    host: Host = HOST_LIKE,
    hal_lib: Optional[str] = None,
) -> ScenarioRun:
    actions, shares, processes = plan_run(scenario, seed, duration_s, rate, devices, host)
    path = binary or build.ensure_built()
    meta = {
        "scenario": scenario,
        "seed": seed,
        "params": {"duration_s": duration_s, "rate": rate, "devices": devices},
        "clock": "mono",
        "binary": path,
        "group": hal.GROUP,
        "events": list(hal.event_names()),
        "fields": {f.event: list(f.field_names) for f in hal.FUNCS},
        "host": host.describe(),
        "hal_abi": "real" if hal_lib else "sim",
        **({"hal": hal_lib} if hal_lib else {}),
    }
    return ScenarioRun(meta, actions, path, truth_path, channels, host, shares, processes, hal_lib=hal_lib)


def expected_events(truth: Truth) -> List[Tuple[str, str]]:
    """What the kernel's text rendering shows for every truth action, in plan order: (event, "f=v f=v ...")."""
    return [ev for rec in truth["actions"] for ev in record_events(rec)]


def record_events(rec: Dict[str, Any]) -> List[Tuple[str, str]]:
    """What the kernel's text rendering shows for one truth action: its entry event [and its return]."""
    func = hal.FUNC_BY_NAME[rec["func"]]
    text = " ".join(f"{p.name}={hal.render_value(p.type, rec['args'][p.name])}" for p in func.params)
    return [(func.event, text)] + ([(func.ret_event, f"ret={rec['ret']}")] if func.hal else [])
