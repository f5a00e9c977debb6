"""Pure tests of the scenario planner: determinism, counts, and that injected things sit where the truth says."""

from __future__ import annotations

import collections
from typing import List

import pytest

from npu_trace.device import hal
from npu_trace.errors import InputError
from npu_trace.sim.runner import build_truth, expected_events, plan_line
from npu_trace.sim.scenarios import KINDS, MS, SCENARIOS, Action, Heap, plan


def _by_kind(actions: List[Action], kind: str) -> List[Action]:
    return [a for a in actions if a.kind == kind]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_seed_same_plan(scenario: str) -> None:
    assert plan(scenario, 7, 0.5, 400, 2) == plan(scenario, 7, 0.5, 400, 2)
    assert plan(scenario, 7, 0.5, 400, 2) != plan(scenario, 8, 0.5, 400, 2)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_plan_is_well_formed(scenario: str) -> None:
    actions = plan(scenario, 3, 0.5, 400, 3)
    assert [a.t_ns for a in actions] == sorted(a.t_ns for a in actions)
    for a in actions:
        func = hal.FUNC_BY_NAME[a.func]
        assert len(a.args) == len(func.params)
        assert 0 <= a.dev < 3
        assert a.kind in KINDS
        assert (a.ret is not None) == func.hal
        assert a.delay_ns == 0 or func.hal


def test_steady_rate_and_mix() -> None:
    actions = plan("steady", 1, 2.0, 500, 2)
    assert 800 <= len(actions) <= 1200  # ~rate x duration calls
    counts = collections.Counter(a.func for a in actions)
    assert counts["halSqTaskSend"] == counts["trs_logic_cq_enque"] == counts["halCqReportRecv"]
    assert counts["irq_handler_entry"] == counts["irq_handler_exit"]
    assert counts["halMemAlloc"] == counts["devmm_alloc_done"] > 0
    assert counts["halMemFree"] > 0
    assert {a.kind for a in actions} == {"call", "irq"}
    assert all(a.ret == 0 or a.func == "halCqReportRecv" for a in actions if a.ret is not None)


def test_spikes_have_large_injected_delay() -> None:
    actions = plan("spikes", 5, 2.0, 300, 2)
    spikes = [a for a in _by_kind(actions, "spike") if a.ret is not None]
    assert len(spikes) == 8
    assert all(20 * MS <= a.delay_ns <= 60 * MS for a in spikes)
    normal = [a.delay_ns for a in actions if a.ret is not None and a.kind == "call"]
    assert max(normal) < 1 * MS


def test_fragmentation_failures_have_free_memory_but_no_block() -> None:
    actions = plan("fragmentation", 2, 1.0, 300, 2)
    fails = _by_kind(actions, "alloc_fail")
    assert [a.func for a in fails] == ["halMemAlloc", "devmm_alloc_done"] * 3
    for done in (a for a in fails if a.func == "devmm_alloc_done"):
        f = done.fields()
        assert f["ret"] == hal.ENOMEM and f["va"] == 0
        assert f["largest_free"] < f["size"] <= f["free_bytes"]
    assert all(a.ret == hal.ENOMEM for a in fails if a.func == "halMemAlloc")
    last = [a for a in actions if a.func == "devmm_alloc_done" and a.phase == "recover"]
    assert last and last[-1].fields()["ret"] == 0  # the same request succeeds once memory is defragmented


def test_ecc_reset_sequence() -> None:
    actions = plan("ecc-reset", 4, 2.0, 300, 2)
    ecc = _by_kind(actions, "ecc")
    ce = [a.fields()["ce_count"] for a in ecc]
    temps = [a.fields()["temp_c"] for a in ecc]
    assert ce == sorted(ce) and temps == sorted(temps) and ecc[-1].fields()["event_id"] == hal.ECC_UCE_EVENT
    steps = _by_kind(actions, "reset_step")
    assert [a.args[2] for a in steps] == list(hal.RESET_STEPS)
    assert [a.args[1] for a in steps] == list(range(1, len(hal.RESET_STEPS) + 1))
    assert {a.dev for a in ecc + steps} == {0}
    lost = _by_kind(actions, "heartbeat_lost")
    timeouts = [a for a in _by_kind(actions, "timeout") if a.func == "halCqReportRecv"]
    assert len(lost) == 1 and len(timeouts) == 3 and all(a.ret == hal.ETIMEDOUT for a in timeouts)
    assert ecc[-1].t_ns < timeouts[0].t_ns < lost[0].t_ns < steps[0].t_ns
    busy = [a for a in actions if a.dev == 0 and a.kind == "call" and lost[0].t_ns <= a.t_ns <= steps[-1].t_ns]
    assert busy == []  # no traffic on the device while it is lost / resetting
    assert any(a.dev == 0 and a.t_ns > steps[-1].t_ns for a in actions)  # healthy again afterwards


