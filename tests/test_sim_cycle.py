"""The demo's scenarios one after another (npu_trace.sim.cycle), offline: a fake executor start records what
would run; each run is reaped before the next starts, rounds repeat, terminate stops the running one."""

from __future__ import annotations

from typing import Any, List, Optional

from npu_trace.sim.cycle import DEMO_CYCLE, CyclePlan, ScenarioCycle


class FakeRun:
    def __init__(self, name: str, seed: int, seconds: float) -> None:
        self.name, self.seed, self.seconds = name, seed, seconds
        self.ended = False
        self.waited = self.terminated = False

    def poll(self) -> Optional[int]:
        return 0 if self.ended else None

    def wait(self) -> dict:
        self.waited = True
        return {}

    def terminate(self) -> None:
        self.terminated = True


def test_scenarios_run_one_after_another_round_after_round_until_stopped() -> None:
    runs: List[FakeRun] = []
    said: List[str] = []

    def start(name: str, seed: int, seconds: float, rate: float, devices: int, **kw: Any) -> FakeRun:
        assert kw["ensure_loaded"] is False and rate == 300 and devices == 2
        runs.append(FakeRun(name, seed, seconds))
        return runs[-1]

    cycle = ScenarioCycle(CyclePlan(rate=300, devices=2, seed=7), start, on_start=said.append)  # type: ignore[arg-type]
    assert cycle.poll() is False and len(runs) == 1
    assert cycle.poll() is False and len(runs) == 1  # still running: nothing new
    for _ in range(2 * len(DEMO_CYCLE)):
        runs[-1].ended = True
        assert cycle.poll() is False
        assert runs[-2].waited  # reaped before the next started
    assert [r.name for r in runs] == [name for name, _ in DEMO_CYCLE] * 2 + [DEMO_CYCLE[0][0]]
    assert [r.seed for r in runs] == list(range(7, 7 + len(runs)))  # a new seed each run
    assert said[4] == f"scenario {DEMO_CYCLE[0][0]} (1/4), {DEMO_CYCLE[0][1]:g} s, round 2"
    cycle.terminate()
    assert runs[-1].terminated and cycle.run is None


def test_rounds_and_a_single_scenario() -> None:
    runs: List[FakeRun] = []

    def start(name: str, seed: int, seconds: float, *a: Any, **kw: Any) -> FakeRun:
        runs.append(FakeRun(name, seed, seconds))
        runs[-1].ended = True
        return runs[-1]

    plan = CyclePlan.of("spikes", None, rounds=3)
    assert plan.steps == (("spikes", 10.0),)
    cycle = ScenarioCycle(plan, start)  # type: ignore[arg-type]
    assert [cycle.poll() for _ in range(4)] == [False, False, False, True]
    assert [(r.name, r.seconds) for r in runs] == [("spikes", 10.0)] * 3
    assert CyclePlan.of("cycle", 5.0).steps == tuple((name, 5.0) for name, _ in DEMO_CYCLE)
