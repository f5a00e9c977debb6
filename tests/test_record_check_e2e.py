"""For real, with the simulator: `record` then `check` finds exactly what each scenario injected, and the
findings of the live session equal those of replaying its recording."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict, Sequence, Tuple

import pytest

from npu_trace import sim
from npu_trace.ci.recording_analysis import analyze
from npu_trace.detectors import Analysis
from npu_trace.device.profiles import PROFILES
from npu_trace.events import TraceEvent
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.pipeline import Batch, pump
from npu_trace.sim.synth import truth_expectations
from npu_trace.sinks.npt_sink import Recorder
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.replay_source import ReplaySource
from npu_trace.sources.tracefs_source import TracefsSession
from proc_support import read_until
from replay_support import replayed_items
from smi_support import now_ns, wait_for_polls
from test_detectors_truth import check_against_truth

CLI = [sys.executable, "-m", "npu_trace"]


def record_scenario(
    path: str, scenario: str, seed: int, truth_path: str, options: Sequence[str] = ("-e", "ascend:*"),
    scoped: bool = True,
) -> Dict[str, Any]:
    """`record` of the scenario's executor alone (`scoped`): scoped to this process and the tasks it starts
    while traced (the executor), so that no other simulator on the host (another session's, a developer's demo)
    lands in the trace the truth is compared with; no kernel log, uevent or health channel (the executor alone
    writes none: what they would bring is another program's lines, as /dev/kmsg is the host's)."""
    own = ["--pid", str(os.getpid())] if scoped else []
    argv = [*CLI, "record", "-o", path, *options, "--channels", "none", *own]
    rec = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    said = read_until(rec, "recording to")
    assert ("scope: pid" in said) == scoped, said
    try:
        truth = sim.run_scenario(scenario, seed, 1.0, 400, 2, truth_path, ensure_loaded=False)
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert "loss: none" in err, err
    return truth


def check_json(path: str, report_path: str) -> Tuple[subprocess.CompletedProcess[str], Dict[str, Any]]:
    """`npu-trace check PATH --json REPORT`: its process (exit 0 or 1) and the report."""
    proc = subprocess.run([*CLI, "check", path, "--json", report_path, "--quiet"], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    with open(report_path) as f:
        return proc, json.load(f)


@pytest.mark.privileged
@pytest.mark.parametrize("scenario", sim.SCENARIOS)
def test_record_then_check_reports_exactly_the_injected_faults(
    sim_loaded: Tracefs, tmp_path: Any, scenario: str
) -> None:
    path, report_path = str(tmp_path / "run.npt"), str(tmp_path / "report.json")
    truth = record_scenario(path, scenario, 5, str(tmp_path / "truth.json"))
    proc, report = check_json(path, report_path)
    check_against_truth(report, truth_expectations(truth), live=truth)
    assert (proc.returncode == 1) == bool(report["violations"])
    assert not report["reading"]["truncated"] and report["reading"]["lost"] == 0
    if scenario != "mixed":  # the one that injects every kind of fault
        return
    # the same inputs give a byte-identical report
    again = str(tmp_path / "again.json")
    subprocess.run([*CLI, "check", path, "--json", again, "--quiet"], capture_output=True, timeout=120)
    with open(report_path, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.privileged
def test_live_findings_equal_the_replayed_findings(sim_loaded: Tracefs, tmp_path: Any) -> None:
    path = str(tmp_path / "live.npt")
    profile = PROFILES["sim"]
    live = Analysis(profile)
    session = TracefsSession(["ascend:*"], fs=sim_loaded, layouts=profile.layouts, tag="det")
    with LiveTrace(session) as trace:
        recorder = Recorder(session, path, "sim")
        timeline = trace.block_timeline()

        def both(batch: Batch) -> None:  # what live mode does: analyse the timeline, record the same pages
            recorder(batch)
            live.feed_block(timeline.push(batch), timeline.now)

        run = sim.start_scenario("mixed", 9, 1.5, 500, 2, ensure_loaded=False)
        pump(trace, both, until=lambda: run.poll() is not None)
        run.wait()
        recorder.close()
    replay = Analysis(profile)
    source = ReplaySource(path)
    replayed = source.block_timeline()
    names = set()
    for batch in source.batches():
        block = replayed.push(batch)
        names.update(source.comm(item.pid) for item in block.items()
                     if isinstance(item, TraceEvent) and item.fmt.system == "ascend")  # fmt: skip
        replay.feed_block(block, replayed.now)
    # the executor started after the header's /proc snapshot: its name comes from the recorder's comms notes,
    # known before the first chunk holding its events
    assert names == {"npu-sim"}
    live_report, replay_report = live.finish(), replay.finish()
    assert live_report["findings"], "the mixed scenario injects faults: findings expected"
    assert live_report == replay_report


def live_bytes_by_process(truth: Dict[str, Any]) -> Dict[Tuple[int, int], int]:
    """(device, pid) -> the bytes the truth's allocations leave live at the end, each the process's that ran
    it (the executor process, whichever of its threads made the call)."""
    live: Dict[Tuple[int, int], Tuple[int, int]] = {}
    for rec in sorted(truth["actions"], key=lambda r: r["start_ns"]):
        args = rec["args"]
        if rec["func"] == "devmm_alloc_done" and args["ret"] == 0:
            live[(args["dev"], args["va"])] = (args["size"], rec["pid"])
        elif rec["func"] == "halMemFree" and not rec["ret"]:
            live.pop((args["dev"], args["va"]), None)
    out: Dict[Tuple[int, int], int] = {}
    for (dev, _), (size, pid) in live.items():
        out[(dev, pid)] = out.get((dev, pid), 0) + size
    return out


def memory_by_process(report: Dict[str, Any]) -> Dict[Tuple[int, int], int]:
    return {(p["device"], p["pid"]): p["live_bytes"] for p in report["summary"]["memory"]["processes"]}


@pytest.mark.privileged
def test_threads_started_mid_session_are_their_process_live_and_on_replay(sim_loaded: Tracefs, tmp_path: Any) -> None:
    """The shared-weights executors and their threads start after tracing began, and those threads allocate:
    the live analysis (the session's map at the start, grown by the trace's newtask events), the replay of
    the recording and `check`'s fast path give one report, whose memory per process is the truth's, every
    byte the executor process's (none left to a thread id, none unattributed)."""
    path = str(tmp_path / "live.npt")
    profile = PROFILES["sim"]
    session = TracefsSession(["ascend:*"], fs=sim_loaded, layouts=profile.layouts, tag="thr")
    with LiveTrace(session) as trace:
        assert session.traces_new_tasks() and session.processes is not None
        at_start = set(session.tasks) | set(session.processes)
        live = Analysis(profile, tasks=session.tasks, processes=session.processes)
        recorder = Recorder(session, path, "sim")
        timeline = trace.block_timeline()

        def both(batch: Batch) -> None:
            recorder(batch)
            live.feed_block(timeline.push(batch), timeline.now)

        run = sim.start_scenario("shared-weights", 5, 1.5, 400, 2, ensure_loaded=False)
        pump(trace, both, until=lambda: run.poll() is not None)
        truth = run.wait()
        recorder.close()
    threads = {r["tid"] for r in truth["actions"] if r["func"] == "devmm_alloc_done" and r["tid"] != r["pid"]}
    assert threads and not threads & at_start  # threads started after tracing began made allocations
    source = ReplaySource(path)
    replay = Analysis(profile, tasks=source.tasks, processes=source.processes)
    replayed = source.block_timeline()
    for batch in source.batches():
        replay.feed_block(replayed.push(batch), replayed.now)
    live_report = live.finish()
    assert live_report == replay.finish()
    checked = analyze(path, progress=False)["analysis"]
    assert json.dumps(checked, sort_keys=True) == json.dumps(live_report, sort_keys=True)
    assert memory_by_process(live_report) == {k: n for k, n in live_bytes_by_process(truth).items() if n}
    memory, processes = live_report["summary"]["memory"], live_report["summary"]["processes"]
    assert memory["unattributed_threads"] == 0, memory
    assert processes["processes_started"] >= 3 and processes["threads_started"] >= len(threads)


