"""Scope, for real, with the simulator: the filters land in the session's private instance, and only the
events of the processes, task names and devices asked for arrive; `record --device` then `check` says it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

from npu_trace import sim
from npu_trace.device.irqs import NpuIrq
from npu_trace.events import TraceEvent
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.sim import build, runner
from npu_trace.sim.threads import HOST_LIKE
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.options import TraceOptions
from proc_support import read_until
from reference.normalize import normalize
from reference.scope import events as scope_events
from test_detectors_truth import check_spikes

CLI = [sys.executable, "-m", "npu_trace"]
SLACK_NS = 1000
# runs a scenario once told to on stdin: the executor is its child, every thread of it created after that
WRAPPER = (
    "import sys; from npu_trace import sim; sys.stdin.readline(); "
    "sim.run_scenario('spikes', 11, 1.0, 300, 2, sys.argv[1], ensure_loaded=False)"
)


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def start(command: str, *extra: str) -> Tuple[subprocess.Popen[str], str]:
    """The command running, and what it said on stderr up to its "tracing"/"recording" line (its notes and
    scope come first)."""
    tail = ["--format", "ndjson"] if command == "stream" else []
    proc = subprocess.Popen([*CLI, command, *tail, "--channels", "none", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    return proc, read_until(proc, "Ctrl-C stops")


def stop(proc: subprocess.Popen[str]) -> Tuple[List[Dict[str, Any]], str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()], err


def instance_file(fs: Tracefs, proc: subprocess.Popen[str], rel: str) -> str:
    return fs.read_text(f"instances/npu-trace-{proc.pid}/{rel}").strip()


def expected(truth: Dict[str, Any], keep: Any = lambda action: True) -> Counter[str]:
    """The events of the truth's actions `keep` selects (entry, and the return of a HAL call)."""
    out: Counter[str] = Counter()
    for action in truth["actions"]:
        if keep(action):
            out.update(f"ascend:{name}" for name in action["events"])
    return out


def tids_of(truth: Dict[str, Any]) -> Set[int]:
    return {action["tid"] for action in truth["actions"]}


def ascend(events: List[Dict[str, Any]], tids: Set[int]) -> List[Dict[str, Any]]:
    return [e for e in events if e["event"].startswith("ascend:") and e["pid"] in tids]


@pytest.mark.privileged
def test_stream_device_is_filtered_in_the_kernel_where_the_event_has_a_device(sim_loaded: Tracefs) -> None:
    """--device 1: the events with a device field of their own are filtered by the kernel (dev == 1); a HAL
    call's entry is not (its return has no device), the pair is scoped after normalization: exactly device 1's
    calls arrive, each with its return."""
    proc, said = start("stream", "--device", "1")
    try:
        filters = {name: instance_file(sim_loaded, proc, f"events/ascend/{name}/filter")
                   for name in ("ascend_irq_handler_entry", "ascend_devmm_alloc_done", "ascend_halMemAlloc",
                                "ascend_halMemAlloc_ret")}  # fmt: skip
        truth = sim.run_scenario("spikes", 3, 1.0, 400, 2, ensure_loaded=False)
    finally:
        events, err = stop(proc)
    assert filters == {"ascend_irq_handler_entry": "dev == 1", "ascend_devmm_alloc_done": "dev == 1",
                       "ascend_halMemAlloc": "none", "ascend_halMemAlloc_ret": "none"}  # fmt: skip
    assert "scope: device 1 (kernel: 8 event filters" in said
    mine = ascend(events, tids_of(truth))
    assert Counter(e["event"] for e in mine) == expected(truth, lambda a: a["dev"] == 1)
    assert {e["fields"]["dev"] for e in mine if "dev" in e["fields"]} == {1}
    assert expected(truth, lambda a: a["dev"] == 0), "the scenario used both devices"
    assert "left out by the scope (device " in err  # device 0's HAL calls, left out after pairing
    assert "loss: none" in err


@pytest.mark.privileged
def test_stream_pid_follows_the_process_and_the_tasks_it_starts(sim_loaded: Tracefs, tmp_path: Any) -> None:
    """--pid of a process that starts the simulator afterwards: set_event_pid with event-fork follows its
    child and the child's threads; the simulator run meanwhile by another process is not traced."""
    truth_path = str(tmp_path / "mine.json")
    parent = subprocess.Popen([sys.executable, "-c", WRAPPER, truth_path], stdin=subprocess.PIPE, text=True)
    try:
        proc, said = start("stream", "--pid", str(parent.pid))
        try:
            assert instance_file(sim_loaded, proc, "options/event-fork") == "1"
            assert str(parent.pid) in instance_file(sim_loaded, proc, "set_event_pid").split()
            assert parent.stdin is not None
            parent.stdin.write("go\n")
            parent.stdin.flush()
            other = sim.run_scenario("spikes", 12, 1.0, 300, 2, ensure_loaded=False)  # at the same time
            assert parent.wait(timeout=60) == 0
        finally:
            events, err = stop(proc)
    finally:
        parent.kill()
        parent.wait()
    with open(truth_path) as f:
        truth = json.load(f)
    assert f"scope: pid {parent.pid} (kernel: set_event_pid" in said
    seen = {e["pid"] for e in events if e["event"].startswith("ascend:")}
    assert not seen & tids_of(other)
    assert Counter(e["event"] for e in ascend(events, tids_of(truth))) == expected(truth)  # every one of them
    assert seen == tids_of(truth) and len(seen) > 2  # the executor's threads, all started after tracing began
    assert "loss: none" in err


