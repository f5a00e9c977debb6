"""`cluster -o`: one Perfetto trace (decoded with Perfetto's own schema) and one Chrome JSON trace of a simulated
cluster: a top-level group per host holding that host's tracks as `export` draws them, the hosts on one time axis,
and a flow from the incident's origin to each consequence."""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict, List

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import npu_trace.export.output as output
from cluster_support import write_cluster
from npu_trace.cli import main
from npu_trace.export.output import Output
from npu_trace.sim.cluster_plan import plan_cluster
from npu_trace.sim.threads import SINGLE


def made(tmp_path: Any) -> Any:
    plan = plan_cluster(3, 2, "ecc-reset", 4, 4.0, 100, (1.0, 2.0), SINGLE)
    root = str(tmp_path / "c")
    write_cluster(root, plan, SINGLE)
    return plan, root


def decoded(path: str) -> pb.Trace:
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    return trace


def test_perfetto_trace_has_a_group_per_host_and_flows_from_the_origin(tmp_path: Any) -> None:
    plan, root = made(tmp_path)
    out = str(tmp_path / "c.pftrace")
    assert main(["cluster", root, "-o", out, "-q", "--jobs", "1", "--json", str(tmp_path / "r.json")]) == 1
    trace = decoded(out)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    tops = {u: t.name for u, t in tracks.items() if not t.HasField("parent_uuid")}
    assert sorted(tops.values()) == [h.name for h in plan.hosts]

    def top_of(uuid: int) -> int:
        while tracks[uuid].HasField("parent_uuid"):
            uuid = tracks[uuid].parent_uuid
        return uuid

    per_host: Dict[str, List[str]] = {}
    for u, t in tracks.items():
        per_host.setdefault(tops[top_of(u)], []).append(t.name)
    for h in plan.hosts:  # each host's own NPU tracks, as export draws them
        assert {"NPU 0", "NPU 1", "cluster incidents"} <= set(per_host[h.name]), per_host[h.name]
    events = [p.track_event for p in trace.packet if p.HasField("track_event")]
    with open(tmp_path / "r.json") as f:
        consequences = json.load(f)["findings"][0]["details"]["consequences"]
    out_flows = [e for e in events if len(e.flow_ids) == len(consequences)]
    assert len(out_flows) == 1
    ends = [e for e in events if e.terminating_flow_ids and set(e.terminating_flow_ids) <= set(out_flows[0].flow_ids)]
    assert len(ends) == len(consequences)
    origin = plan.hosts[plan.origin[0]].name
    assert tops[top_of(out_flows[0].track_uuid)] == origin


def test_chrome_json_has_a_process_per_host(tmp_path: Any) -> None:
    plan, root = made(tmp_path)
    out = str(tmp_path / "c.json")
    assert main(["cluster", root, "-o", out, "-q", "--jobs", "1"]) == 1
    with open(out) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(names.values()) == [h.name for h in plan.hosts]
    assert any(e["ph"] == "f" for e in events) and any(e["ph"] == "s" for e in events)
    assert os.path.getsize(out) > 0


def test_a_trace_that_cannot_be_written_is_one_line(tmp_path: Any, monkeypatch: Any, capsys: Any) -> None:
    """A full disk while the trace is written: one line naming the trace, exit 2, nothing left beside it."""
    _, root = made(tmp_path)

    def full(self: Output, data: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output, "DIRECT", False)  # through the stream (test_export_apart: the direct writes')
    monkeypatch.setattr(Output, "write", full)
    out = tmp_path / "out" / "c.pftrace"
    out.parent.mkdir()
    assert main(["cluster", root, "-o", str(out), "-q", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"npu-trace: cannot write {out}: No space left on device"], err
    assert not list(out.parent.iterdir())
