"""`npu-trace cluster` on simulated clusters' recordings made without a kernel (tests/cluster_support.py), many
seeds and sizes: exactly one `cluster_incident` whose origin is the truth's card, consequences covering the
truth's, with clock offsets up to +-50 ms and consequences as early as 1 s after the failure; the origin's host
removed (said, the earliest evidence named); a healthy cluster (no incident, exit 0); older files without an
identity (said, grouped by file); the same report whatever the order and the number of workers."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Tuple

import pytest

from cluster_support import write_cluster
from npu_trace.cli import main
from npu_trace.recording import RecordingReader, RecordingWriter
from npu_trace.sim.cluster_plan import MAX_OFFSET_NS, ClusterPlan, plan_cluster
from npu_trace.sim.threads import HOST_LIKE, SINGLE

S = 1_000_000_000
CASES = [(n, seed) for n in (2, 4, 8) for seed in (1, 2, 3)]


def run_cluster(tmp_path: Any, *inputs: str, jobs: int = 1) -> Tuple[int, Dict[str, Any]]:
    out = os.path.join(str(tmp_path), f"report-{len(os.listdir(str(tmp_path)))}.json")
    code = main(["cluster", *inputs, "--json", out, "-q", "--jobs", str(jobs)])
    with open(out) as f:
        return code, json.load(f)


def made(tmp_path: Any, plan: ClusterPlan, skip: Tuple[int, ...] = (), host: Any = SINGLE) -> str:
    root = os.path.join(str(tmp_path), "cluster")
    write_cluster(root, plan, host, skip)
    return root


def truth_of(plan: ClusterPlan) -> Dict[str, Any]:
    return plan.truth(0)


@pytest.mark.parametrize("hosts,seed", CASES)
def test_the_origin_is_the_failing_card_and_every_rank_it_took_down_a_consequence(tmp_path: Any, hosts: int,
                                                                                   seed: int) -> None:  # fmt: skip
    plan = plan_cluster(hosts, 2, "ecc-reset", seed, 4.0, 100, (1.0, 2.0), HOST_LIKE if seed == 1 else SINGLE)
    offsets = [h.identity.offset_ns for h in plan.hosts]
    assert all(abs(o) <= MAX_OFFSET_NS for o in offsets)
    code, report = run_cluster(tmp_path, made(tmp_path, plan, host=HOST_LIKE if seed == 1 else SINGLE))
    truth = truth_of(plan)
    assert code == 1
    found = report["findings"]
    assert [f["kind"] for f in found] == ["cluster_incident"], found
    origin = found[0]["details"]["origin"]
    assert {"host": origin["host"], "device": origin["device"]} == {k: truth["origin"][k] for k in ("host", "device")}
    assert origin["first_evidence"]["kind"] == "ecc" and origin["strongest"]["kind"] in ("uce", "reset", "heartbeat")
    got = {(c["host"], c["device"]) for c in found[0]["details"]["consequences"]}
    assert {(c["host"], c["device"]) for c in truth["consequences"]} <= got
    for c in found[0]["details"]["consequences"]:
        assert "app:collective_timeout" in c["kinds"] and "timeout" in c["kinds"], c
        assert c["after_beyond_uncertainty"], c  # at least 1 s after the failure, the clocks within +-50 ms


def test_consequences_1_s_after_the_failure_and_clocks_off_by_50_ms_still_find_the_origin(tmp_path: Any) -> None:
    plan = plan_cluster(4, 2, "ecc-reset", 11, 3.0, 100, (1.0, 1.0), SINGLE)
    code, report = run_cluster(tmp_path, made(tmp_path, plan))
    d = report["findings"][0]["details"]
    assert code == 1 and (d["origin"]["host"], d["origin"]["device"]) == (
        plan.hosts[plan.origin[0]].name, plan.origin[1])  # fmt: skip
    fail = d["origin"]["strongest"]["at_ns"]
    assert min(c["first"]["at_ns"] for c in d["consequences"]) - fail < int(1.2 * S)


@pytest.mark.parametrize("hosts,seed", [(2, 4), (4, 5), (8, 6)])
def test_without_the_origin_host_the_finding_says_so_and_names_the_earliest_evidence(tmp_path: Any, hosts: int,
                                                                                      seed: int) -> None:  # fmt: skip
    plan = plan_cluster(hosts, 2, "ecc-reset", seed, 4.0, 100, (1.0, 2.0), SINGLE)
    assert plan.origin is not None
    gone = plan.hosts[plan.origin[0]].name
    code, report = run_cluster(tmp_path, made(tmp_path, plan, skip=(plan.origin[0],)))
    found = report["findings"]
    assert code == 1 and len(found) == 1
    d = found[0]["details"]
    assert d["origin"] is None and d["origin_missing"] and "not given" in d["note"]
    left = [c for c in truth_of(plan)["consequences"] if c["host"] != gone]
    first = min(left, key=lambda c: c["t_ns"])
    named = d["earliest"]
    named_t = next(c["t_ns"] for c in left if (c["host"], c["device"]) == (named["host"], named["device"]))
    assert named_t - first["t_ns"] <= 2 * MAX_OFFSET_NS, (named, first)  # the earliest, within the clocks' error
    assert {(c["host"], c["device"]) for c in left} <= {(c["host"], c["device"]) for c in d["consequences"]}
    assert gone not in d["hosts"]


@pytest.mark.parametrize("hosts", [2, 8])
def test_a_healthy_cluster_has_no_incident_and_exits_0(tmp_path: Any, hosts: int) -> None:
    plan = plan_cluster(hosts, 2, "steady", 3, 2.0, 200, (1.0, 2.0), SINGLE)
    code, report = run_cluster(tmp_path, made(tmp_path, plan))
    assert code == 0 and report["findings"] == [] and report["verdict"] == "healthy"
    assert len(report["hosts"]) == hosts and report["notes"] == []


def test_the_report_is_the_same_whatever_the_workers_and_the_order_of_the_inputs(tmp_path: Any) -> None:
    plan = plan_cluster(4, 2, "ecc-reset", 7, 4.0, 100, (1.0, 2.0), SINGLE)
    root = made(tmp_path, plan)
    dirs = sorted(os.path.join(root, d) for d in os.listdir(root))
    _, one = run_cluster(tmp_path, *dirs, jobs=1)
    _, two = run_cluster(tmp_path, *reversed(dirs), jobs=2)
    for r in (one, two):
        r.pop("inputs")
        for h in r["hosts"]:
            h.pop("recordings")
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def _strip_identity(src: str, dst: str) -> None:
    """A copy of a recording as a writer before host identities would have written it."""
    reader = RecordingReader(src)
    head = {k: v for k, v in reader.header.items() if k not in ("host_identity", "clock_sync")}
    with RecordingWriter(dst, head) as w:
        for kind, value in reader.records():
            if kind == "chunk":
                _copy_chunk(w, value)
            elif kind == "events":
                w.add_events(value)


def _copy_chunk(w: Any, chunk: Any) -> None:
    marks = dict(chunk.marks)
    for i, (cpu, page) in enumerate(chunk.pages):
        if i in marks:
            w.add_mark(marks.pop(i))
        w.add_page(cpu, page)
    for _index, mark in sorted(marks.items()):
        w.add_mark(mark)
    w.flush()


def test_older_recordings_without_an_identity_are_said_and_grouped_by_file(tmp_path: Any) -> None:
    plan = plan_cluster(2, 2, "ecc-reset", 8, 4.0, 100, (1.0, 2.0), SINGLE)
    root = made(tmp_path, plan)
    old = os.path.join(str(tmp_path), "old")
    os.makedirs(old)
    for h in plan.hosts:
        _strip_identity(os.path.join(root, h.name, "trace.npt"), os.path.join(old, f"{h.name}.npt"))
    code, report = run_cluster(tmp_path, old)
    notes = " ".join(report["notes"])
    assert "carry no host identity" in notes and "npu-node-01.npt" in notes and "npu-node-02.npt" in notes
    assert "say nothing of their clock's sync" in notes
    assert code == 1 and {h["identity"] for h in report["hosts"]} == {"hostname"}
    assert len(report["findings"]) == 1  # one host name ("npu-trace-generated"): a host of both files


def test_text_and_junit_reports(tmp_path: Any, capsys: Any) -> None:
    plan = plan_cluster(2, 2, "ecc-reset", 9, 4.0, 100, (1.0, 2.0), SINGLE)
    root = made(tmp_path, plan)
    junit = os.path.join(str(tmp_path), "j.xml")
    assert main(["cluster", root, "--junit", junit, "--jobs", "1"]) == 1
    text = capsys.readouterr().out
    origin = plan.hosts[plan.origin[0]].name
    assert f"origin: {origin} dev{plan.origin[1]}: uncorrectable ECC error" in text
    assert "timeline (every host, aligned" in text
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1" and len(suite.findall("testcase")) == 3


def test_bad_inputs_are_one_line_and_exit_2(tmp_path: Any, capsys: Any) -> None:
    bad = os.path.join(str(tmp_path), "bad.npt")
    with open(bad, "wb") as f:
        f.write(b"not a recording")
    assert main(["cluster", bad]) == 2
    assert main(["cluster", str(tmp_path / "missing")]) == 2
    assert main(["cluster", str(tmp_path), "--from", "12.5"]) == 2
    err = capsys.readouterr().err
    assert "bad.npt" in err and "Traceback" not in err


def test_the_simulated_header_carries_identity_clock_and_offset(tmp_path: Any) -> None:
    plan = plan_cluster(2, 1, "steady", 1, 1.0, 100, (1.0, 2.0), SINGLE)
    root = made(tmp_path, plan)
    reader = RecordingReader(os.path.join(root, "npu-node-02", "trace.npt"))
    h = plan.hosts[1].identity
    assert reader.header["host_identity"] == {"hostname": "npu-node-02", "machine_id": h.machine_id,
                                              "boot_id": h.boot_id, "source": "simulated"}  # fmt: skip
    assert reader.header["clock_sync"] == {"source": "simulated", "error_ns": h.error_ns}
    assert reader.checksum is not None


def plans_differ() -> List[Any]:
    return [plan_cluster(8, 2, "ecc-reset", s, 8.0, 100).origin for s in range(1, 9)]


def test_the_plan_is_deterministic_and_spreads_origins() -> None:
    assert plans_differ() == plans_differ()
    assert len(set(plans_differ())) > 3
    plan = plan_cluster(3, 2, "ecc-reset", 1, 8.0, 100)
    lags = [c.offset_ns - plan.fail_ns for c in plan.consequences]
    assert all(1 * S <= lag <= 5 * S for lag in lags)


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