EXECUTOR_THREADS = HOST_LIKE.threads + (1 if HOST_LIKE.migrate_us else 0)  # its workers, the one that moves them


def executor_threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def trace_running_executor(fs: Tracefs, seconds: float) -> Optional[Tuple[Any, Set[int], int, List[Any], str]]:
    """`stream --pid` of an executor whose threads all run, started while they do: (truth, the tasks the
    instance's set_event_pid listed, when tracing began, the events, stderr), or None when the run ended its
    threads before the stream had started (a loaded host), or before calls on three threads came after."""
    run = sim.start_scenario("spikes", 13, seconds, 300, 2, ensure_loaded=False)
    try:
        deadline = time.monotonic() + 60  # every thread there before the stream starts
        while executor_threads(run.pid) < EXECUTOR_THREADS:
            assert time.monotonic() < deadline, f"{executor_threads(run.pid)} of {EXECUTOR_THREADS} threads"
            time.sleep(0.01)
        proc, _ = start("stream", "--pid", str(run.pid))
        try:
            since = mono_ns()  # tracing was on before the line that said so
            running = executor_threads(run.pid) >= EXECUTOR_THREADS  # ... and the threads still ran then
            listed = {int(t) for t in instance_file(fs, proc, "set_event_pid").split()}
            truth = run.wait(timeout=120)
        finally:
            events, err = stop(proc)
    finally:
        run.terminate()
    late = {a["tid"] for a in truth["actions"] if a["start_ns"] > since}
    return (truth, listed, since, events, err) if running and len(late) > 2 else None


@pytest.mark.privileged
def test_stream_pid_traces_every_thread_the_process_already_has(sim_loaded: Tracefs) -> None:
    """--pid of a running multi-threaded simulator: each of its threads is written to set_event_pid, and every
    call that starts after tracing began arrives, on every thread, and nothing else."""
    for seconds in (6.0, 12.0, 24.0):  # the premise made: a run the stream started too late for is run longer
        traced = trace_running_executor(sim_loaded, seconds)
        if traced is not None:
            break
    assert traced is not None, "on none of the runs (6, 12, 24 s) did the stream start while the executor ran"
    truth, listed, since, events, err = traced
    assert "loss: none" in err
    tids = tids_of(truth)
    assert tids <= listed and len(tids) > 2  # every thread that runs an action was written at the start
    got = [e for e in events if e["event"].startswith("ascend:")]
    assert {e["pid"] for e in got} == tids
    at: Dict[Tuple[int, str], List[int]] = {}
    for e in got:
        at.setdefault((e["pid"], e["event"]), []).append(e["ts_ns"])
    late = [a for a in truth["actions"] if a["start_ns"] > since]
    assert len({a["tid"] for a in late}) > 2
    for a in late:
        stamps = at.get((a["tid"], f"ascend:{a['events'][0]}"), [])
        assert any(a["start_ns"] - SLACK_NS <= ts <= a["end_ns"] + SLACK_NS for ts in stamps), a


@pytest.mark.privileged
def test_stream_comm_traces_only_tasks_of_that_name(sim_loaded: Tracefs, tmp_path: Any) -> None:
    """--comm npu-sim: the kernel's filter on the task's name; the same executor started through a link of
    another name (its uprobes fire the same) is not traced."""
    link = str(tmp_path / "other-npu")
    os.symlink(build.ensure_built(), link)
    proc, said = start("stream", "--comm", "npu-sim")
    try:
        flt = instance_file(sim_loaded, proc, "events/ascend/ascend_halMemAlloc/filter")
        named = runner.start("spikes", 14, 1.0, 300, 2, binary=link)
        mine = sim.run_scenario("spikes", 15, 1.0, 300, 2, ensure_loaded=False)
        other = named.wait(timeout=60)
    finally:
        events, err = stop(proc)
    assert "loss: none" in err
    assert flt == 'comm == "npu-sim"'
    seen = {e["pid"] for e in events if e["event"].startswith("ascend:")}
    assert not seen & tids_of(other) and tids_of(other)
    assert Counter(e["event"] for e in ascend(events, tids_of(mine))) == expected(mine)
    assert "scope: comm npu-sim (kernel: 16 event filters)" in said


