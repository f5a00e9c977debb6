"""For real, with the simulator: `record --host-context` traces the host's scheduler and interrupt events beside
the simulator's, and `export` shows them: Perfetto's ftrace bundles naming the executor's threads on the CPUs
they ran on, Chrome JSON's CPU tracks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from npu_trace.export.run import Request, export
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.recording import RecordingReader
from test_record_check_e2e import record_scenario


@pytest.mark.privileged
def test_record_with_host_context_then_export_shows_the_cpus(sim_loaded: Tracefs, tmp_path: Any) -> None:
    path = str(tmp_path / "run.npt")
    truth = record_scenario(path, "steady", 3, str(tmp_path / "truth.json"), ("-e", "ascend:*", "--host-context"))
    names = {f.full_name for f in RecordingReader(path).formats}
    assert {"sched:sched_switch", "sched:sched_waking", "irq:irq_handler_entry"} <= names
    export(Request(path, str(tmp_path / "out.pftrace"), "perfetto", progress=False))
    trace = pb.Trace.FromString((tmp_path / "out.pftrace").read_bytes())
    switches = [(p.ftrace_events.cpu, ev.sched_switch) for p in trace.packet if p.HasField("ftrace_events")
                for ev in p.ftrace_events.event if ev.HasField("sched_switch")]  # fmt: skip
    executor = {proc["pid"] for proc in truth["processes"]}
    ran = {s.next_pid for _, s in switches} | {s.prev_pid for _, s in switches}
    assert switches and ran & executor, f"{len(switches)} switches, none of the executor's {sorted(executor)}"
    assert {cpu for cpu, _ in switches} <= set(range(64))
    summary = export(Request(path, str(tmp_path / "out.json"), "chrome-json", progress=False))
    doc = json.loads((tmp_path / "out.json").read_text())
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert "CPUs" in procs and summary["host_context"]["running"] > 0
