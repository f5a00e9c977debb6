"""For real, with the simulator: `record --flight` through steady load, then the ecc-reset scenario with its side
channels (kmsg lines, uevents, fake npu-smi). Exactly one dump, holding the precursors and the whole sequence;
`check` on it finds the reset and nothing the scenario did not inject; `replay` reads it; and the recorder leaves
no tracefs instance behind. The ring rolling over before the incident is shown offline, where trace time is driven
rather than waited for (tests/test_flight_dump.py: the same recorder and ring fed minutes of reads at once); here
it would cost the ring's seconds plus its lag slack of steady load (22 s) on the suite's serial path."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List

import pytest

from flight_support import check_the_reset_dump, ecc_expectations, the_one_dump
from npu_trace import sim
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import fake_smi
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sim.synth import truth_expectations
from npu_trace.sources.replay_source import ReplaySource
from smi_support import health_changes

CLI = [sys.executable, "-m", "npu_trace"]
# The incident's first trigger (the scenario's first timeout, at about half of ECC_S) is less than FLIGHT_S
# after the scenario's start, and the steady load runs before it: the dump holds the precursors from before the
# scenario began.
FLIGHT_S = 8
ECC_S = 10.0
STEADY_S = 1.0


def wait_until(what: str, cond: Any, timeout: float, proc: subprocess.Popen[str]) -> None:
    """Wait for a condition (never a fixed sleep); the recorder dying meanwhile fails at once."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the recorder exited while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.1)


@pytest.mark.privileged
def test_flight_recorder_dumps_the_ecc_reset_incident_after_the_ring_rolled_over(
    sim_loaded: Tracefs, tmp_path: Any
) -> None:
    side = SideChannels(npu_smi_dir=str(tmp_path / "bin"))
    if side.notes:
        pytest.skip("; ".join(side.notes))
    dumps = tmp_path / "dumps"
    smi = fake_smi.install(str(tmp_path / "bin"))  # there from the start (the scenarios give it its state)
    # not scoped by --device (the kernel log is the host's: nothing else may write driver lines meanwhile); a
    # device-scoped dump of this run once showed the timeout detector losing timeouts inside one large feed
    # (fixed: tests/test_detectors.py::test_timeouts_released_within_one_feed_do_not_lose_the_ones_after)
    argv = [*CLI, "record", "--flight", str(FLIGHT_S), "-o", str(dumps), "--npu-smi", smi, "--health-interval", "1"]
    rec = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    lines: List[str] = []
    try:
        while "flight recorder: the last" not in (line := rec.stderr.readline()):
            assert line, "".join(lines) + rec.stderr.read()
            lines.append(line)
        sim.run_scenario("steady", 11, STEADY_S, 400, 2, ensure_loaded=False, channels=side)
        truth = sim.run_scenario("ecc-reset", 12, ECC_S, 400, 2, ensure_loaded=False, channels=side)
        wait_until("finished dump", lambda: any(n.endswith(".npt") for n in os.listdir(dumps)), 60, rec)
        partial_left = [n for n in os.listdir(dumps) if n.endswith(".partial")]
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert not partial_left, partial_left
    path = the_one_dump(str(dumps))
    assert "1 dump(s)" in err and "loss: none" in err, err
    assert path.endswith("-dev0-reset.npt")

    source = ReplaySource(path)
    window = source.header["window"]
    assert window["held_from_ns"] <= truth["start_ns"]  # the precursors: from before the scenario began
    assert source.header["extra"]["channels"]["running"] == ["kmsg", "uevent", "health"]

    exp = ecc_expectations(truth_expectations(truth))
    # what the fake npu-smi said of the ECC climb (Warning, then Alarm, 3.5-3.9 s each) at the polls it answered: a
    # poll on a loaded host, nine npu-smi runs, may take longer than a state lasts
    said = health_changes(str(tmp_path / "bin"), 0)
    assert set(said) <= {"Warning", "Alarm"}, said
    checked = check_the_reset_dump(path, exp, 0, also={"health": len(said)} if said else None, live=True)
    report = checked["report"]
    health = [(f["device"], f["details"]["health"]) for f in sorted(report["findings"], key=lambda f: f["ts_ns"])
              if f["kind"] == "health"]  # fmt: skip
    assert health == [(0, h) for h in said]
    (reset,) = [f for f in report["findings"] if f["kind"] == "reset_sequence"]
    kinds_told = collections.Counter(s for step in reset["details"]["steps"] for s in step["sources"])
    assert kinds_told["kmsg"] > 0 and kinds_told["ftrace"] == len(sim.RESET_STEPS)  # channels in the dump too
    ends = [s["ts_ns"] for s in reset["details"]["steps"]]
    for _ in source.batches():  # read through: the window's end is in the trailer
        pass
    assert window["held_from_ns"] < ends[0] and source.window["to_ns"] > ends[-1]  # type: ignore[index]

    # the CLI reads it as any recording: check fails on the reset (default rules), replay prints its events
    out = tmp_path / "report.json"
    proc = subprocess.run([*CLI, "check", path, "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "window: a flight recorder's dump of reset on device 0" in proc.stdout
    rules = {v["rule"] for v in json.loads(out.read_text())["violations"]}
    assert rules == {"reset_sequences", "timeouts"}, rules
    replay = subprocess.run([*CLI, "replay", path, "--headless", "--max"], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert replay.returncode == 0 and "reset_step" in replay.stdout, replay.stderr
    assert not [n for n in sim_loaded.instance_names() if n == f"npu-trace-{rec.pid}"]