def test_irq_storm() -> None:
    actions = plan("irq-storm", 1, 1.0, 300, 1)
    storm = [a for a in actions if a.phase == "storm"]
    assert len(storm) >= 4000
    entries = collections.Counter(a.args[2] for a in storm if a.func == "irq_handler_entry")
    assert set(entries) == {"cq_update_irq", "trs-mbox-0-0"}
    span = (storm[-1].t_ns - storm[0].t_ns) / 1e9
    assert len(storm) / 2 / span > 10_000


def test_mixed_has_everything() -> None:
    kinds = {a.kind for a in plan("mixed", 1, 1.0, 300, 2)}
    assert kinds == set(KINDS)


def test_validation() -> None:
    with pytest.raises(InputError):
        plan("nope", 1, 1, 1, 1)
    with pytest.raises(InputError):
        plan("steady", 1, 0, 1, 1)
    with pytest.raises(InputError):
        plan("steady", 1, 1, 100, 0)


def test_heap_first_fit_and_merge() -> None:
    heap = Heap(0, capacity=100)
    a, b, c = heap.alloc(30), heap.alloc(30), heap.alloc(30)
    assert a is not None and b is not None and c is not None and heap.alloc(20) is None
    heap.release(a)
    heap.release(c)
    assert heap.free_bytes == 70 and heap.largest == 40
    heap.release(b)
    assert heap.holes == [(0, 100)]


def test_plan_line_and_truth() -> None:
    acts = [
        Action(10, "irq_handler_entry", (1, 130, "trs-mbox-1-0"), kind="irq"),
        Action(20, "halCqReportRecv", (1, 0, 3, 20), ret=-110, delay_ns=5, kind="timeout"),
        Action(30, "devdrv_reset_step", (1, 4, "reset_begin", 0), kind="reset_step"),
    ]
    assert plan_line(acts[0]) == "10 0 -1 0 irq_handler_entry 0 0 1 130 0 0 0 0 trs-mbox-1-0\n"
    assert plan_line(acts[1]) == "20 0 -1 0 halCqReportRecv -110 5 1 0 3 20 0 0 -\n"
    assert plan_line(acts[2]) == "30 0 -1 0 devdrv_reset_step 0 0 1 4 0 0 0 0 reset_begin\n"
    truth = build_truth({"scenario": "x"}, acts, [(1, 2, 0), (3, 4, -110), (5, 6, 0)])
    assert truth["counts"] == {"devdrv_reset_step": 1, "halCqReportRecv": 1, "irq_handler_entry": 1}
    assert truth["actions"][1]["args"] == {"dev": 1, "ts": 0, "stream": 3, "timeout_ms": 20}
    assert expected_events(truth) == [
        ("ascend_irq_handler_entry", 'dev=1 irq=130 name="trs-mbox-1-0"'),
        ("ascend_halCqReportRecv", "dev=1 ts=0 stream=3 timeout_ms=20"),
        ("ascend_halCqReportRecv_ret", "ret=-110"),
        ("ascend_devdrv_reset_step", 'dev=1 step=4 step_name="reset_begin" ret=0'),
    ]


def test_render_value() -> None:
    assert hal.render_value("x32", hal.ECC_UCE_EVENT) == "0x80e01801"
    assert hal.render_value("x64", 0) == "0x0"
    assert hal.render_value("s32", -110) == "-110"


@pytest.mark.parametrize("duration, rate, devices", [(-1, 100, 1), (float("nan"), 100, 1), (1, 0, 1), (1, 100, 0)])
def test_a_bad_run_value_is_refused_before_the_uprobes_are_loaded(duration: float, rate: float, devices: int) -> None:
    """`sim run --duration -1` as root loaded the simulator's uprobe events, then refused the value, leaving them
    registered: the values are checked first now."""
    from unittest import mock

    from npu_trace import sim

    with mock.patch.object(sim, "load") as load, pytest.raises(InputError):
        sim.start_scenario("steady", 1, duration, rate, devices, fs=mock.sentinel.tracefs)
    load.assert_not_called()
