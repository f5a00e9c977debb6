"""The agent's metrics, offline: an analysis of the simulator's ecc-reset events (synthesized from its plan) as
Prometheus families, the buckets from the detector's histograms, npu-smi readings as gauges with npu-exporter's
labels, and what never becomes a label."""

from __future__ import annotations

import os
import subprocess
from typing import Any, Dict, List, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from npu_trace.detectors import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.detectors.histogram import Histogram
from npu_trace.device.profiles import PROFILES
from npu_trace.events import NpuEvent
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import synth_events
from npu_trace.sinks.exposition import registry_of, render
from npu_trace.sinks.metrics import (
    LATENCY_BUCKETS_NS,
    MetricsState,
    SnapshotCollector,
    cumulative_buckets,
    label,
)

Samples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(got: Samples, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def analysed(scenario: str = "ecc-reset") -> Tuple[Analysis, MetricsState, List[Any]]:
    actions = plan(scenario, 1, 2.0, 400, 1)
    analysis = Analysis(PROFILES["sim"])
    state = MetricsState()
    state.count(analysis.feed(synth_events(actions)))
    return analysis, state, actions


def exposition(state: MetricsState) -> str:
    return render(registry_of([SnapshotCollector(state)])).decode()


def test_an_ecc_reset_as_metrics() -> None:
    analysis, state, actions = analysed()
    state.count(analysis.advance(max(a.t_ns for a in actions) + 10**10))  # time passes: the sequence closes
    state.publish(analysis, {"tracefs": 0})
    got = samples(exposition(state))
    assert value(got, "npu_trace_findings_total", kind="reset_sequence", id="0") == 1
    assert value(got, "npu_trace_findings_total", kind="spike", id="") == 0  # every kind there from the start
    assert value(got, "npu_trace_timeouts_total", id="0", op="heartbeat") == 1
    submits = sum(1 for a in actions if a.func == "halSqTaskSend" and a.ret == 0)
    assert value(got, "npu_trace_op_latency_seconds_count", id="0", op="task") == submits
    assert value(got, "npu_trace_op_latency_seconds_bucket", id="0", op="task", le="+Inf") == submits
    assert value(got, "npu_trace_device_state", id="0", state="ok") == 1
    assert value(got, "npu_trace_device_state", id="0", state="resetting") == 0
    assert value(got, "npu_trace_device_state_entered_total", id="0", state="resetting") >= 1
    assert value(got, "npu_trace_events_total", kind="reset_step") == analysis.kind_counts["reset_step"]
    assert value(got, "npu_trace_device_ecc_corrected_errors", id="0", model_name="", pcie_bus_info="") == 255
    assert value(got, "npu_trace_lost_events_total", source="tracefs") == 0


def test_latency_buckets_are_cumulative_and_end_at_the_count() -> None:
    analysis, state, _ = analysed("spikes")
    state.publish(analysis, {})
    for series in state.latest.latency:
        assert list(series.buckets) == sorted(series.buckets) and len(series.buckets) == len(LATENCY_BUCKETS_NS) + 1
        hist = analysis.latency.histograms()[(int(series.id), series.op)]
        assert series.buckets[-1] == hist.count and series.sum_s == pytest.approx(hist.total / 1e9)


@pytest.mark.parametrize("ns", [1, 999, 1_000, 2_400, 2_500, 3_000, 99_000, 995_000, 1_000_000, 7_000_000, 10**10,
                                20 * 10**9])  # fmt: skip
def test_a_sample_lands_in_the_bucket_of_its_bound(ns: int) -> None:
    """A sample on a bound or away from it (more than a histogram bucket) is counted under exactly the bounds
    at or above it."""
    hist = Histogram()
    hist.add(ns)
    got = cumulative_buckets(hist)
    want = [1 if ns <= b else 0 for b in LATENCY_BUCKETS_NS] + [1]
    assert list(got) == want


def test_only_moved_histograms_are_recomputed() -> None:
    analysis, state, _ = analysed("steady")
    first = state.publish(analysis, {}).latency
    second = state.publish(analysis, {}).latency
    assert all(a.buckets is b.buckets for a, b in zip(first, second))


def reading(dev: int, **extra: Any) -> NpuEvent:
    """A chip's reading as the npu-smi channel makes it (npu_trace.device.npusmi_events: `log` op `npu_smi`)."""
    args = {"source": "npu-smi", "npu": dev, "chip": 0, "name": "910B3", "health": "OK", "temp_c": 41,
            "power_w": 93.5, "aicore_pct": 37, "used_mb": 3345, "total_mb": 65536, "memory": "hbm",
            "bus_id": "0000:C1:00.0", "processes": 0, **extra}  # fmt: skip
    return NpuEvent(1_000, "log", dev, "npu_smi", -1, -1, args)


def test_npu_smi_readings_become_gauges_with_npu_exporter_labels() -> None:
    analysis = Analysis(PROFILES["sim"])
    link = {"source": "sysfs", "bdf": "0000:c1:00.0", "speed": "8.0 GT/s PCIe", "width": 8,
            "max_speed": "16.0 GT/s PCIe", "max_width": 16, "degraded": 1}  # fmt: skip
    state = MetricsState()
    state.count(analysis.feed_events([reading(0), NpuEvent(2_000, "link", 0, "pcie_link", -1, -1, link)]))
    state.publish(analysis, {})
    got = samples(exposition(state))
    names = {"id": "0", "model_name": "910B3", "pcie_bus_info": "0000:C1:00.0"}
    assert value(got, "npu_trace_device_info", **names) == 1
    assert value(got, "npu_trace_device_temperature_celsius", **names) == 41
    assert value(got, "npu_trace_device_memory_used_bytes", memory="hbm", **names) == 3345 << 20
    assert value(got, "npu_trace_device_memory_size_bytes", memory="hbm", **names) == 65536 << 20
    assert value(got, "npu_trace_device_power_watts", **names) == 93.5
    assert value(got, "npu_trace_device_aicore_utilization_ratio", **names) == pytest.approx(0.37)
    assert value(got, "npu_trace_device_health", health="OK", **names) == 1
    assert value(got, "npu_trace_device_pcie_link_width_lanes", **names) == 8
    assert value(got, "npu_trace_device_pcie_link_max_speed_gigatransfers", **names) == 16
    assert value(got, "npu_trace_device_pcie_link_degraded", **names) == 1
    assert value(got, "npu_trace_findings_total", kind="link_degraded", id="0") == 1


def test_readings_change_no_finding_nor_summary() -> None:
    """The health detector's readings are a view: the same findings and summary with or without them."""
    events = [reading(0, health="Warning"), NpuEvent(5_000, "log", 0, "health", -1, -1, {"health": "Warning"})]
    with_readings, without = Analysis(PROFILES["sim"]), Analysis(PROFILES["sim"])
    assert with_readings.feed_events(events) == without.feed_events(events[1:])
    report, plain = with_readings.finish(), without.finish()
    assert report["findings"] == plain["findings"] and report["summary"]["health"] == plain["summary"]["health"]


@pytest.mark.parametrize("text,want", [("910B3", "910B3"), ("0000:C1:00.0", "0000:C1:00.0"), (None, ""),
                                       ("python3 train.py --lr 0.1", "other"), ("x" * 80, "other"),
                                       ("Link down on bdf 3b:00.0\n", "other"), ("", "other")])  # fmt: skip
def test_host_text_never_becomes_a_label(text: Any, want: str) -> None:
    assert label(text) == want


def test_finding_op_with_free_text_is_other() -> None:
    state = MetricsState()
    state.count([Finding("timeout", 3, "wait for reply from pid 77 (python3)", 1)])
    assert dict(state.timeouts) == {("3", "other"): 1}


@pytest.mark.privileged
def test_promtool_accepts_the_exposition(promtool: str) -> None:
    """promtool lints names, units and types (client_golang's promlint): no complaint."""
    analysis, state, _ = analysed("mixed")
    state.count(analysis.feed_events([reading(0), reading(1, name="Ascend 910B")]))
    state.publish(analysis, {"tracefs": 0, "kmsg": 2}, [("loss", True), ("timeouts", False)],
                  {"start_time_seconds": 1.0, "textfile_errors_total": 0}, [("version", "0.1.0")])  # fmt: skip
    text = exposition(state)
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


def test_a_real_npu_smi_table_as_gauges() -> None:
    """A field sample of `npu-smi info` (tests/data/npusmi/field/info-01.txt: an 8-chip 910B host), read by the
    health channel's parser into its events: every chip a device with its chip name and Bus-Id as labels, its
    HBM used and total in bytes."""
    from npu_trace.device.npusmi_events import devices, table_events
    from npu_trace.device.npusmi_info import parse_table

    here = os.path.join(os.path.dirname(__file__), "data", "npusmi", "field", "info-01.txt")
    with open(here) as f:
        table = parse_table(f.read())
    devs = devices(table, {})
    events = table_events(table, 1_000, devs)
    analysis, state = Analysis(PROFILES["sim"]), MetricsState()
    state.count(analysis.feed_events(events))
    state.publish(analysis, {})
    rows = {d.id: d for d in state.latest.devices}
    assert len(rows) == len(table.chips) >= 2
    for chip in table.chips:
        row = rows[str(devs[(chip.npu, chip.chip)])]
        assert (row.model_name, row.pcie_bus_info) == (label(chip.name), label(chip.bus_id))
        assert row.memory_used_bytes == chip.used_mb * (1 << 20) and row.memory_size_bytes == chip.total_mb * (1 << 20)
        assert row.temp_c == chip.temp_c
    got = samples(exposition(state))
    first = table.chips[0]
    names = {"id": str(devs[(first.npu, first.chip)]), "model_name": first.name, "pcie_bus_info": first.bus_id}
    assert value(got, "npu_trace_device_info", **names) == 1
