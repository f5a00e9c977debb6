"""`check` gives the report the reference path gives: the columnar path (`npu_trace.ci.recording_analysis`) and the
per-event reference (tests/reference/analyze.py) agree byte for byte, on every simulator scenario, on the
golden capture of this kernel (ascend events among sched, syscalls and IRQs) and on corrupted copies of it.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goldens import load_pages
from npu_trace.ci.check_report import build_report
from npu_trace.ci.recording_analysis import analyze
from npu_trace.detectors.rules import load_rules
from npu_trace.events import NpuEvent
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.sim.scenarios import SCENARIOS, plan
from npu_trace.sim.synth import synth_events
from reference.analyze import analyze as reference_analyze
from test_recording import ROOT, golden_header, write
from test_timeline import HEADER, reads, spread, synth_header, write_batches


def both(path: str, profile: str = "sim") -> Tuple[str, str]:
    out = []
    for run in (analyze, reference_analyze):
        result = run(path, profile, progress=False)
        latency = {op: (h.count, h.min, h.max, h.total, sorted(h.buckets.items()))
                   for op, h in result["latency"].items()}  # fmt: skip
        out.append(json.dumps({**result, "latency": latency}, sort_keys=True))
    return out[0], out[1]


def scenario_recording(path: str, scenario: str, seed: int, cpus: int = 3) -> None:
    events = synth_events(plan(scenario, seed, 1.0, 3000, 4))
    per_cpu = spread(events, cpus, seed)
    enc = PageEncoder(HEADER)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    rng = random.Random(seed)
    channel: List[Any] = []
    for i, ts in enumerate(sorted(rng.sample([e.ts_ns for e in events], 24))):
        channel.append(channel_event(rng, ts, i))
    end = events[-1].ts_ns + 1
    write_batches(path, synth_header(cpus), reads(pages, channel, rng, end), 16 << 10)


def channel_event(rng: random.Random, ts: int, i: int) -> NpuEvent:
    """One of the other channels' events: a heartbeat timeout, a kernel fault block, the driver's word that a
    device is dead (repeated: coalesced per device), an application's error (linked at the end)."""
    dev = rng.choice([0, 1, None])
    what = rng.choice(["timeout", "kernel_fault", "device_fault", "app_error"])
    if what == "kernel_fault":
        args = {"fault": rng.choice(["soft_lockup", "oops", "register_dump"]), "cpu": 1, "comm": "kworker/1:0",
                "functions": ["trs_chan_irq_proc [asdrv_trsbase]", "__do_softirq"], "text": "BUG: ...\nCall trace:",
                "lines": 2, "end_ts_ns": ts + 10, "source": "kmsg"}  # fmt: skip
        return NpuEvent(ts, "fault", None, "kernel_fault", 0, 1, args)
    if what == "device_fault":
        op = rng.choice(["device_abnormal", "send_msg_failed"])
        return NpuEvent(ts, "fault", dev, op, 15232, -1, {"source": "kmsg", "ret": -19, "n": i})
    if what == "app_error":
        op = rng.choice(["heartbeat_lost", "device_open", "alloc_fail"])
        args = {"source": "app_log", "results": [507010], "text": "EL0001", "time_resolution_ns": 1000, "n": i}
        return NpuEvent(ts, "app_error", dev, op, 389, -1, args)
    return NpuEvent(ts, "timeout", dev, "heartbeat", -1, -1, {"source": "kmsg", "n": i})


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_paths_report_the_same_for_every_scenario(tmp_path: Any, scenario: str) -> None:
    path = str(tmp_path / f"{scenario}.npt")
    scenario_recording(path, scenario, 3)
    fast, reference = both(path)
    assert json.loads(fast)["reading"]["events"] > 1000
    assert fast == reference


LOGS = os.path.join(os.path.dirname(__file__), "data", "logs")


