"""The native executor for real, without probes (no tracing, no root needed): its threads keep cause before
effect whatever the scheduler does, run where the plan says, and it still works on a host with one CPU.

Nothing here depends on timing luck: the assertions hold by construction of the executor (waits, pinning),
except that periodic moves are seen at all, which takes one of hundreds of chances."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Any, Dict, Iterator, List

import pytest

from npu_trace import cli, sim
from npu_trace.sim import build
from npu_trace.sim.threads import HOST_LIKE, IRQ_THREAD, Host
from test_cli_errors import assert_one_line_error, run_cli

# runs the simulator's executor: while a privileged test has its uprobes registered, these calls would land in
# that test's trace (tests/conftest.py: the host group)
pytestmark = pytest.mark.host

Truth = Dict[str, Any]


def run(scenario: str, host: Host, duration_s: float = 0.5, seed: int = 4) -> Truth:
    return sim.run_scenario(scenario, seed, duration_s, 600, 2, ensure_loaded=False, host=host)


def by_thread(truth: Truth) -> Dict[int, List[Dict[str, Any]]]:
    out: Dict[int, List[Dict[str, Any]]] = {}
    for rec in truth["actions"]:
        out.setdefault(rec["thread"], []).append(rec)
    return out


def check_cause_before_effect(truth: Truth) -> None:
    recs = truth["actions"]
    for rec in recs:
        assert rec["start_ns"] >= truth["t0_ns"] + rec["t_ns"], rec  # never before its planned time
        if rec["after"] is not None:
            assert rec["start_ns"] >= recs[rec["after"]]["end_ns"], rec  # never before what it waits for
    for mine in by_thread(truth).values():  # one thread: one action at a time, in plan order
        assert all(b["start_ns"] >= a["end_ns"] for a, b in zip(mine, mine[1:]))
        assert len({r["tid"] for r in mine}) == 1


@pytest.fixture(scope="module")
def two_cpus() -> Iterator[None]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    yield


@pytest.mark.parametrize("scenario", ["mixed", "spikes"])
def test_host_like_keeps_cause_before_effect_on_other_cpus(two_cpus: None, scenario: str) -> None:
    truth = run(scenario, HOST_LIKE)
    check_cause_before_effect(truth)
    recs = truth["actions"]
    assert truth["host"]["pinned"] and truth["host"]["threads"] == 6
    threads = by_thread(truth)
    assert len({r["tid"] for r in recs}) == len(threads) >= 5
    away = [r for r in recs if r["away"]]
    assert away and all(r["cpus"][0] != recs[r["after"]]["cpus"][-1] for r in away)  # completed elsewhere
    hops = [r for r in recs if r["hop"]]
    assert hops and all(r["cpus"][0] != r["cpus"][1] for r in hops)  # returned on another CPU
    assert {c for r in recs for c in r["cpus"]} <= set(truth["host"]["cpus"])


def test_the_interrupt_thread_is_the_main_thread(two_cpus: None) -> None:
    run_ = sim.start_scenario("steady", 1, 0.3, 600, 1, ensure_loaded=False, host=HOST_LIKE)
    truth = run_.wait(timeout=60)
    irq = {r["tid"] for r in truth["actions"] if r["thread"] == IRQ_THREAD}
    assert irq == {run_.pid}  # what single-thread tools keyed on the pid still find: the interrupts
    assert run_.pid not in {r["tid"] for r in truth["actions"] if r["thread"] != IRQ_THREAD}


def test_threads_are_moved_between_cpus_while_they_run(two_cpus: None) -> None:
    """No hops planned: a thread changes CPU between two of its calls only because the executor moved it."""
    truth = run("steady", Host(app_threads=4, migrate_ms=1.0, hop_share=0.0))
    check_cause_before_effect(truth)
    assert not any(r["hop"] for r in truth["actions"])
    moved = [(a, b) for t, mine in by_thread(truth).items() if t != IRQ_THREAD
             for a, b in zip(mine, mine[1:]) if b["cpus"][0] != a["cpus"][-1]]  # fmt: skip
    assert len(moved) > 5


def test_without_periodic_moves_threads_stay_put_between_calls(two_cpus: None) -> None:
    truth = run("steady", Host(app_threads=4, migrate_ms=0.0, hop_share=0.0))
    check_cause_before_effect(truth)
    for t, mine in by_thread(truth).items():
        if t != IRQ_THREAD:  # the interrupt thread moves for its completions (away); nobody else moves
            assert {c for r in mine for c in r["cpus"]} == {mine[0]["cpus"][0]}


def test_single_thread_mode_is_the_executor_of_old() -> None:
    run_ = sim.start_scenario("mixed", 2, 0.3, 600, 2, ensure_loaded=False, host=sim.SINGLE)
    truth = run_.wait(timeout=60)
    check_cause_before_effect(truth)
    assert truth["host"]["threads"] == 1 and not truth["host"]["pinned"]
    assert {r["tid"] for r in truth["actions"]} == {run_.pid}
    starts = [r["start_ns"] for r in truth["actions"]]
    assert starts == sorted(starts)  # one thread in plan order: the truth order is the time order


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """This process (and so the executor it starts) restricted to one CPU, as on a 1-CPU host."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def test_host_like_on_one_cpu_runs_everything_without_moving(one_cpu: int) -> None:
    truth = run("mixed", dataclasses.replace(HOST_LIKE, migrate_ms=0.5))
    check_cause_before_effect(truth)
    assert truth["host"]["cpus"] == [one_cpu] and not truth["host"]["pinned"]
    assert {c for r in truth["actions"] for c in r["cpus"]} == {one_cpu}
    assert len({r["tid"] for r in truth["actions"]}) == 6


