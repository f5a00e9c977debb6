"""The simulator's fake npu-smi: every command it answers, parsed by the real parsers (npu_trace.device.npusmi), its
values over the `ecc-reset` scenario (clock faked), the installed script, and HealthSource polling it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from npu_trace.device.npusmi import HealthTracker, error_codes, parse_fields, parse_info, temperature
from npu_trace.device.npusmi_info import parse_table as parse_info_table
from npu_trace.sim import fake_smi
from npu_trace.sim.scenarios import plan
from npu_trace.sim.side_channels import bdf_of
from npu_trace.sources.npusmi_source import QUERIES, HealthSource

T0 = 1_000_000_000_000
MS = 1_000_000


def ecc_state(devices: int = 1, scenario: str = "ecc-reset") -> fake_smi.State:
    actions = plan(scenario, 1, 2.0, 200, devices)
    return fake_smi.State(T0, devices, fake_smi.schedule(actions, devices))


def fields(state: fake_smi.State, query: str, npu: int, now: int) -> Dict[str, Any]:
    rc, out, err = fake_smi.render(["info", "-t", query, "-i", str(npu), "-c", "0"], state, now)
    assert (rc, err) == (0, ""), err
    return parse_fields(out)


def reading(state: fake_smi.State, npu: int, now: int) -> Dict[str, Any]:
    """What HealthSource gathers for one chip: the union of its queries."""
    out: Dict[str, Any] = {}
    for query in QUERIES:
        out.update(fields(state, query, npu, now))
    return out


def test_info_table_is_the_910b_format_and_parses() -> None:
    state = ecc_state(devices=3, scenario="mixed")
    rc, out, _ = fake_smi.render(["info"], state, T0)
    assert rc == 0
    assert {len(line) for line in out.splitlines()} == {98}  # every row as wide as the real table
    chips = parse_info(out)
    assert [(c.npu, c.chip, c.name, c.health, c.temp_c) for c in chips] == [(n, 0, "910B3", "OK", 55) for n in range(3)]
    assert [c.bus_id.lower() for c in chips] == ["0000:" + bdf_of(n) for n in range(3)]
    assert (chips[0].power_w, chips[0].hbm_used_mb, chips[0].hbm_total_mb) == (93.6, 3162, 65536)
    assert "No running processes found in NPU 2" in out


def test_key_value_formats() -> None:
    state = ecc_state()
    _, out, _ = fake_smi.render(["info", "-t", "ecc", "-i", "0", "-c", "0"], state, T0)
    assert "\tHBM Single Bit Error Count               : 0\n" in out  # %-40s for ECC
    _, out, _ = fake_smi.render(["info", "-t", "temp", "-i", "0", "-c", "0"], state, T0)
    assert out == "\tNPU ID                         : 0\n\tChip Count                     : 1\n\n" \
                  "\tNPU Temperature (C)            : 55\n"  # fmt: skip


@pytest.mark.parametrize(
    "query,expect",
    [
        ("ecc", {"hbm_single_bit_error_count": 0, "hbm_double_bit_error_count": 0, "ddr_single_bit_error_count": 0}),
        ("temp", {"npu_temperature_c": 55}),
        ("health", {"health": "OK", "error_code": "NA", "error_information": "NA"}),
        ("pcie-err", {"tx_error_count": 0, "rx_error_count": 0, "retry_count": 0, "dl_dcrc_error_count": 0}),
        ("sensors", {"soc_max_temperature_c": 55, "hbm_temperature_c": 55, "sfp_temperature_c": "NA"}),
        ("memory", {"hbm_capacity_mb": 65536, "hbm_temperature_c": 55}),
    ],
)
def test_each_query_parses_at_baseline(query: str, expect: Dict[str, Any]) -> None:
    got = fields(ecc_state(), query, 0, T0)
    assert {k: got.get(k) for k in expect} == expect


def test_values_follow_the_scenario_over_time() -> None:
    actions = plan("ecc-reset", 1, 2.0, 200, 1)
    ecc = [a for a in actions if a.func == "dms_event_report"]
    resume = next(a for a in actions if a.func == "devdrv_reset_step" and a.args[2] == "heartbeat_resume")
    state = ecc_state()
    seen = []
    for a in ecc:
        now = T0 + a.t_ns
        before, at = reading(state, 0, now - 1), reading(state, 0, now)
        counts = (at["hbm_single_bit_error_count"], at["hbm_double_bit_error_count"])
        assert counts == (a.args[2], a.args[3])
        assert counts > (before["hbm_single_bit_error_count"], before["hbm_double_bit_error_count"])
        assert at["npu_temperature_c"] == a.args[4] > before["npu_temperature_c"]
        seen.append(at["health"])
    assert seen[:-1] == ["Warning"] * (len(ecc) - 1) and seen[-1] == "Alarm"
    alarm = reading(state, 0, T0 + resume.t_ns - 1)
    assert error_codes(alarm) == ["80E01800", "80E01801"]
    after = reading(state, 0, T0 + resume.t_ns)
    assert (after["health"], after["error_code"], temperature(after)) == ("OK", "NA", 55)
    assert (after["hbm_single_bit_error_count"], after["hbm_double_bit_error_count"]) == (255, 1)  # counts stay
    assert reading(state, 0, T0 + 10**12) == after  # after the run: the final state


def test_health_tracker_sees_the_climb_then_recovery() -> None:
    state = ecc_state()
    tracker = HealthTracker()
    events = []
    for now in range(T0, T0 + 2000 * MS, 50 * MS):  # a poll every 50 ms
        events += tracker.update(0, reading(state, 0, now), now)
    ce = [e.args["ce_count"] for e in events if e.kind == "ecc"]
    assert ce[0] == 0 and ce == sorted(ce) and ce[-1] == 255 and len(set(ce)) >= 6
    temps = [e.args["temp_c"] for e in events if e.kind == "thermal"]
    assert max(temps) == 96 and temps[-1] == 55
    assert [e.args["health"] for e in events if e.op == "health"] == ["OK", "Warning", "Alarm", "OK"]


def test_mixed_resets_its_last_device_only() -> None:
    state = ecc_state(devices=3, scenario="mixed")
    end = T0 + 10**12
    assert reading(state, 2, end)["hbm_double_bit_error_count"] == 1
    assert reading(state, 0, end)["hbm_single_bit_error_count"] == 0
    assert {s[1] for s in state.steps} == {2}


def test_errors_and_version() -> None:
    state = ecc_state()
    assert fake_smi.render(["-v"], state, T0)[0] == 0
    bad = [["info", "-t", "ecc", "-i", "1", "-c", "0"], ["info", "-t", "ecc", "-i", "0", "-c", "1"],
           ["info", "-t", "nosuch", "-i", "0"], ["info", "-t"], ["query"], ["info", "-x", "1", "-i", "0"]]  # fmt: skip
    for argv in bad:
        rc, out, err = fake_smi.render(argv, state, T0)
        assert rc == 1 and out == "" and err, argv


def test_summary_for_the_truth_file() -> None:
    actions = plan("ecc-reset", 1, 2.0, 200, 1)
    s = fake_smi.summary(fake_smi.schedule(actions, 1), T0)
    climb = s["ecc_climb"]
    assert [c["ce"] for c in climb] == [1, 3, 7, 15, 31, 63, 127, 255, 255] and climb[-1]["uce"] == 1
    uce = next(a for a in actions if a.func == "dms_event_report" and a.args[3] == 1)
    assert s["temp_peak"] == [{"t_ns": T0 + uce.t_ns, "dev": 0, "temp_c": 96, "hbm_temp_c": 96}]
    assert s["steps"][-1]["health"] == "OK"


def test_state_round_trip(tmp_path: Path) -> None:
    state = ecc_state()
    path = fake_smi.write_state(str(tmp_path), state)
    back = fake_smi.State.load(path)
    assert (back.t0_ns, back.devices, back.steps) == (state.t0_ns, state.devices, state.steps)


def _install(tmp_path: Path, t0: int) -> str:
    script = fake_smi.install(str(tmp_path))
    fake_smi.write_state(str(tmp_path), fake_smi.State(t0, 1, ecc_state().steps))
    return script


def test_installed_script_answers_with_the_state(tmp_path: Path) -> None:
    script = _install(tmp_path, time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 10 * 10**9)  # run long over
    assert os.access(script, os.X_OK)
    out = subprocess.run([script, "info", "-t", "ecc", "-i", "0", "-c", "0"], capture_output=True, text=True,
                         timeout=30, check=True).stdout  # fmt: skip
    assert parse_fields(out)["hbm_single_bit_error_count"] == 255
    info = subprocess.run([script, "info"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert [(c.npu, c.health) for c in parse_info(info)] == [(0, "OK")]


def test_each_answer_is_recorded_and_whole_polls_counted(tmp_path: Path) -> None:
    script = _install(tmp_path, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    assert fake_smi.polls_since(str(tmp_path), before) == 0
    poll = [[script, "info"], [script, "info", "-t", "ecc", "-i", "0", "-c", "0"]]  # a poll: the table, then queries
    for argv in poll + poll[:1]:
        subprocess.run(argv, capture_output=True, timeout=30, check=True)
    assert fake_smi.polls_since(str(tmp_path), before) == 1  # the first is whole: the next one began
    assert fake_smi.polls_since(str(tmp_path), time.clock_gettime_ns(time.CLOCK_MONOTONIC)) == 0


def test_installed_script_without_state_fails_clearly(tmp_path: Path) -> None:
    script = fake_smi.install(str(tmp_path))
    proc = subprocess.run([script, "info"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == "" and "npu-trace sim run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_health_source_polls_the_fake(tmp_path: Path) -> None:
    """A poll reads what the fake says at its own time: a state that ends at the scenario's third ECC report
    reads ce = 7 from then on, however late the poll runs; then the whole scenario's state, long over."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    actions = plan("ecc-reset", 1, 60.0, 200, 1)
    steps = fake_smi.schedule(actions, 1)
    third = [a for a in actions if a.func == "dms_event_report"][2]
    script = fake_smi.install(str(tmp_path))
    t0 = now - third.t_ns - 12 * 10**8  # "now" is 1.2 s after the third ECC report: ce = 7
    until_third = [step for step in steps if step[0] <= third.t_ns]
    assert until_third[-1][2]["ce"] == 7 and len(until_third) < len(steps)
    fake_smi.write_state(str(tmp_path), fake_smi.State(t0, 1, until_third))
    src = HealthSource(npu_smi=script, pci_root=str(tmp_path / "no-pci"))
    first = src.poll()
    fake_smi.write_state(str(tmp_path), fake_smi.State(now - 70 * 10**9, 1, steps))  # later: all over
    second = src.poll()
    assert src.notes() == []
    ecc: List[Any] = [e for e in first + second if e.kind == "ecc"]
    assert [(e.args["ce_count"], e.args["uce_count"]) for e in ecc] == [(7, 0), (255, 1)]
    assert ecc[1].args["ce_delta"] == 248 and ecc[1].dev == 0
    health = [e.args["health"] for e in first + second if e.op == "health"]
    assert health == ["Warning", "OK"]


