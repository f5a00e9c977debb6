"""The deployment files: the alert rules pass promtool's check and their unit tests, the systemd unit passes
`systemd-analyze verify` without a warning, and the rules and the dashboard only name metrics the agent exports
(or npu-exporter's, beside them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any, Set

import pytest

from npu_trace.events import NpuEvent
from npu_trace.sinks.exposition import registry_of, render
from test_agent_metrics import analysed, reading

ROOT = os.path.join(os.path.dirname(__file__), "..")
DEPLOY = os.path.join(ROOT, "deploy")
RULES = os.path.join(DEPLOY, "prometheus", "npu-trace.rules.yml")
NPU_EXPORTER = {"npu_chip_info_temperature", "npu_chip_info_hbm_used_memory"}
PROM_FUNCS = {"increase", "rate", "delta", "sum", "by", "max", "or", "absent", "histogram_quantile", "le", "on",
              "label_values", "up"}  # fmt: skip


def exported() -> Set[str]:
    """Every metric name the agent's exposition holds (families with their _total/_bucket/... samples)."""
    from npu_trace.sinks.metrics import SnapshotCollector

    analysis, state, actions = analysed("mixed")
    link = {"bdf": "0000:c1:00.0", "speed": "8.0 GT/s", "width": 8, "max_speed": "16.0 GT/s", "max_width": 16,
            "degraded": 1}  # fmt: skip
    end = max(a.t_ns for a in actions) + 10**10
    state.count(analysis.feed_events([reading(0), NpuEvent(end, "link", 0, "pcie_link", -1, -1, link)]))
    state.count(analysis.advance(end + 10**10))
    state.publish(analysis, {"tracefs": 0}, [("loss", False)], {"start_time_seconds": 1.0}, [("version", "x")])
    text = render(registry_of([SnapshotCollector(state)])).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def metric_names(expr: str) -> Set[str]:
    return {m for m in re.findall(r"\b([a-z_][a-z0-9_]*)\b(?=\s*[{\[)]|\s*$|\s*[=!<>]|\s+or\b)", expr)
            if m.startswith(("npu_", "up"))}  # fmt: skip


@pytest.mark.privileged
def test_promtool_checks_the_rules(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.privileged
def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    done = subprocess.run([promtool, "test", "rules", "npu-trace.rules.test.yml"], capture_output=True, text=True,
                          cwd=os.path.join(DEPLOY, "prometheus"))  # fmt: skip
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_rules_and_dashboard_name_only_exported_metrics() -> None:
    names = exported()
    with open(RULES) as f:
        exprs = re.findall(r"expr: (.+)", f.read())
    with open(os.path.join(DEPLOY, "grafana", "npu-trace.json")) as f:
        dash = json.load(f)
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = set().union(*map(metric_names, exprs))
    assert len(used) > 12
    unknown = used - names - NPU_EXPORTER - {"up"}
    assert not unknown, unknown


def test_the_dashboard_shows_states_heatmaps_findings_loss_and_npu_exporter() -> None:
    with open(os.path.join(DEPLOY, "grafana", "npu-trace.json")) as f:
        dash = json.load(f)
    kinds = {p["type"] for p in dash["panels"]}
    assert {"state-timeline", "heatmap", "timeseries"} <= kinds
    text = json.dumps(dash)
    for name in ("npu_trace_device_state", "npu_trace_op_latency_seconds_bucket", "npu_trace_findings_total",
                 "npu_trace_lost_events_total", *NPU_EXPORTER):  # fmt: skip
        assert name in text


@pytest.mark.privileged
def test_systemd_verifies_the_unit(tmp_path: Any) -> None:
    """No systemd as PID 1 here: `systemd-analyze verify` reads the unit as systemd would load it (every key
    known, the command executable), with ExecStart pointed at this checkout's npu-trace."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian's systemd package)")
    exe = os.path.join(ROOT, ".venv", "bin", "npu-trace")
    with open(os.path.join(DEPLOY, "npu-trace-agent.service")) as f:
        text = f.read()
    assert "/opt/npu-trace/bin/npu-trace agent" in text
    unit = tmp_path / "npu-trace-agent.service"
    unit.write_text(text.replace("/opt/npu-trace/bin/npu-trace", os.path.abspath(exe)))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), done.stdout + done.stderr
    broken = tmp_path / "broken.service"
    broken.write_text(unit.read_text().replace("Nice=5", "Nice=5\nNoSuchKey=1"))
    assert "Unknown key" in subprocess.run([analyze, "verify", str(broken)], capture_output=True, text=True).stderr