def executor(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([build.ensure_built(), *argv], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "line",
    ["0 0 0 0 halMemFree 0 0 0 1 0 0 0 0 -",  # waits for itself
     "0 0 5 0 halMemFree 0 0 0 1 0 0 0 0 -",  # waits for a later action
     "0 64 -1 0 halMemFree 0 0 0 1 0 0 0 0 -",  # no such thread
     "0 0 -1 4 halMemFree 0 0 0 1 0 0 0 0 -",  # unknown flag
     "0 halMemFree 0 0 0 1 0 0 0 0 -"],  # the plan line of old
)  # fmt: skip
def test_executor_rejects_a_bad_plan_line(tmp_path: Any, line: str) -> None:
    plan = tmp_path / "plan"
    plan.write_text(line + "\n")
    proc = executor(str(plan), str(tmp_path / "out"))
    assert proc.returncode == 2 and "npu-sim: bad plan line 1" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["-m"], ["-m", "x", "p", "o"], ["-m", "-5", "p", "o"], ["-m", "60000001", "p", "o"],
                                  ["p"], ["-x", "1", "p", "o"], ["-H"], ["-H", "lib", "p"], ["-T", "v3", "p", "o"],
                                  ["-T"]])  # fmt: skip
def test_executor_usage_errors(argv: List[str]) -> None:
    proc = executor(*argv)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: npu-sim [-m MIGRATE_US] [-H LIB [-T stars|ts]] PLAN OUT")


def sim_run(tmp_path: Any, *args: str) -> Truth:
    """`npu-trace sim run` without probes or side channels; its truth."""
    truth_path = tmp_path / "t.json"
    argv = ["sim", "run", "--scenario", "mixed", "--duration", "0.3", "--no-load", "--no-channels", *args]
    assert cli.main([*argv, "--truth", str(truth_path)]) == 0
    return dict(json.loads(truth_path.read_text()))


def test_sim_run_is_host_like_by_default_and_single_thread_on_request(tmp_path: Any, capsys: Any) -> None:
    host = sim_run(tmp_path)["host"]
    assert (host["threads"], host["app_threads"], host["migrate_ms"]) == (6, 4, HOST_LIKE.migrate_ms)
    assert capsys.readouterr().err.splitlines()[-1].startswith("executor: 6 threads on ")
    single = sim_run(tmp_path, "--threads", "0")
    assert (single["host"]["threads"], single["host"]["migrate_ms"]) == (1, 0.0)
    assert len({r["tid"] for r in single["actions"]}) == 1
    assert "executor: 1 thread (single-thread mode)" in capsys.readouterr().err
    still = sim_run(tmp_path, "--threads", "2", "--migrate-ms", "0")["host"]
    assert (still["threads"], still["migrate_ms"]) == (4, 0.0)


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--threads", "0", "--migrate-ms", "2"], "needs application threads"),
     (["--threads", "99"], "--threads must be in [0, 32]"),
     (["--migrate-ms", "-1"], "--migrate-ms must be in [0, 1000]")],
)  # fmt: skip
def test_bad_host_options_are_one_line(args: List[str], words: str) -> None:
    argv = ["sim", "run", "--duration", "0.1", "--no-load", "--no-channels", *args]
    assert_one_line_error(run_cli(argv), 2, words)
    assert_one_line_error(run_cli(["demo", "--headless", *args]), 2, words)  # before it loads or traces anything
