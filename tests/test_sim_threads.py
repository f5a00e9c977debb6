"""Pure tests of the executor threads the planner assigns (npu_trace.sim.threads), the plan line that carries
them and the executor output the truth is built from."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, List, Tuple

import pytest

from npu_trace.device import hal
from npu_trace.errors import InputError, SimulatorError
from npu_trace.sim.runner import Observed, build_truth, parse_output, plan_line
from npu_trace.sim.scenarios import SCENARIOS, Action, plan, plan_stream
from npu_trace.sim.threads import DRIVER_THREAD, FIRST_APP_THREAD, HOST_LIKE, IRQ_THREAD, SINGLE, Host, Placer, place

ARGS = (0.5, 600, 2)  # duration_s, rate, devices
TASK_FUNCS = ("halSqTaskSend", "irq_handler_entry", "trs_logic_cq_enque", "irq_handler_exit", "halCqReportRecv")


def placed(scenario: str, seed: int = 3, host: Host = HOST_LIKE) -> List[Action]:
    return plan(scenario, seed, *ARGS, host=host)


def unplaced(a: Action) -> Action:
    return dataclasses.replace(a, thread=0, after=None, away=False, hop=False)


def groups(actions: List[Action]) -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for i, a in enumerate(actions):
        out.setdefault(a.group, []).append(i)
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_host_changes_where_actions_run_never_what_they_are(scenario: str) -> None:
    single = plan(scenario, 3, *ARGS)
    assert single == placed(scenario, host=SINGLE)
    assert all((a.thread, a.after, a.away, a.hop) == (0, None, False, False) for a in single)
    assert [unplaced(a) for a in placed(scenario)] == single


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_placement_is_deterministic_from_the_seed(scenario: str) -> None:
    assert placed(scenario, 5) == placed(scenario, 5)
    where = [(a.thread, a.hop) for a in placed(scenario, 5)]
    again = [(a.thread, a.hop) for a in plan(scenario, 5, *ARGS, host=dataclasses.replace(HOST_LIKE, migrate_ms=7))]
    assert where == again  # periodic moves happen in the executor, not in the plan
    other = plan(scenario, 6, *ARGS, host=HOST_LIKE)
    assert [unplaced(a) for a in other] != [unplaced(a) for a in placed(scenario, 5)]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_threads_by_role(scenario: str) -> None:
    actions = placed(scenario)
    apps = range(FIRST_APP_THREAD, FIRST_APP_THREAD + HOST_LIKE.app_threads)
    for a in actions:
        if a.func in ("irq_handler_entry", "trs_logic_cq_enque", "irq_handler_exit"):
            assert a.thread == IRQ_THREAD, a
        elif hal.FUNC_BY_NAME[a.func].hal:
            assert a.thread in apps, a
        else:
            assert a.thread == DRIVER_THREAD, a
    assert len({a.thread for a in actions if a.thread in apps}) >= 3  # the work is spread


def test_a_task_is_sent_and_reaped_on_its_streams_thread_and_completed_away_from_it() -> None:
    actions = placed("mixed")
    tasks = [ix for ix in groups(actions).values() if actions[ix[0]].func == "halSqTaskSend"]
    assert len(tasks) > 20
    streams: Dict[Tuple[int, int], int] = {}
    for ix in tasks:
        send, entry, enque, exit_, reap = (actions[i] for i in ix)
        assert [a.func for a in (send, entry, enque, exit_, reap)] == list(TASK_FUNCS)
        assert (entry.after, entry.away) == (ix[0], True)  # the interrupt waits for the send, on another CPU
        assert enque.after is None and exit_.after is None  # the same interrupt thread, in order
        assert reap.after == ix[3] and reap.thread == send.thread  # the application reaps after the exit
        key = (send.dev, int(send.args[2]))
        assert streams.setdefault(key, send.thread) == send.thread  # one thread per (device, stream)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_wait_is_for_an_earlier_action_on_another_thread(scenario: str) -> None:
    """What makes the executor deadlock-free (it runs each thread's actions in plan order), and minimal."""
    actions = placed(scenario)
    waits = [(i, a.after) for i, a in enumerate(actions) if a.after is not None]
    assert waits
    for i, after in waits:
        assert 0 <= after < i and actions[after].thread != actions[i].thread
    assert all(a.after is not None and actions[a.after].func == "halSqTaskSend" for a in actions if a.away)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_operation_runs_in_its_planned_order_across_threads(scenario: str) -> None:
    """Within an operation, each action follows the previous one: on the same thread (plan order) or by waiting."""
    actions = placed(scenario)
    for ix in groups(actions).values():
        for prev, cur in zip(ix, ix[1:]):
            assert actions[cur].thread == actions[prev].thread or actions[cur].after == prev, actions[cur]


def test_memory_calls_wait_for_the_address_they_use() -> None:
    actions = placed("fragmentation")
    made: Dict[Tuple[int, int], int] = {}
    freed: Dict[Tuple[int, int], int] = {}
    reallocs = 0
    for i, a in enumerate(actions):
        if a.func == "halMemFree":
            key = (a.dev, int(a.args[1]))
            assert a.after == made[key], a  # after the devmm_alloc_done that handed the address out
            freed[key] = i
        elif a.func == "devmm_alloc_done" and int(a.args[3]) == 0:
            key = (a.dev, int(a.args[2]))
            call = next(j for j in range(i - 1, -1, -1) if actions[j].group == a.group)
            if key in freed:  # an address handed out again: its halMemAlloc waits for the free
                assert actions[call].after == freed[key]
                reallocs += 1
            made[key] = i
    assert freed and reallocs > 0


def test_driver_work_stays_in_order_on_its_thread() -> None:
    actions = placed("ecc-reset")
    steps = [a for a in actions if a.func == "devdrv_reset_step"]
    assert [a.args[2] for a in steps] == list(hal.RESET_STEPS) and {a.thread for a in steps} == {DRIVER_THREAD}
    lost = next(i for i, a in enumerate(actions) if a.func == "hb_report_heart_beat_lost_event")
    reaps = [i for i, a in enumerate(actions) if a.ret == hal.ETIMEDOUT]
    assert len(reaps) == 3 and max(reaps) < lost
    after_reap = [a for a in actions if a.after in reaps]  # the driver thread waits for each timed-out wait
    assert [a.func for a in after_reap] == ["drv_timeout"] * 3 and {a.thread for a in after_reap} == {DRIVER_THREAD}


@pytest.mark.parametrize("host", [SINGLE, HOST_LIKE], ids=["single", "host-like"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_plan_streamed_window_by_window_is_the_plan(scenario: str, host: Host) -> None:
    """Windows of 10 ms: spiked calls (20-60 ms) and allocations straddle them, and so do the waits."""
    want = plan(scenario, 4, 1.0, 3000, 3, host=host)
    assert list(plan_stream(scenario, 4, 1.0, 3000, 3, host=host, window_s=0.01)) == want


def test_a_streamed_plan_has_no_size_limit_but_the_rate_limit() -> None:
    with pytest.raises(InputError, match="over 2000000 calls"):
        plan("steady", 1, 20.0, 200_000, 8)
    assert len(list(itertools.islice(plan_stream("steady", 1, 20.0, 200_000, 8), 1000))) == 1000
    with pytest.raises(InputError, match="--rate"):
        next(plan_stream("steady", 1, 20.0, 300_000, 8))


def test_hops_are_a_seeded_share_of_the_hal_calls() -> None:
    actions = placed("steady")
    calls = [a for a in actions if hal.FUNC_BY_NAME[a.func].hal]
    hops = [a for a in calls if a.hop]
    assert all(hal.FUNC_BY_NAME[a.func].hal for a in actions if a.hop)
    assert 0.15 * len(calls) < len(hops) < 0.35 * len(calls)
    assert not any(a.hop for a in placed("steady", host=dataclasses.replace(HOST_LIKE, hop_share=0.0)))
    every = placed("steady", host=dataclasses.replace(HOST_LIKE, hop_share=1.0))
    assert [a.hop for a in every] == [hal.FUNC_BY_NAME[a.func].hal for a in every]


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (Host(app_threads=-1), "--threads must be in"),
        (Host(app_threads=33), "--threads must be in"),
        (Host(app_threads=0, migrate_ms=2), "needs application threads"),
        (Host(app_threads=2, migrate_ms=1001), "--migrate-ms must be in"),
        (Host(app_threads=2, migrate_ms=-1), "--migrate-ms must be in"),
        (Host(app_threads=2, migrate_ms=float("nan")), "--migrate-ms must be in"),
        (Host(app_threads=2, migrate_ms=0.0001), "below a microsecond"),
        (Host(app_threads=2, hop_share=1.5), "hop_share"),
    ],
)
def test_bad_hosts_are_input_errors(host: Host, message: str) -> None:
    with pytest.raises(InputError, match=message):
        plan("steady", 1, *ARGS, host=host)


def test_plan_line_carries_thread_wait_and_moves() -> None:
    a = Action(7, "halSqTaskSend", (1, 0, 3, 9), ret=0, delay_ns=5, thread=4, after=12, away=True, hop=True)
    assert plan_line(a) == "7 4 12 3 halSqTaskSend 0 5 1 0 3 9 0 0 -\n"
    assert plan_line(dataclasses.replace(a, away=False)) == "7 4 12 2 halSqTaskSend 0 5 1 0 3 9 0 0 -\n"
    assert plan_line(dataclasses.replace(a, hop=False, after=None)) == "7 4 -1 1 halSqTaskSend 0 5 1 0 3 9 0 0 -\n"


def test_parse_output() -> None:
    out = parse_output("cpus 2 0 3 pinned 1\n10 20 0 501 0 3\n15 16 -110 502 3 3\n", 2)
    assert out.cpus == [0, 3] and out.pinned
    assert out.rows == [Observed(10, 20, 0, 501, 0, 3), Observed(15, 16, -110, 502, 3, 3)]
    assert not parse_output("cpus 1 0 pinned 0\n1 2 0 9 0 0\n", 1).pinned


@pytest.mark.parametrize(
    "text",
    ["", "1 2 0 9 0 0\n", "cpus 2 0 pinned 1\n1 2 0 9 0 0\n", "cpus 1 0 pinned 0\n1 2 0\n",
     "cpus 1 0 pinned 0\n1 2 x 9 0 0\n", "cpus 1 0 pinned 0\n1 2 0 9 0 0\n1 2 0 9 0 0\n"],
)  # fmt: skip
def test_parse_output_rejects_a_partial_or_foreign_file(text: str) -> None:
    with pytest.raises(SimulatorError):
        parse_output(text, 1)


def test_truth_records_what_the_executor_observed() -> None:
    acts = [
        Action(0, "halSqTaskSend", (0, 0, 1, 5), ret=0, delay_ns=9, thread=2, hop=True),
        Action(50, "trs_logic_cq_enque", (0, 1, 5, 0), thread=0, after=0, away=True),
    ]
    rows = [Observed(100, 200, 0, 41, 0, 1), Observed(90, 95, 0, 40, 0, 0)]  # threads need not end in plan order
    truth = build_truth({"host": HOST_LIKE.describe()}, acts, rows)
    send, done = truth["actions"]
    assert (send["thread"], send["tid"], send["cpus"], send["hop"], send["after"]) == (2, 41, [0, 1], True, None)
    assert (done["thread"], done["tid"], done["cpus"], done["away"], done["after"]) == (0, 40, [0], True, 0)
    assert (truth["start_ns"], truth["end_ns"]) == (90, 200)
    assert truth["host"] == {"threads": 6, "app_threads": 4, "migrate_ms": 2.0, "hop_share": 0.25}
    old = build_truth({}, acts, [(100, 200, 0), (210, 215, 0)])  # rows without threads (a replayed executor)
    assert "tid" not in old["actions"][0] and old["actions"][1]["after"] == 0


@pytest.mark.parametrize("scenario", ["steady", "mixed"])
def test_placing_in_parts_keeps_only_the_open_operations(scenario: str) -> None:
    """The placer fed a long plan part by part (as plan_stream feeds it) places it exactly as in one piece,
    and what it keeps stays as small as the operations still open: its memory does not grow with the plan."""
    actions = plan(scenario, 7, 60.0, 1000, 2, SINGLE)  # sorted, not placed yet
    placer, placed, sizes = Placer(7, HOST_LIKE), [], []
    for lo in range(0, len(actions), 2000):
        placed += placer.extend(actions[lo : lo + 2000], actions[lo + 2000 :])
        sizes.append(len(placer.last_in_group) + len(placer.sends))
    assert placed == place(actions, 7, HOST_LIKE)
    assert len(actions) > 50_000 and max(sizes) < 500, sizes
