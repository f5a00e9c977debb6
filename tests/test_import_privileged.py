"""For real, with the simulator: logs saved during a scenario, imported afterwards, tell what the live recording
told. The ecc-reset scenario's kernel log (as `dmesg` prints it, pasted with a prompt) and its application log
give the live recording's reset sequence (same device, same steps in the same order) with the application's
errors explained by it. (A trace.dat trace-cmd recorded beside npu-trace: tests/test_tracedat.py, on one real
run kept in tests/data/tracedat, since trace-cmd records on these VMs only with a shim the project does not
carry.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from npu_trace import sim
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim.side_channels import SideChannels
from proc_support import read_until

CLI = [sys.executable, "-m", "npu_trace"]


def start_record(path: str, *options: str) -> subprocess.Popen[str]:
    rec = subprocess.Popen([*CLI, "record", "-o", path, *options], stderr=subprocess.PIPE, text=True)
    read_until(rec, "recording to")
    return rec


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def check(path: str, report: str) -> Dict[str, Any]:
    proc = subprocess.run([*CLI, "check", path, "--json", report, "-q"], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    with open(report) as f:
        return dict(json.load(f))


def resets(report: Dict[str, Any]) -> List[Any]:
    return [(f["device"], [s["step"] for s in f["details"]["steps"]], f["details"]["status"])
            for f in report["findings"] if f["kind"] == "reset_sequence"]  # fmt: skip


def kmsg_since(mono_ns: int) -> List[str]:
    """The kernel log from `mono_ns` on, as `dmesg` prints it."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout.splitlines()
    keep = []
    for line in out:
        if line.startswith("[") and "]" in line:
            try:
                up = float(line[1 : line.index("]")])
            except ValueError:
                continue
            if up * 1e9 >= mono_ns - 1e9:
                keep.append(line)
    return keep


@pytest.mark.privileged
def test_saved_kernel_and_app_logs_of_ecc_reset_tell_the_live_story(sim_loaded: Tracefs, tmp_path: Any) -> None:
    live, app = str(tmp_path / "live.npt"), str(tmp_path / "app.log")
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    rec = start_record(live, "--channels", "kmsg,uevent", "--app-log", app)
    try:
        side = SideChannels(npu_smi=False, app_log=app)
        sim.run_scenario("ecc-reset", 3, 4.0, 200, 1, str(tmp_path / "truth.json"), ensure_loaded=False,
                         channels=side)  # fmt: skip
    finally:  # the recorder's last read takes the app log's last lines and ends its last report
        err = stop(rec)
    assert "loss: none" in err, err
    kernel = tmp_path / "kernel.txt"
    kernel.write_text("[root@host ~]# dmesg | tail -n 200\n" + "\n".join(kmsg_since(start)) + "\n")
    imported = str(tmp_path / "imported.npt")
    proc = subprocess.run([*CLI, "import", str(kernel), "--app-log", app, "--this-boot", "-o", imported],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    live_report, imp_report = check(live, str(tmp_path / "live.json")), check(imported, str(tmp_path / "imp.json"))
    assert resets(live_report) and resets(imp_report) == resets(live_report)
    for report in (live_report, imp_report):
        errors = [f for f in report["findings"] if f["kind"] == "app_error"]
        assert {f["op"] for f in errors} >= {"heartbeat_lost", "device_open", "stream_sync_timeout"}, errors
        by_op = {f["op"]: f["details"]["explained_by"] for f in errors}
        assert by_op["heartbeat_lost"][0]["kind"] == "timeout" and by_op["heartbeat_lost"][0]["op"] == "heartbeat"
        (reset,) = [f for f in report["findings"] if f["kind"] == "reset_sequence"]
        assert by_op["device_open"][0] == {"kind": "reset_sequence", "device": reset["device"], "op": "reset",
                                           "ts_ns": reset["ts_ns"], "app_after_ns": 0}  # fmt: skip


def event_kinds(path: str) -> List[Any]:
    """The recording's trace events without their times (event, pid, field values), in a stable order."""
    from npu_trace.events import TraceEvent
    from npu_trace.sources.replay_source import ReplaySource

    src = ReplaySource(path)
    timeline = src.block_timeline()
    items = [item for batch in src.batches() for item in timeline.push(batch).items()] + timeline.flush().items()
    return sorted(((ev.event, ev.pid, ev.values) for ev in items if isinstance(ev, TraceEvent)), key=repr)


SKEW_NS = 5_000_000  # a uprobe writes its record into each tracefs instance in turn, stamping each when written


def same_findings(a: Any, b: Any, key: str = "") -> bool:
    """Equal, except times (`*_ns` values) that may differ by the two instances' stamping skew."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_findings(a[k], b[k], k) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_findings(x, y, key) for x, y in zip(a, b))
    if key.endswith("_ns") and isinstance(a, int) and isinstance(b, int):
        return abs(a - b) <= SKEW_NS
    return bool(a == b)
