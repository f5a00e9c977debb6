"""The host-like executor replayed in time (npu_trace.sim.timing): each placed action's times, thread and CPUs
follow the executor's rules, so synthesized host-like runs look like the kernel's trace of a real one."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Set, Tuple

import pytest

from npu_trace.device import hal
from npu_trace.sim.scenarios import SCENARIOS, Action, plan
from npu_trace.sim.threads import HOST_LIKE, IRQ_THREAD, SINGLE, Host
from npu_trace.sim.timing import STEP_NS, HostTiming, Run

T0 = 10**12


def timed(scenario: str, host: Host = HOST_LIKE, cpus: Tuple[int, ...] = (0, 1)) -> List[Tuple[Action, Run]]:
    actions = plan(scenario, 3, 1.0, 2000, 2, host=host)
    timing = HostTiming(host, cpus, T0)
    return [(a, timing.run(a)) for a in actions]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_thread_runs_its_actions_in_order_after_what_they_wait_for(scenario: str) -> None:
    runs = timed(scenario)
    last: Dict[int, int] = {}
    for a, run in runs:
        assert run.start_ns >= T0 + a.t_ns and run.tid == 4242 + a.thread
        assert run.end_ns == run.start_ns + (a.delay_ns if hal.FUNC_BY_NAME[a.func].hal else 0)
        if a.thread in last:
            assert run.start_ns >= last[a.thread] + STEP_NS
        if a.after is not None:
            assert run.start_ns >= runs[a.after][1].end_ns + STEP_NS
        last[a.thread] = run.end_ns


def test_tasks_complete_on_another_cpu_than_their_submit_and_hops_return_elsewhere() -> None:
    runs = timed("mixed")
    completions = [(a, r) for a, r in runs if a.away]
    assert len(completions) > 100
    for a, r in completions:
        send = runs[a.after][1]  # type: ignore[index]
        assert a.thread == IRQ_THREAD and r.cpu_in != send.cpu_out
    hops = [r for a, r in runs if a.hop]
    assert len(hops) > 100 and all(r.cpu_in != r.cpu_out for r in hops)


def cpus_by_thread(runs: List[Tuple[Action, Run]]) -> Dict[int, Set[int]]:
    out: Dict[int, Set[int]] = {}
    for a, r in runs:
        out.setdefault(a.thread, set()).add(r.cpu_in)
    return out


def test_threads_move_between_cpus_every_tick_but_the_interrupt_thread_only_to_keep_away() -> None:
    assert all(seen == {0, 1} for seen in cpus_by_thread(timed("steady")).values())
    still = cpus_by_thread(timed("steady", dataclasses.replace(HOST_LIKE, migrate_ms=0.0, hop_share=0.0)))
    assert all(len(seen) == 1 for thread, seen in still.items() if thread != IRQ_THREAD)
    assert still[IRQ_THREAD] == {0, 1}


def test_deterministic_and_one_cpu_keeps_everything_there() -> None:
    assert timed("mixed") == timed("mixed")
    assert {(r.cpu_in, r.cpu_out) for _, r in timed("mixed", cpus=(3,))} == {(3, 3)}
    single = timed("mixed", SINGLE)
    assert {(r.tid, r.cpu_in, r.cpu_out) for _, r in single} == {(4242, 0, 0)}


def test_a_long_run_keeps_only_the_last_second_and_forgetting_changes_no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 3.5 s of plan, the timing keeps the actions from one plan index to the last (fewer than half; the
    oldest forgotten first), the last one it forgot ended KEEP_NS before the latest planned start, and its runs
    are those of a timing that forgets nothing."""
    from npu_trace.sim import timing as timing_module

    keep_ns = timing_module.KEEP_NS
    actions = plan("mixed", 5, 3.5, 2000, 2, host=HOST_LIKE)
    forgetting = HostTiming(HOST_LIKE, (0, 1), T0)
    runs = [forgetting.run(a) for a in actions]
    monkeypatch.setattr(timing_module, "KEEP_NS", 10**18)
    keeping = HostTiming(HOST_LIKE, (0, 1), T0)
    assert [keeping.run(a) for a in actions] == runs
    assert len(keeping.done) == len(actions)
    kept = list(forgetting.done)
    assert kept == list(range(len(actions) - len(kept), len(actions))) and 0 < len(kept) < len(actions) // 2
    latest = T0 + actions[-1].t_ns
    assert runs[kept[0] - 1].end_ns + STEP_NS + keep_ns <= latest