@pytest.mark.privileged
def test_sigkilled_recorder_leaves_a_file_that_reads_to_its_last_chunk(sim_loaded: Tracefs, tmp_path: Any) -> None:
    path = str(tmp_path / "killed.npt")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "-e", "ascend:*"], stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None and "recording to" in rec.stderr.readline()
    sim.run_scenario("steady", 3, 2.5, 400, 2, ensure_loaded=False)
    rec.send_signal(signal.SIGKILL)
    rec.wait()
    source = ReplaySource(path)
    timeline = source.block_timeline()
    items = [item for batch in source.batches() for item in timeline.push(batch).items()]
    assert source.reader.truncated and source.events_read > 0 and items
    assert os.stat(path).st_mode & 0o777 == 0o600  # private: its kernel log lines and process names are root's
    proc = subprocess.run([*CLI, "check", path, "--quiet", "--json", str(tmp_path / "r.json")], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # cut evidence fails the default gate, like lost events
    with open(tmp_path / "r.json") as f:
        report = json.load(f)
    assert report["reading"]["truncated"] is True
    (cut,) = [f for f in report["findings"] if f["kind"] == "truncated"]
    assert cut["details"]["where"] == report["reading"]["truncation"] and "without a trailer" in cut["details"]["where"]
    assert [v["rule"] for v in report["violations"]] == ["truncated"]  # the steady scenario injects no fault
    rules = tmp_path / "rules.toml"
    rules.write_text("[truncated]\nallowed = true\n")
    accepted = subprocess.run([*CLI, "check", path, "--quiet", "--rules", str(rules)], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    subprocess.run([*CLI, "cleanup"], capture_output=True, timeout=60)
    assert not [n for n in sim_loaded.instance_names() if n == f"npu-trace-{rec.pid}"]
    assert os.path.getsize(path) > 0


@pytest.mark.privileged
@pytest.mark.parametrize("scenario", ["spikes", "ecc-reset"])
def test_record_with_bpf_measures_the_hal_calls_in_the_kernel(
    sim_loaded: Tracefs, tmp_path: Any, scenario: str
) -> None:
    """`record --bpf`: the HAL calls come from the BPF channel (paired in the kernel), not from the ftrace
    uprobes it replaces, and check still reports exactly the injected faults."""
    path, report_path = str(tmp_path / "bpf.npt"), str(tmp_path / "report.json")
    # not scoped: the BPF programs' --pid filter takes the process's own threads, not the tasks it starts (the
    # executor, a child of this process); the host group keeps other simulators away meanwhile
    truth = record_scenario(path, scenario, 7, str(tmp_path / "truth.json"), ("--bpf",), scoped=False)
    source = ReplaySource(path)
    assert not [e for e in source.header["events"] if e.startswith("ascend:ascend_hal")]
    assert source.header["extra"]["channels"]["bpf"]["hal"] is True
    start, end = truth["start_ns"], truth["end_ns"]
    calls = [e for e in replayed_items(source)
             if getattr(e, "op", "").startswith("hal") and start <= e.args.get("entry_ts_ns", 0) <= end]  # fmt: skip
    assert calls and {e.args["source"] for e in calls} == {"bpf"}
    hal = [r for r in truth["actions"] if r["func"].startswith("hal")]
    assert len(calls) == len(hal)
    _, report = check_json(path, report_path)
    check_against_truth(report, truth_expectations(truth), live=truth)
    # a task's submit (BPF) and its completion (ftrace) meet in time order, whichever buffer delivered first
    latency = report["summary"]["latency"]
    assert (latency["unmatched_completes"], latency["pending_tasks"]) == (0, 0), latency


@pytest.mark.privileged
def test_shared_weights_check_explains_the_failed_allocation_as_the_truth_says(
    sim_loaded: Tracefs, tmp_path: Any
) -> None:
    """Three executor processes; the loader's weights mapped by two workers, which the fake npu-smi counts in
    each of them (as the real one does); a worker's allocation fails though npu-smi shows room. `check` on the
    recording (trace + npu-smi polls) reports the memory counted twice and explains the failure, equal to the
    scenario's ground truth."""
    from npu_trace.sim import fake_smi
    from npu_trace.sim.synth import accounting_expectations

    smi_dir = tmp_path / "bin"
    script = fake_smi.install(str(smi_dir))
    fake_smi.write_state(str(smi_dir), fake_smi.State(0, 2, []))  # the idle chips until the run starts
    path, report_path = str(tmp_path / "run.npt"), str(tmp_path / "report.json")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "-e", "ascend:*", "--channels", "health", "--npu-smi",
                            script, "--health-interval", "0.1"], stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert "recording to" in line, line + rec.stderr.read()
    try:
        channels = sim.SideChannels(kmsg=False, uevents=False, npu_smi_dir=str(smi_dir))
        truth = sim.run_scenario("shared-weights", 5, 2.0, 400, 2, str(tmp_path / "truth.json"),
                                 ensure_loaded=False, channels=channels)  # fmt: skip
        wait_for_polls(str(smi_dir), now_ns(), 2)  # whole polls of the final state
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    pids = [p["pid"] for p in truth["processes"]]
    assert len(pids) == 3 and [s["pid"] for s in truth["shared"]] == pids[1:]
    _, report = check_json(path, report_path)
    exp = accounting_expectations(truth)
    assert list(exp["counted_twice"]) == [0] and exp["explained"] == [(0, "fragmentation", 4 << 30)]
    (twice,) = [f for f in report["findings"] if f["kind"] == "accounting_mismatch"]
    d, want = twice["details"], exp["counted_twice"][0]
    assert (twice["device"], d["reason"], d["used_mb"], d["process_sum_mb"]) == (
        0, "counted_twice", want["used_mb"], want["process_sum_mb"])  # fmt: skip
    assert [p["pid"] for p in d["processes"]] == want["pids"] == pids
    (explained,) = [f for f in report["findings"] if f["kind"] == "alloc_fail_explained"]
    e = explained["details"]
    assert (explained["device"], e["explanation"], e["size"]) == exp["explained"][0]
    assert e["largest_free"] < e["size"] <= min(e["free_bytes"], e["npu_smi_free_bytes"])
    (fail,) = [f for f in report["findings"] if f["kind"] == "alloc_fail"]
    assert fail["details"]["pid"] in {t["tid"] for t in truth["actions"] if t["process"] == 1}
    assert [v for v in report["violations"] if v["rule"] == "accounting_mismatch"] == []  # reported only
    # the executors' threads started after the recording's header: their memory is still their process's
    assert memory_by_process(report) == {k: n for k, n in live_bytes_by_process(truth).items() if n}