@pytest.mark.privileged
def test_record_device_then_check_reports_the_scope(sim_loaded: Tracefs, tmp_path: Any) -> None:
    path, report_path = str(tmp_path / "dev1.npt"), str(tmp_path / "report.json")
    rec, _ = start("record", "-o", path, "--device", "1")
    try:
        truth = sim.run_scenario("spikes", 5, 1.0, 400, 2, ensure_loaded=False)
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    proc = subprocess.run([*CLI, "check", path, "--json", report_path], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "  scope: device 1 (kernel: 8 event filters; the others after normalization" in proc.stdout
    with open(report_path) as f:
        report = json.load(f)
    scope = report["reading"]["scope"]
    assert scope["device"] == [1] and scope["pipeline"]["device"] is True
    assert scope["kernel"]["filters"]["ascend:ascend_irq_handler_entry"] == {"filter": "dev == 1", "scope": ["device"]}
    assert {f["device"] for f in report["findings"]} <= {1, None}
    spikes = [a for a in truth["actions"] if a["kind"] == "spike"]
    assert {a["dev"] for a in spikes} == {0, 1}, "spikes on both devices were injected"
    check_spikes(report, {"spikes": Counter((a["dev"], a["func"]) for a in spikes if a["dev"] == 1)}, truth)
    assert report["summary"]["scope"]["dropped"]["device"] > 0
    assert report["summary"]["pairing"]["unpaired_returns"] == 0


@pytest.mark.privileged
def test_ascend_interrupts_filtered_in_the_kernel_to_the_npus_own(tmp_path: Any) -> None:
    """The ascend profile's IRQ events with this host's busiest interrupt standing in for an NPU's (the VM has
    none): the instance's irq:irq_handler_entry/exit filter holds its number, only it arrives, with its device.
    (The session also traces task:task_newtask, unfiltered: a thread started anywhere on the host meanwhile.)"""
    fs = Tracefs.find()
    busiest = _busiest_irq(tmp_path)
    options = TraceOptions(profile_name="ascend", channels=())
    session = options.make_session(fs, irqs={busiest: NpuIrq(busiest, "stand-in", 3)})
    with LiveTrace(session) as source:
        filters = [session.instance.event_filter(e) for e in ("irq:irq_handler_entry", "irq:irq_handler_exit")]
        timeline = source.block_timeline()
        items: List[Any] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(_irq_events(items)) < 4:
            _disk_traffic(tmp_path)
            items += timeline.push(source.read()).items()
        items += timeline.push(source.finish()).items()
    assert filters == [f"irq == {busiest}"] * 2
    irqs = _irq_events(items)
    assert irqs and {i.fields()["irq"] for i in irqs} == {busiest}
    normalized = scope_events(ScopeFilter(session.scope), normalize(options.profile.mapping, irqs))
    assert {(e.kind, e.dev) for e in normalized} == {("irq", 3)}  # the device the discovery told


def _irq_events(items: List[Any]) -> List[TraceEvent]:
    return [i for i in items if isinstance(i, TraceEvent) and i.fmt.system == "irq"]


def _disk_traffic(tmp_path: Any) -> None:
    with open(tmp_path / "traffic", "wb") as f:
        f.write(os.urandom(1 << 16))
        f.flush()
        os.fsync(f.fileno())


def _busiest_irq(tmp_path: Any) -> int:
    """The numbered interrupt this test's disk writes raise: the one whose count grows most in the worse of two
    rounds of writes (an interrupt that only a burst of other traffic raised in one round does not win)."""
    grown: List[Dict[int, int]] = []
    for _ in range(2):
        before = _irq_counts()
        for _ in range(20):
            _disk_traffic(tmp_path)
        after = _irq_counts()
        grown.append({irq: after[irq] - before.get(irq, 0) for irq in after})
    return max(grown[0], key=lambda irq: min(g.get(irq, 0) for g in grown))


def _irq_counts() -> Dict[int, int]:
    with open("/proc/interrupts") as f:
        lines = f.read().splitlines()
    cpus = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if head.strip().isdigit():
            out[int(head)] = sum(int(w) for w in rest.split()[:cpus] if w.isdigit())
    return out


@pytest.mark.privileged
def test_bpf_comm_and_device_are_filtered_in_the_kernel(tmp_path: Any) -> None:
    """`npu-trace bpf --comm npu-sim --dev 1`: the HAL uprobes' program keeps only device 1's calls of tasks of
    that name (FILTER_COMMS, FILTER_DEVS); the executor started through a link of another name is not measured."""
    link = str(tmp_path / "other-npu")
    os.symlink(build.ensure_built(), link)
    proc = subprocess.Popen([*CLI, "bpf", "--format", "ndjson", "--comm", "npu-sim", "--dev", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "attached" in line, line + proc.stderr.read()
    try:
        named = runner.start("spikes", 16, 1.0, 300, 2, binary=link)
        mine = sim.run_scenario("spikes", 17, 1.0, 300, 2, ensure_loaded=False)
        other = named.wait(timeout=60)
    finally:
        events, err = stop(proc)
    measured = [e for e in events if e["event"].startswith("bpf:")]
    assert not {e["pid"] for e in measured} & tids_of(other) and tids_of(other)
    calls = [a for a in mine["actions"] if a["func"].startswith("hal") and a["dev"] == 1]
    got = [e for e in measured if e["pid"] in tids_of(mine)]
    assert Counter(e["event"] for e in got) == Counter(f"bpf:{a['func']}" for a in calls)
    assert {e["fields"]["dev"] for e in got} == {1}
    assert "BPF events; loss: none" in err
