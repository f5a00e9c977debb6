"""End to end, for real: `npu-trace stream` traces while the simulator runs a scenario; every injected call
appears exactly once with its arguments and return value, in the executor's own timestamps, with zero loss."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from npu_trace import sim
from npu_trace.ftrace.tracefs import Tracefs

CLI = [sys.executable, "-m", "npu_trace"]


def start_stream(*extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*CLI, "stream", "--format", "ndjson", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert "tracing" in first, first + proc.stderr.read()
    return proc


def stop_stream(proc: subprocess.Popen[str]) -> tuple[List[Dict[str, Any]], str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()], err


@pytest.mark.privileged
def test_stream_sees_every_injected_call_of_the_spikes_scenario(sim_loaded: Tracefs, tmp_path: Any) -> None:
    """The host-like simulator: several threads, completions on another CPU than their submits, calls that
    change CPU inside. One time order across CPUs; each thread's events in its own plan order, on the CPUs
    the executor saw them on."""
    proc = start_stream("--events", "ascend:*")
    try:
        truth = sim.run_scenario("spikes", 3, 1.0, 400, 2, str(tmp_path / "truth.json"), ensure_loaded=False)
    finally:
        events, err = stop_stream(proc)
    stamps = [e["ts_ns"] for e in events]
    assert stamps == sorted(stamps), "one time order across CPUs"
    expected: Dict[int, List[Any]] = {}
    for action in truth["actions"]:
        per_thread = expected.setdefault(action["tid"], [])
        per_thread.append((f"ascend:ascend_{action['func']}", action["args"], action, action["cpus"][0]))
        if len(action["events"]) == 2:
            per_thread.append((f"ascend:ascend_{action['func']}_ret", {"ret": action["ret"]}, action,
                               action["cpus"][1]))  # fmt: skip
    # this executor's threads (another test or session may run the same simulator binary meanwhile)
    mine = [e for e in events if e["event"].startswith("ascend:") and e["pid"] in expected]
    assert len(mine) == sum(map(len, expected.values())), err
    assert len(expected) > 2 and {e["pid"] for e in mine} == set(expected)
    spikes = 0
    for tid, want in expected.items():
        for got, (name, args, action, cpu) in zip([e for e in mine if e["pid"] == tid], want):
            assert got["event"] == name and got["cpu"] == cpu, (got, action)
            fields = {k: v for k, v in got["fields"].items() if not k.startswith("__probe")}
            assert fields == args, (got, action)
            assert action["start_ns"] - 1000 <= got["ts_ns"] <= action["end_ns"] + 1000, (got, action)
            spikes += action["kind"] == "spike" and name.endswith("_ret")
    assert spikes == truth["kind_counts"]["spike"] > 0
    assert "loss: none (0 events lost)" in err
    assert not [e for e in events if e["event"] == "npu_trace:lost"]
    assert f"npu-trace-{proc.pid}" not in sim_loaded.instance_names()
