"""Privileged: a real Ascend host's HAL path, end to end, with the simulator standing in for the card.

`npu-trace sim load --hal-abi real` puts the simulator's real-ABI libascend_hal.so where the driver installs its
own; `npu-trace record --profile ascend --bpf` finds it there as it finds a real HAL (no --hal), and the chip
(910B) from npu-smi's model (the fake npu-smi's 910B3), while every scenario runs in turn with its HAL calls
through that very file (`run_scenario(hal_lib=...)`, what `sim run --hal-abi real` runs); then `npu-trace check`.

Per scenario, from the recording (its events by their entry times): allocations + failures = its halMemAlloc
calls (each allocation at the address the truth gave it), frees = its halMemFree calls, submits = its
halSqTaskSend calls with the stream and task each sent. `check`'s summary: the sums over the scenarios; its
findings: every failed allocation (device, size) of every scenario, and shared-weights' memory counted twice
and its failed allocation explained as fragmentation, as the simulator profile gives them
(`accounting_expectations`). `sim unload` then removes the library and the directories made for it.

One session for all the scenarios, each run half a second (shared-weights one, for its npu-smi readings): the
programs are compiled once (a session per scenario costs about 7 s of startup, compile and teardown each).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from npu_trace import sim
from npu_trace.sim.synth import accounting_expectations
from proc_support import read_until
from replay_support import replayed_items
from smi_support import now_ns, wait_for_polls

CLI = [sys.executable, "-m", "npu_trace"]
SEED, RATE, DEVICES = 5, 400, 2
Truth = Dict[str, Any]


@pytest.fixture(scope="module")
def real_hal() -> Iterator[str]:
    """`sim load --hal-abi real` (a module's worth), `sim unload` after it: the library's path."""
    from npu_trace.ftrace.tracefs import Tracefs
    from npu_trace.sim import hal_install

    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")
    if hal_install.installed() is None and os.path.lexists(hal_install.target()):
        pytest.skip(f"a libascend_hal.so that is not the simulator's is installed at {hal_install.target()}")
    was_loaded = sim.is_loaded(Tracefs.find())
    load = subprocess.run([*CLI, "sim", "load", "--hal-abi", "real"], capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr
    assert f"installed: {hal_install.TARGET}" in load.stderr, load.stderr
    yield hal_install.TARGET
    if was_loaded:
        hal_install.uninstall()
        return
    unload = subprocess.run([*CLI, "sim", "unload"], capture_output=True, text=True, timeout=60)
    assert unload.returncode == 0, unload.stderr
    assert not os.path.lexists(hal_install.TARGET) and hal_install.installed() is None


def record_all(path: str, smi_dir: Path, lib: str) -> List[Truth]:
    """`record --profile ascend --bpf` while every scenario runs through `lib`; their truths in order."""
    from npu_trace.sim import fake_smi

    script = fake_smi.install(str(smi_dir))
    fake_smi.write_state(str(smi_dir), fake_smi.State(0, DEVICES, []))  # idle chips until a run starts
    argv = [*CLI, "record", "-o", path, "--profile", "ascend", "--bpf", "--channels", "health", "--npu-smi", script,
            "--health-interval", "0.1"]  # fmt: skip
    rec = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    truths: List[Truth] = []
    try:
        said = read_until(rec, "recording to")
        assert f"HAL: {lib} (install path)" in said and "task layout: 910B (npu-smi model 910B3)" in said, said
        for name in sim.SCENARIOS:
            channels = sim.SideChannels(kmsg=False, uevents=False, npu_smi_dir=str(smi_dir))
            # shared-weights: npu-smi must be read between its weights' mapping (30% in) and its failed request (60%
            # in); a reading takes 0.3 s and more on a loaded host (1.0 s left it stale once: the failure unexplained)
            seconds = 2.5 if name == "shared-weights" else 0.5
            truths.append(sim.run_scenario(name, SEED, seconds, RATE, DEVICES, ensure_loaded=False,
                                           channels=channels, hal_lib=lib))  # fmt: skip
        wait_for_polls(str(smi_dir), now_ns(), 2)  # whole polls of the last run's final state
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert "loss: none" in err, err
    return truths


def hal_events(path: str) -> List[Any]:
    from npu_trace.sources.replay_source import ReplaySource

    return [e for e in replayed_items(ReplaySource(path)) if getattr(e, "args", {}).get("source") == "bpf"]


def within(events: List[Any], truth: Truth) -> collections.Counter:
    """(kind, op) of the BPF events whose call began during the scenario's run."""
    start, end = truth["start_ns"], truth["end_ns"]
    return collections.Counter((e.kind, e.op) for e in events if start <= e.args.get("entry_ts_ns", -1) <= end)


def calls(truth: Truth, func: str) -> List[Dict[str, Any]]:
    return [a for a in truth["actions"] if a["func"] == func]


def failed_allocs(truth: Truth) -> List[Tuple[int, int]]:
    return [(a["dev"], a["args"]["size"]) for a in calls(truth, "halMemAlloc") if a["ret"]]


def check_scenario(events: List[Any], truth: Truth) -> None:
    got = within(events, truth)
    allocs, fails = calls(truth, "halMemAlloc"), failed_allocs(truth)
    assert (got[("alloc", "halMemAlloc")], got[("alloc_fail", "halMemAlloc")]) == (len(allocs) - len(fails), len(fails))
    assert got[("free", "halMemFree")] == len(calls(truth, "halMemFree"))
    assert got[("submit", "halSqTaskSend")] == len(calls(truth, "halSqTaskSend"))
    start, end = truth["start_ns"], truth["end_ns"]
    mine = [e for e in events if start <= e.args.get("entry_ts_ns", -1) <= end]
    sent = sorted((e.dev, e.args["stream"], e.args["task"]) for e in mine if e.kind == "submit")
    assert sent == sorted((a["dev"], a["args"]["stream"], a["args"]["task"]) for a in calls(truth, "halSqTaskSend"))
    vas = sorted((e.dev, e.args["va"], e.args["size"]) for e in mine if e.kind == "alloc")
    done = [a for a in calls(truth, "devmm_alloc_done") if a["args"]["ret"] == 0]
    assert vas == sorted((a["dev"], a["args"]["va"], a["args"]["size"]) for a in done)


@pytest.mark.privileged
def test_every_scenario_through_the_installed_real_hal_equals_its_truth(real_hal: str, tmp_path: Path) -> None:
    path, report_path = str(tmp_path / "real.npt"), tmp_path / "report.json"
    truths = record_all(path, tmp_path / "bin", real_hal)
    events = hal_events(path)
    for name, truth in zip(sim.SCENARIOS, truths):
        assert truth["hal_abi"] == "real" and truth["hal"] == real_hal, name
        check_scenario(events, truth)
    proc = subprocess.run([*CLI, "check", path, "--json", str(report_path), "--quiet"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(report_path.read_text())
    memory, by_kind = report["summary"]["memory"], report["summary"]["events"]["by_kind"]
    total = collections.Counter(a["func"] for t in truths for a in t["actions"])
    assert memory["allocs"] + memory["failures"] == total["halMemAlloc"]
    assert (memory["frees"], memory["unknown_frees"]) == (total["halMemFree"], 0)
    assert by_kind["submit"] == total["halSqTaskSend"]
    found = [f for f in report["findings"] if f["kind"] == "alloc_fail"]
    assert sorted((f["device"], f["details"]["size"]) for f in found) == sorted(
        fail for t in truths for fail in failed_allocs(t))  # fmt: skip
    check_shared_weights(report, truths[sim.SCENARIOS.index("shared-weights")])


def check_shared_weights(report: Dict[str, Any], truth: Truth) -> None:
    """The memory counted twice and the failure explained, as the simulator profile gives them."""
    exp = accounting_expectations(truth)
    start, end = truth["start_ns"], truth["end_ns"] + 10**9
    mine = [f for f in report["findings"] if start <= f["ts_ns"] <= end]
    (twice,) = [f for f in mine if f["kind"] == "accounting_mismatch" and f["details"]["reason"] == "counted_twice"]
    want, d = exp["counted_twice"][0], twice["details"]
    assert (d["used_mb"], d["process_sum_mb"]) == (want["used_mb"], want["process_sum_mb"])
    explained = [(f["device"], f["details"]["explanation"], f["details"]["size"]) for f in mine
                 if f["kind"] == "alloc_fail_explained"]  # fmt: skip
    assert explained == exp["explained"] == [(0, "fragmentation", 4 << 30)]