def test_shared_weights_memory_is_counted_in_every_process_that_maps_it() -> None:
    """The fake's memory follows the plan: the chip uses what its allocations hold (plus its own), each process
    row is what it allocated plus the shared regions it maps, as the real npu-smi counts them."""
    from npu_trace.sim.scenarios import GIB, WEIGHTS_BYTES, plan_run

    actions, shares, procs = plan_run("shared-weights", 1, 2.0, 200, 2)
    assert procs == 3 and [(s.dev, s.proc, s.size) for s in shares] == [(0, 1, WEIGHTS_BYTES), (0, 2, WEIGHTS_BYTES)]
    state = fake_smi.State(T0, 2, [], fake_smi.memory_schedule(actions, 2, shares),
                           [(0, 700, "loader"), (1, 701, "worker"), (2, 702, "worker")])  # fmt: skip
    table = parse_info_table(fake_smi.render_info(state, T0))
    assert [c.hbm_used_mb for c in table.chips] == [3162, 3162] and table.processes == []
    before, after = T0 + shares[0].t_ns - 1, T0 + shares[0].t_ns
    held = (WEIGHTS_BYTES + 20 * GIB) >> 20  # the weights and the half of the pool kept
    table = parse_info_table(fake_smi.render_info(state, before))
    assert table.chips[0].hbm_used_mb == 3162 + held
    assert [(p.pid, p.memory_mb) for p in table.processes if p.npu == 0] == [(700, held)]
    table = parse_info_table(fake_smi.render_info(state, after))
    assert table.chips[0].hbm_used_mb == 3162 + held
    rows = [(p.pid, p.name, p.memory_mb) for p in table.processes if p.npu == 0]
    assert rows == [(700, "loader", held), (701, "worker", WEIGHTS_BYTES >> 20), (702, "worker", WEIGHTS_BYTES >> 20)]
    assert fake_smi.State.from_dict(state.to_dict()).to_dict() == state.to_dict()
