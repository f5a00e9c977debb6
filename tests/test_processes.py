"""Which process a thread belongs to, as the map grows during a session: the tasks alive at the start (the
header's `extra.tasks` / `extra.processes`), then the trace's own task:task_newtask events. The same map on the
reference and the fast path (byte-identical reports, wherever the blocks are cut), and from a recording."""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, List, Optional, Sequence

import pytest

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.processes import CLONE_THREAD, MAX_KNOWN, Processes
from npu_trace.device.profiles import PROFILES
from npu_trace.events import NpuEvent, TraceEvent
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.format import parse_format
from npu_trace.pipeline.blocks import records_of
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import formats, synth_events
from npu_trace.sources.procs import TaskSnapshot, snapshot_from_header, task_snapshot
from reference.analysis import ReferenceAnalysis

PROFILE = PROFILES["sim"]
DATA = os.path.join(os.path.dirname(__file__), "data", "task")
with open(os.path.join(DATA, "task_newtask.format")) as _f:
    NEWTASK = parse_format(_f.read(), "task")
PLANS = plans([*formats().values(), NEWTASK], layouts=PROFILE.layouts)
PROC, THREADS = 500, (501, 502)  # the process and the threads it starts after tracing began
FORK = 0x01200011  # what glibc's fork() passes (SIGCHLD | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID)
PTHREAD = 0x003D0F00  # what glibc's pthread_create() passes (CLONE_VM | CLONE_THREAD | ...)


def newtask(ts: int, parent: int, tid: int, flags: int, cpu: int = 0) -> TraceEvent:
    return TraceEvent(ts, cpu, parent, NEWTASK, (tid, "npu-sim", flags, 0))


def task(parent: int, tid: int, flags: int) -> NpuEvent:
    return NpuEvent(1, "task", None, "newtask", parent, 0, {"tid": tid, "comm": "x", "flags": flags})


def test_the_newtask_format_decodes_into_a_task_event() -> None:
    (ev,) = BlockNormalizer(Normalizer(PROFILE.mapping)).events([newtask(10, PROC, 501, PTHREAD)])
    assert (ev.kind, ev.op, ev.dev, ev.pid) == ("task", "newtask", None, PROC)
    assert ev.args == {"tid": 501, "comm": "npu-sim", "flags": PTHREAD}
    assert PTHREAD & CLONE_THREAD and not FORK & CLONE_THREAD


def test_threads_join_the_process_of_the_task_that_cloned_them() -> None:
    p = Processes({11: 10}, [10])
    p.feed([task(10, 12, PTHREAD), task(11, 13, PTHREAD), task(13, 14, PTHREAD), task(12, 20, FORK),
            task(20, 21, PTHREAD)])  # fmt: skip
    assert [p.of(t) for t in (10, 11, 12, 13, 14, 20, 21, 99)] == [10, 10, 10, 10, 10, 20, 20, 99]
    assert p.counts == {"threads_started": 4, "processes_started": 1, "reused_ids": 0, "forgotten": 0}
    assert p.unattributed([10, 12, 21, 99, 98, 0]) == [98, 99]  # 0: the kernel's, no task
    assert Processes({11: 10}).unattributed([99]) is None  # the processes at the start not known: not counted


def test_an_id_the_kernel_reuses_for_another_process_is_counted() -> None:
    p = Processes({11: 10, 31: 30}, [10, 30])
    p.feed([task(10, 11, PTHREAD)])  # the same thread told twice (a flight dump's header, then its window)
    assert p.counts["reused_ids"] == 0
    p.feed([task(30, 11, PTHREAD), task(10, 31, FORK), task(10, 30, PTHREAD)])
    assert (p.of(11), p.of(31), p.of(30), p.counts["reused_ids"]) == (30, 31, 10, 3)


def test_the_map_is_bounded_and_what_it_forgets_is_counted() -> None:
    p = Processes({}, [1])
    p.feed([task(1, 2 + i, PTHREAD) for i in range(MAX_KNOWN + 3)])
    assert len(p.tasks) == MAX_KNOWN and p.counts["forgotten"] == 3 and p.of(2) == 2 and p.of(5) == 1


def test_a_snapshot_round_trips_through_a_header_and_old_headers_still_read(tmp_path: Any) -> None:
    for pid, tids in ((10, (10, 11, 12)), (20, (20,))):
        for tid in tids:
            os.makedirs(tmp_path / str(pid) / "task" / str(tid))
    snap = task_snapshot(str(tmp_path))
    assert snap == TaskSnapshot({11: 10, 12: 10}, frozenset({10, 20}))
    assert snap.header() == {"tasks": {"11": 10, "12": 10}, "processes": [10, 20]}
    assert snapshot_from_header(snap.header()) == snap
    assert snapshot_from_header({"tasks": {"11": 10}}) == TaskSnapshot({11: 10}, None)  # before `processes`
    assert snapshot_from_header({"tasks": {}, "processes": [1, True]}).processes is None
    assert task_snapshot(str(tmp_path), most=2).processes is None  # not whole: no unattributed count
    older = TaskSnapshot({13: 10, 11: 99}, frozenset({10, 30}))
    assert snap.merged(older) == TaskSnapshot({13: 10, 11: 10, 12: 10}, frozenset({10, 20, 30}))
    assert snap.merged(older, most=2) == TaskSnapshot({11: 10, 12: 10}, None)  # 13 left out: not whole


