"""`npu-trace sim run --scenario ecc-reset` live: its reset steps reach /dev/kmsg (KmsgSource) and the uevent
netlink socket (UeventSource) in order, for the right device, and its fake npu-smi, polled by HealthSource,
reports each change of the ECC counts, temperature and health its queries were answered (the fake records its
calls: what a poll saw depends on when it ran on a busy host, what was reported of it does not).

Runs `sim run --no-load`: the side channels need no uprobes, so this test never touches tracefs (other tests
may be using the simulator's uprobe events meanwhile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from npu_trace.device.hal import RESET_STEPS
from npu_trace.device.kmsg import KmsgMatcher
from npu_trace.events import NpuEvent
from npu_trace.sim.side_channels import UEVENT_PATH, bdf_of
from npu_trace.sources.kmsg_source import KmsgSource
from npu_trace.sources.npusmi_source import HealthSource
from npu_trace.sources.uevent_source import UeventSource
from smi_support import answers, changes, now_ns, wait_for_polls

UEVENT_STEP = {"unbind": "unbind", "remove": "remove", "bus_remove": "bus_remove", "rescan": "rescan",
               "probe": "probe", "half_probe_finish": "half_probe_finish"}  # fmt: skip
KMSG_CLOCK_NS = 50_000_000  # the kernel log's clock converted to CLOCK_MONOTONIC: its error at most


def run_with_sources(tmp_path: Path) -> Dict[str, Any]:
    smi_dir, truth_path = tmp_path / "bin", tmp_path / "truth.json"
    matcher = KmsgMatcher()
    matcher.bdf_dev[bdf_of(0)] = 0  # what the kmsg source seeds from the driver's sysfs dev_id on a real host
    kmsg: List[NpuEvent] = []
    uevents: List[Tuple[NpuEvent, int]] = []  # each with CLOCK_MONOTONIC once the read that returned it ended
    health = HealthSource(interval_s=0.05, timeout_s=5, npu_smi=str(smi_dir / "npu-smi"),
                          pci_root=str(tmp_path / "no-pci"))  # fmt: skip
    argv = [sys.executable, "-m", "npu_trace", "sim", "run", "--scenario", "ecc-reset", "--duration", "3",
            "--rate", "100", "--no-load", "--npu-smi-dir", str(smi_dir), "--truth", str(truth_path)]  # fmt: skip
    with KmsgSource(matcher=matcher) as ks, UeventSource(bdf_dev={}) as us:
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        health.start()
        try:
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                kmsg += ks.read()
                uevents += _read_at(us)
                time.sleep(0.02)
            wait_for_polls(str(smi_dir), now_ns())  # a whole npu-smi poll of the final state
            kmsg += ks.read()
            uevents += _read_at(us)
        finally:
            health.close()
            if proc.poll() is None:
                proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    return {"truth": json.loads(truth_path.read_text()), "kmsg": kmsg, "uevents": uevents,
            "health": health.read(), "stderr": err}  # fmt: skip


def _read_at(source: UeventSource) -> List[Tuple[NpuEvent, int]]:
    got = source.read()
    done = now_ns()
    return [(e, done) for e in got]


@pytest.mark.privileged
def test_ecc_reset_side_channels_live(tmp_path: Path) -> None:
    for path in ("/dev/kmsg", UEVENT_PATH):
        if not os.access(path, os.W_OK):
            pytest.skip(f"{path} not writable")
    got = run_with_sources(tmp_path)
    ch = got["truth"]["channels"]
    assert ch["notes"] == [] and ch["kmsg"]["errors"] == 0 and ch["uevent"]["errors"] == 0, ch["notes"]

    # kmsg: every reset step, in order, on device 0 (only this run's lines: comm npu-sim, the executor's pid)
    ours = [e for e in got["kmsg"] if e.args.get("comm") == "npu-sim" and e.args.get("tgid") == ch["pid"]]
    steps = [e for e in ours if e.kind == "reset_step"]
    assert [e.args["step"] for e in steps] == list(RESET_STEPS)
    assert {e.dev for e in steps} == {0} and [e.ts_ns for e in steps] == sorted(e.ts_ns for e in steps)
    for e in steps:  # the kmsg clock, converted, agrees with when the channel wrote the line (the kernel stamps
        # it while the write runs; the conversion's error is the tolerance, however late the writer ran)
        line = next(x for x in ch["kmsg"]["lines"] if x["line"].endswith(e.args["msg"]))
        assert line["began_ns"] - KMSG_CLOCK_NS <= e.ts_ns <= line["written_ns"] + KMSG_CLOCK_NS, (e.args, line)

    # uevents: each planned one received once it was written, in order, mapped to the step on device 0: stamped
    # at receive time, so after its write began and before the read that returned it ended
    received = [(e, read) for e, read in got["uevents"] if e.kind == "reset_step"]
    matched: List[NpuEvent] = []
    for want in ch["uevent"]["events"]:
        hit = next(e for e, read in received if e.args["step"] == UEVENT_STEP[want["step"]]
                   and e.args["action"] == want["action"] and want["began_ns"] <= e.ts_ns <= read)  # fmt: skip
        matched.append(hit)
    assert [e.dev for e in matched] == [0] * 6 and [e.ts_ns for e in matched] == sorted(e.ts_ns for e in matched)
    assert matched[0].args["bdf"] == "0000:3b:00.0" and matched[0].args["pci_id"] == "19E5:D802"

    # both channels together: the steps' order holds across them
    both = sorted(steps + matched, key=lambda e: e.ts_ns)
    index = [list(RESET_STEPS).index(e.args["step"]) for e in both if e.args["step"] in RESET_STEPS]
    assert index == sorted(index)

    # npu-smi through HealthSource: the readings it reports are the changes in what its queries were answered
    # (the fake records each call), however late its polls ran; the climb and the peak are the truth's
    smi, smi_dir = ch["npu_smi"], str(tmp_path / "bin")
    climb = {(c["ce"], c["uce"]): c["t_ns"] for c in smi["ecc_climb"]}
    ecc = [e for e in got["health"] if e.kind == "ecc"]
    seen = [(e.args["ce_count"], e.args["uce_count"]) for e in ecc]
    assert seen == changes([(v["ce"], v["uce"]) for v in answers(smi_dir, 0, "ecc")]), seen
    assert seen == sorted(seen) and seen[-1] == (255, 1), seen  # the last: a poll after the run's end
    for k, key in enumerate(seen):
        # a reading is stamped when its poll starts and its queries end before the next poll starts: its value
        # was reported by then, however long the polls took
        assert key == (0, 0) or (key in climb and (k + 1 == len(ecc) or climb[key] <= ecc[k + 1].ts_ns)), (key, ecc)
    assert set(seen) <= {(0, 0), *climb} and len(climb) == 9, climb  # eight rising counts, then the UCE
    temps = [e.args["temp_c"] for e in got["health"] if e.kind == "thermal"]
    assert temps == changes([v["npu_temp_c"] for v in answers(smi_dir, 0, "temp")]), temps
    assert smi["temp_peak"][0]["temp_c"] == 96 and temps[-1] == 55 and max(temps) <= 96, temps
    states = [e.args["health"] for e in got["health"] if e.op == "health"]
    assert states == changes([v["health"] for v in answers(smi_dir, 0, "health")]), states
    assert states[-1] == "OK", states
