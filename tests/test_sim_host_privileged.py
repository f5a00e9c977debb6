"""The host-like simulator under its probes, checked from the kernel's own trace (a private instance's `trace`
file, which the kernel merges across CPUs by time): tasks complete on another CPU than their submit, calls return
on another CPU than they entered, several threads run, threads are moved between CPUs, and every injected action
still appears exactly once, on the thread and CPUs the truth says, in each thread's planned order."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, NamedTuple, Tuple

import pytest

from npu_trace import sim
from npu_trace.device import hal
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim.runner import record_events
from npu_trace.sim.threads import IRQ_THREAD

pytestmark = pytest.mark.privileged

_LINE = re.compile(
    r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+)\.(\d+): "  # comm-tid [cpu] flags sec.usec:
    r"(ascend_\w+): \(0x[0-9a-f]+(?: <- 0x[0-9a-f]+)?\) ?(.*)$"  # event: (ip) fields
)
Truth = Dict[str, Any]


class Seen(NamedTuple):
    """One kernel trace line of the simulator."""

    event: str
    fields: str
    tid: int
    cpu: int
    ts_us: int


def parse(text: str, tids: set) -> List[Seen]:
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and int(m.group(2)) in tids:
            ts = int(m.group(4)) * 1_000_000 + int(m.group(5))
            out.append(Seen(m.group(6), m.group(7).strip(), int(m.group(2)), int(m.group(3)), ts))
    return out


def traced(fs: Tracefs, scenario: str, seed: int) -> Tuple[Truth, List[Seen]]:
    """Run `scenario` host-like while a private instance records the ascend events."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs: on one CPU the simulator runs everything there")
    name = f"npu-trace-{os.getpid()}-simhost"
    inst = fs.create_instance(name)
    try:
        inst.set_clock("mono")
        inst.set_buffer_size_kb(8192)
        for ev in hal.event_names():
            inst.enable_event(ev)
        inst.tracing_on(True)
        truth = sim.run_scenario(scenario, seed, 1.0, 300, 2, ensure_loaded=False, host=sim.HOST_LIKE)
        inst.tracing_on(False)
        assert all(inst.cpu_stats(c).get("overrun", 0) == 0 for c in inst.cpus())
        text = inst.trace_text()
    finally:
        fs.remove_instance(name)
    return truth, parse(text, {r["tid"] for r in truth["actions"]})


def expected(rec: Dict[str, Any]) -> List[Tuple[str, str, int]]:
    """(event, fields as the kernel prints them, CPU) of each of the action's events."""
    return [(event, text, cpu) for (event, text), cpu in zip(record_events(rec), rec["cpus"])]


def match(truth: Truth, seen: List[Seen]) -> Dict[int, List[Seen]]:
    """Each action's kernel events (seq -> entry[, return]), asserting that each thread's events are exactly its
    actions' in plan order, with the CPUs the executor observed."""
    per_tid: Dict[int, List[Seen]] = {}
    for s in seen:
        per_tid.setdefault(s.tid, []).append(s)
    wanted: Dict[int, List[Tuple[int, Tuple[str, str, int]]]] = {}
    for rec in truth["actions"]:
        wanted.setdefault(rec["tid"], []).extend((rec["seq"], e) for e in expected(rec))
    assert sorted(per_tid) == sorted(wanted)
    out: Dict[int, List[Seen]] = {}
    for tid, events in wanted.items():
        assert [(s.event, s.fields, s.cpu) for s in per_tid[tid]] == [e for _, e in events], f"thread {tid}"
        for (seq, _), s in zip(events, per_tid[tid]):
            out.setdefault(seq, []).append(s)
    return out


@pytest.mark.parametrize(("scenario", "seed"), [("mixed", 11), ("spikes", 3)])
def test_host_like_run_seen_by_the_kernel(sim_loaded: Tracefs, scenario: str, seed: int) -> None:
    truth, seen = traced(sim_loaded, scenario, seed)
    assert truth["host"]["pinned"] and truth["host"]["threads"] == 6
    events = match(truth, seen)  # (d): every injected action exactly once, nothing else
    assert len(seen) == sum(len(r["events"]) for r in truth["actions"])
    recs = truth["actions"]
    assert len({s.tid for s in seen}) == 6  # (c): interrupt, driver and four application threads
    sends = [r for r in recs if r["func"] == "halSqTaskSend"]
    assert len(sends) > 20
    for send in sends:  # (a): each completion in the interrupt thread, on another CPU, after its submit
        done = next(r for r in recs if r["group"] == send["group"] and r["func"] == "trs_logic_cq_enque")
        submitted, completed = events[send["seq"]][1], events[done["seq"]][0]
        assert completed.cpu != submitted.cpu and completed.tid != submitted.tid
        assert completed.ts_us >= submitted.ts_us
    hops = [events[r["seq"]] for r in recs if r["hop"]]  # (b): entry and return on different CPUs
    assert len(hops) > 10 and all(entry.cpu != ret.cpu for entry, ret in hops)
    assert moved_between_calls(truth, events) > 5


def moved_between_calls(truth: Truth, events: Dict[int, List[Seen]]) -> int:
    """How often an application or driver thread's next event is on another CPU than its previous one: with
    hops inside calls, only the executor's periodic moves do that."""
    count = 0
    last: Dict[int, int] = {}
    for rec in truth["actions"]:
        if rec["thread"] == IRQ_THREAD:
            continue  # it moves for its completions
        mine = events[rec["seq"]]
        count += rec["thread"] in last and last[rec["thread"]] != mine[0].cpu
        last[rec["thread"]] = mine[-1].cpu
    return count