# ---- the whole analysis: a process whose threads start after tracing began -----------------------------------
def threaded(seed: int) -> List[Any]:
    """The shared-weights plan's device work made by PROC's main thread and two threads it starts after the
    first events (their newtask events first), with npu-smi polls listing PROC with its traced memory."""
    rng = random.Random(seed)
    events = synth_events(plan("shared-weights", seed, 1.0, 2000, 2))
    start = events[len(events) // 10].ts_ns
    items: List[Any] = []
    for i, ev in enumerate(events):
        if ev.ts_ns >= start and len(items) and not any(isinstance(x, TraceEvent) and x.fmt is NEWTASK for x in items):
            items += [newtask(ev.ts_ns - 2, PROC, THREADS[0], PTHREAD), newtask(ev.ts_ns - 1, THREADS[0], THREADS[1],
                                                                                     PTHREAD, cpu=1)]  # fmt: skip
        tid = PROC if ev.ts_ns < start else (PROC, *THREADS)[(i // 7) % 3]
        items.append(ev._replace(pid=tid, cpu=rng.randrange(2)))
        if rng.random() < 0.01:
            items += poll(ev.ts_ns, rng)
    return items


def poll(ts: int, rng: random.Random) -> List[NpuEvent]:
    row = {"source": "npu-smi", "npu": 0, "chip": 0, "pid": PROC, "name": "npu-sim",
           "memory_mb": rng.randrange(0, 40000)}  # fmt: skip
    reading = {"source": "npu-smi", "npu": 0, "chip": 0, "name": "910B3", "health": "OK", "used_mb": 30000,
               "total_mb": 65536, "memory": "hbm", "processes": 1}  # fmt: skip
    return [NpuEvent(ts, "log", 0, "npu_smi_process", -1, -1, row), NpuEvent(ts, "log", 0, "npu_smi", -1, -1, reading)]


def cuts(rng: random.Random, n: int, count: int) -> List[int]:
    return [0, *sorted(rng.sample(range(1, n), count)), n]


def run(items: Sequence[Any], bounds: Sequence[int], block: bool, tasks: Optional[Dict[int, int]] = None) -> str:
    analysis = (Analysis if block else ReferenceAnalysis)(PROFILE, tasks=tasks, processes=[PROC])
    for lo, hi in zip(bounds, bounds[1:]):
        part = items[lo:hi]
        if block:
            analysis.feed_block(records_of(part, PLANS), part[-1].ts_ns - 3)
        else:
            analysis.feed(part, part[-1].ts_ns - 3)
    return json.dumps(analysis.finish(), sort_keys=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_threads_started_mid_session_are_their_process_on_both_paths(seed: int) -> None:
    items = threaded(seed)
    rng = random.Random(seed)
    want = run(items, cuts(rng, len(items), 25), block=False)
    assert run(items, cuts(rng, len(items), 4), block=True) == want
    assert run(items, [0, len(items)], block=True) == want
    report = json.loads(want)
    memory, processes = report["summary"]["memory"], report["summary"]["processes"]
    assert {p["pid"] for p in memory["processes"]} == {PROC}  # the threads' memory is the process's
    assert memory["unattributed_threads"] == 0
    assert (processes["threads_started"], processes["threads_known"]) == (2, 2)
    readings = [f for f in report["findings"] if f["kind"] == "accounting_mismatch"]
    assert all(p["pid"] == PROC for f in readings for p in f["details"]["processes"])
    # without the newtask events the threads stand for themselves, and are counted as unattributed
    bare = [x for x in items if not (isinstance(x, TraceEvent) and x.fmt is NEWTASK)]
    alone = json.loads(run(bare, [0, len(bare)], block=True))["summary"]["memory"]
    assert {p["pid"] for p in alone["processes"]} == {PROC, *THREADS}
    assert (alone["unattributed_threads"], alone["unattributed"]) == (2, list(THREADS))


def test_a_recording_keeps_the_map_and_check_gives_one_report_on_both_paths(tmp_path: Any) -> None:
    """A recording with the newtask events in its pages and a header knowing PROC (as `record` writes one):
    `check` and the reference analysis agree byte for byte, and say the threads' memory is PROC's."""
    from npu_trace.ftrace.encode import PageEncoder
    from npu_trace.sources.replay_source import ReplaySource
    from test_check_paths import both
    from test_timeline import HEADER, reads, spread, synth_header, write_batches

    items = threaded(4)
    traced = [x for x in items if isinstance(x, TraceEvent)]
    per_cpu = spread(traced, 2, 4)
    enc = PageEncoder(HEADER)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    header = synth_header(2)
    with open(os.path.join(DATA, "task_newtask.format")) as f:
        header["formats"].append({"system": "task", "name": "task_newtask", "text": f.read()})
    header["extra"].update(TaskSnapshot({}, frozenset({PROC})).header())
    path = str(tmp_path / "threads.npt")
    polls = [x for x in items if isinstance(x, NpuEvent)]
    write_batches(path, header, reads(pages, polls, random.Random(4), traced[-1].ts_ns + 10**6), 16 << 10)
    source = ReplaySource(path)
    assert (source.tasks, source.processes) == ({}, frozenset({PROC}))
    fast, reference = both(path)
    assert fast == reference
    memory = json.loads(fast)["analysis"]["summary"]["memory"]
    assert {p["pid"] for p in memory["processes"]} == {PROC} and memory["unattributed_threads"] == 0
