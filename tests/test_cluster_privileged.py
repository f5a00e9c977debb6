"""`npu-trace sim cluster` for real (uprobes, one tracefs instance per simulated host, scoped to its executor),
then `npu-trace cluster` on what it recorded: 2 hosts (the origin found; again without the origin's host: said,
the earliest evidence named), and a healthy cluster of 2 (no incident, exit 0). Short on purpose: 2.5 s and 1 s
of simulated run (8 hosts take about 7 s here, 2.3 s of it the recorders' start: tests/test_cluster.py covers
N = 2, 4, 8 offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest

from npu_trace.cli import main
from npu_trace.recording import RecordingReader

CLI = [sys.executable, "-m", "npu_trace"]
pytestmark = pytest.mark.privileged


def sim_cluster(out: str, *args: str) -> Dict[str, Any]:
    done = subprocess.run([*CLI, "sim", "cluster", "-o", out, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(out, "truth.json")) as f:
        return json.load(f)


def cluster(tmp: str, *inputs: str) -> Tuple[int, Dict[str, Any]]:
    out = os.path.join(tmp, f"r{len(os.listdir(tmp))}.json")
    code = main(["cluster", *inputs, "--json", out, "-q", "--jobs", "1"])
    assert code in (0, 1)
    with open(out) as f:
        return code, json.load(f)


def hosts_of(truth: Dict[str, Any]) -> List[str]:
    return [h["host"] for h in truth["hosts"]]


def test_simulated_hosts_one_origin_and_every_rank_it_took_down(tmp_path: Any, sim_loaded: Any) -> None:
    root = str(tmp_path / "c")
    truth = sim_cluster(root, "--hosts", "2", "--devices", "2", "--duration", "2.5", "--lag", "1:1.2", "--seed", "2")
    for h in truth["hosts"]:
        reader = RecordingReader(os.path.join(root, h["host"], "trace.npt"))
        assert reader.header["host_identity"]["machine_id"] == h["machine_id"]
        assert reader.header["scope"]["pid"] == [h["pid"]]  # its own tracefs instance, scoped to its executor
    code, report = cluster(str(tmp_path), root)
    assert code == 1 and len(report["findings"]) == 1, report["findings"]
    d = report["findings"][0]["details"]
    assert (d["origin"]["host"], d["origin"]["device"]) == (truth["origin"]["host"], truth["origin"]["device"])
    want = {(c["host"], c["device"]) for c in truth["consequences"]}
    assert want <= {(c["host"], c["device"]) for c in d["consequences"]}, (truth["cost"], d["consequences"])

    gone = truth["origin"]["host"]
    code, report = cluster(str(tmp_path), *[os.path.join(root, h) for h in hosts_of(truth) if h != gone])
    d = report["findings"][0]["details"]
    assert code == 1 and d["origin_missing"] and d["origin"] is None
    left = [c for c in truth["consequences"] if c["host"] != gone]
    first = min(c["t_ns"] for c in left)
    named = next(c["t_ns"] for c in left if (c["host"], c["device"]) == (d["earliest"]["host"],
                                                                          d["earliest"]["device"]))  # fmt: skip
    assert named - first <= 100_000_000, (d["earliest"], truth["cost"])  # within the two clocks' +-50 ms


def test_a_healthy_simulated_cluster_exits_0(tmp_path: Any, sim_loaded: Any) -> None:
    root = str(tmp_path / "c")
    truth = sim_cluster(root, "--hosts", "2", "--scenario", "steady", "--duration", "1")
    assert truth["origin"] is None and truth["consequences"] == []
    code, report = cluster(str(tmp_path), root)
    assert code == 0 and report["findings"] == [], report["findings"]
    assert sorted(h["host"] for h in report["hosts"]) == hosts_of(truth)