@pytest.mark.parametrize("kernel,apps", [
    ("dmesg-device-abnormal.txt", []),
    ("slog-device-os-devmm.txt", ["app-heartbeat-lost.txt", "app-halMemAlloc-failed.txt", "app-107001-plog.txt"]),
])  # fmt: skip
def test_both_paths_report_the_same_for_imported_logs(tmp_path: Any, kernel: str, apps: List[str]) -> None:
    from npu_trace.cli import main

    path = str(tmp_path / "imported.npt")
    app_args = [a for name in apps for a in ("--app-log", os.path.join(LOGS, name))]
    assert main(["import", os.path.join(LOGS, kernel), *app_args, "--tz", "+00:00", "-o", path]) == 0
    fast, reference = both(path, "ascend")
    assert json.loads(fast)["reading"]["channel_events"] >= 3
    assert fast == reference


def test_both_paths_report_the_same_for_the_golden_capture(tmp_path: Any) -> None:
    path = str(tmp_path / "golden.npt")
    write(path, load_pages(ROOT), chunk_bytes=3 * 4096)
    fast, reference = both(path)
    assert json.loads(fast)["reading"]["events"] > 100
    assert fast == reference


def test_the_rules_judge_both_paths_alike(tmp_path: Any) -> None:
    path = str(tmp_path / "ecc.npt")
    scenario_recording(path, "ecc-reset", 1)
    reports: List[Dict[str, Any]] = []
    for run in (analyze, reference_analyze):
        result = run(path, "sim", progress=False)
        reports.append(build_report("ecc.npt", result["analysis"], load_rules(None), [], result["reading"]))
    assert reports[0] == reports[1]


PAGES = load_pages(ROOT)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, len(PAGES) - 1), st.one_of(st.integers(0, 63), st.integers(0, 4095)),
                                st.integers(0, 255)), min_size=1, max_size=12))  # fmt: skip
def test_both_paths_report_the_same_for_corrupted_pages(tmp_path: Any, flips: List[Tuple[int, int, int]]) -> None:
    """Bytes of the golden pages changed at random (the page headers and first records more often): malformed
    records, wrong lengths, stamps gone backwards, missed-events flags, commits beyond the page. Both paths
    count and skip the same records and report the same."""
    pages = [(cpu, bytearray(page)) for cpu, page in PAGES]
    for index, offset, value in flips:
        pages[index][1][offset % len(pages[index][1])] = value
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "corrupt.npt")  # one per example
    write(path, [(cpu, bytes(page)) for cpu, page in pages], chunk_bytes=4 * 4096, header=golden_header())
    fast, reference = both(path)
    assert fast == reference


@pytest.mark.parametrize("latency", ["notanint", None, float("nan"), [1], (1 << 64) - 1, True])
def test_a_call_whose_latency_is_not_a_time_is_no_sample(latency: Any, tmp_path: Any) -> None:
    """A recorded call whose latency_ns is not an int64 (a hand-made or damaged recording's) was a traceback in
    check and killed the TUI's worker, while replay printed it: it is an event without a latency sample now,
    beside a call whose latency is one."""
    from npu_trace.recording.writer import RecordingWriter

    path = str(tmp_path / "odd.npt")
    with RecordingWriter(path, synth_header(1)) as w:
        w.add_events([NpuEvent(10**12, "call", 0, "halMemAlloc", 1, 0, {"latency_ns": latency}),
                      NpuEvent(10**12 + 5, "call", 0, "halMemAlloc", 1, 0, {"latency_ns": 70})])  # fmt: skip
    reading = analyze(path, progress=False)
    assert reading["reading"]["events"] == 0 and reading["reading"]["channel_events"] == 2
    hist = reading["latency"]["halMemAlloc"]
    assert (hist.count, hist.max) == (1, 70)


def test_a_process_name_keyed_by_a_digit_that_is_no_number_is_left_out(tmp_path: Any) -> None:
    """str.isdigit("²") is True, int("²") a ValueError: a header's comms keyed so was a traceback in replay,
    check and export."""
    from npu_trace.recording.writer import RecordingWriter
    from npu_trace.sources.replay_source import ReplaySource

    header = synth_header(1)
    header["extra"]["comms"] = {"²": "sup", "7": "ok", "٣": "three"}
    path = str(tmp_path / "comms.npt")
    with RecordingWriter(path, header) as w:
        w.add_events([NpuEvent(10**12, "log", 0, "x", 7, 0, {"text": "a"})])
    assert ReplaySource(path).comms == {7: "ok"}
    assert analyze(path, progress=False)["reading"]["channel_events"] == 1
