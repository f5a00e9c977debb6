"""The host's context in an export (npu_trace.export.hostctx): a recording of a simulator scenario with the host's
scheduler and interrupt events beside it (this kernel's own formats: tests/data/hostctx), exported to Perfetto
and decoded with Perfetto's own schema (perfetto_trace_pb2): an FtraceEventBundle per CPU whose events carry
each record's stamp, pid and fields (cpu, prev_state, ...); and to Chrome JSON: each CPU's running thread,
hard and soft interrupts as slices, wakeups as instants. The trace processor itself cannot be run here (its
binary is downloaded at first use, and nothing outside the package registries is reachable).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, List, Tuple

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import npu_trace.export.run as export_module
from goldens import read
from npu_trace.events import TraceEvent
from npu_trace.export.run import Request, export, parse_time
from npu_trace.ftrace.context import HOST_CONTEXT, softirq_name, task_state
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import EventFormat, parse_format
from npu_trace.recording import RecordingReader, RecordingWriter
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import synth_events
from reference.pages import iter_events
from test_export import decode
from test_timeline import HEADER, reads, spread, synth_header

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hostctx")
CONTEXT = [parse_format(read(os.path.join(DATA, "events", system, name, "format")), system)
           for system, name in (e.split(":") for e in HOST_CONTEXT)]  # fmt: skip
CTX: Dict[str, EventFormat] = {f.full_name: f for f in CONTEXT}
CPUS = 3
THREADS = [(0, "swapper", 120), (4242, "npu-sim", 120), (4243, "npu-sim", 110), (77, "kworker/0:1", 100),
           (4244, "npu-sim", 120)]  # fmt: skip
STATES = [0, 1, 2, 0x100, 0x80]


def values(fmt: EventFormat, **fields: Any) -> Tuple[Any, ...]:
    """A record's values in its format's field order (strings for char arrays and __data_loc strings)."""
    return tuple(fields[f.name] for f in fmt.fields)


def context_events(start: int, end: int, seed: int) -> List[TraceEvent]:
    """Each CPU switching between threads every ~0.3 ms (a wakeup before each), a hard interrupt and a softirq
    inside every other run: what the kernel writes, with every prev_state the tests look at."""
    rng = random.Random(seed)
    out: List[TraceEvent] = []
    for cpu in range(CPUS):
        ts, running = start + 1000 * (cpu + 1), THREADS[0]
        while ts < end:
            nxt = rng.choice([t for t in THREADS if t != running])
            waking = values(CTX["sched:sched_waking"], comm=nxt[1], pid=nxt[0], prio=nxt[2], target_cpu=cpu)
            out.append(TraceEvent(ts, cpu, running[0], CTX["sched:sched_waking"], waking))
            switch = values(CTX["sched:sched_switch"], prev_comm=running[1], prev_pid=running[0],
                            prev_prio=running[2], prev_state=rng.choice(STATES), next_comm=nxt[1],
                            next_pid=nxt[0], next_prio=nxt[2])  # fmt: skip
            out.append(TraceEvent(ts + 1, cpu, running[0], CTX["sched:sched_switch"], switch))
            running, ts = nxt, ts + rng.randrange(200_000, 400_000)
            if rng.random() < 0.5:
                out += _interrupts(cpu, running[0], ts - 150_000)
    return out


def _interrupts(cpu: int, pid: int, at: int) -> List[TraceEvent]:
    irq, vec = (24, "virtio0-input"), 1 + cpu % 2 * 8  # TIMER or RCU
    entry, exit_ = CTX["irq:irq_handler_entry"], CTX["irq:irq_handler_exit"]
    soft_entry, soft_exit = CTX["irq:softirq_entry"], CTX["irq:softirq_exit"]
    return [
        TraceEvent(at, cpu, pid, entry, values(entry, irq=irq[0], name=irq[1])),
        TraceEvent(at + 5_000, cpu, pid, exit_, values(exit_, irq=irq[0], ret=1)),
        TraceEvent(at + 6_000, cpu, pid, soft_entry, values(soft_entry, vec=vec)),
        TraceEvent(at + 20_000, cpu, pid, soft_exit, values(soft_exit, vec=vec)),
    ]


def recording(path: str, seed: int = 1) -> List[TraceEvent]:
    """The ecc-reset scenario (0.5 s, 2 devices) on CPUS CPUs with the host's context beside: the context
    events it holds."""
    events = synth_events(plan("ecc-reset", seed, 0.5, 2000, 2))
    context = context_events(events[0].ts_ns, events[-1].ts_ns, seed)
    per_cpu = spread(events, CPUS, seed)
    for ev in context:
        per_cpu[ev.cpu].append(ev)
    enc = PageEncoder(HEADER)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in sorted(evs, key=lambda e: e.ts_ns))
             for cpu, evs in per_cpu.items()}  # fmt: skip
    header = synth_header(CPUS)
    header["formats"] += [{"system": f.system, "name": f.name, "text": _text(f)} for f in CONTEXT]
    header["events"] = [*header.get("events", []), *CTX]
    with RecordingWriter(path, header, chunk_bytes=16 << 10) as w:
        for batch in reads(pages, [], random.Random(seed), max(e.ts_ns for e in [*events, *context]) + 1):
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
            if batch.mark is not None:
                w.add_mark(batch.mark)
    return sorted(context, key=lambda e: (e.ts_ns, e.cpu))


def _text(fmt: EventFormat) -> str:
    with open(os.path.join(DATA, "events", fmt.system, fmt.name, "format")) as f:
        return f.read()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: Any) -> Tuple[str, List[TraceEvent]]:
    path = str(tmp_path_factory.mktemp("hostctx") / "rec.npt")
    return path, recording(path)


def ftrace_events(data: bytes) -> Tuple[List[Tuple[int, pb.FtraceEvent]], pb.ClockSnapshot]:
    """(cpu, event) of every ftrace event of a Perfetto trace, bundle after bundle; its clock snapshot."""
    trace = pb.Trace.FromString(data)
    out, clock = [], None
    for p in trace.packet:
        if p.HasField("clock_snapshot"):
            clock = p.clock_snapshot
        if p.HasField("ftrace_events"):
            assert p.trusted_packet_sequence_id == 2
            out += [(p.ftrace_events.cpu, ev) for ev in p.ftrace_events.event]
    assert clock is not None
    return out, clock


def expected(ev: TraceEvent) -> Dict[str, Any]:
    """What the FtraceEvent of a record must say: its kernel fields, by name."""
    return {"timestamp": ev.ts_ns, "pid": ev.pid, ev.fmt.name: dict(zip((f.name for f in ev.fmt.fields), ev.values))}


def as_dict(ev: pb.FtraceEvent) -> Dict[str, Any]:
    which = ev.WhichOneof("event")
    inner = getattr(ev, which)
    return {"timestamp": ev.timestamp, "pid": ev.pid, which: {f.name: v for f, v in inner.ListFields()}}


# ---- Perfetto ---------------------------------------------------------------------------------------------
def test_each_context_record_is_an_ftrace_event_of_its_cpu_with_its_fields(tmp_path: Any, recorded: Any) -> None:
    path, context = recorded
    summary = export(Request(path, str(tmp_path / "out.pftrace"), "perfetto", progress=False))
    got, clock = ftrace_events((tmp_path / "out.pftrace").read_bytes())
    assert len(got) == len(context)
    for cpu in range(CPUS):
        mine = [ev for c, ev in got if c == cpu]
        assert [ev.timestamp for ev in mine] == sorted(ev.timestamp for ev in mine)  # each CPU's in time order
        assert [as_dict(ev) for ev in mine] == [expected(ev) for ev in context if ev.cpu == cpu]
    states = {ev.sched_switch.prev_state for _, ev in got if ev.HasField("sched_switch")}
    assert states == set(STATES)  # running, sleeping, uninterruptible, preempted, idle: as the kernel wrote them
    clocks = {c.clock_id: c.timestamp for c in clock.clocks}
    assert clocks[pb.BUILTIN_CLOCK_BOOTTIME] == clocks[pb.BUILTIN_CLOCK_MONOTONIC]  # one clock: the trace's
    assert sum(summary["host_context"].values()) == len(context)
    assert decode((tmp_path / "out.pftrace").read_bytes()).slices  # the NPU's tracks beside, as before


def test_a_real_recording_s_context_is_its_records_as_ftrace_events(tmp_path: Any) -> None:
    """tests/data/hostctx/sim-ecc-reset.npt, recorded for real with --host-context: every context record (as the
    reference decoder reads it) is an ftrace event of its CPU, its fields the record's."""
    path = os.path.join(DATA, "sim-ecc-reset.npt")
    records = [ev for ev in iter_events(RecordingReader(path)) if isinstance(ev, TraceEvent)]
    context = [ev for ev in records if ev.fmt.full_name in HOST_CONTEXT]
    export(Request(path, str(tmp_path / "out.pftrace"), "perfetto", progress=False))
    got, _ = ftrace_events((tmp_path / "out.pftrace").read_bytes())
    for cpu in sorted({ev.cpu for ev in context}):
        want = sorted((expected(ev) for ev in context if ev.cpu == cpu), key=lambda e: e["timestamp"])
        mine = [as_dict(ev) for c, ev in got if c == cpu]
        assert sorted(mine, key=lambda e: e["timestamp"]) == want
    assert {ev.fmt.name for ev in context} >= {"sched_switch", "sched_waking", "softirq_entry", "irq_handler_entry"}


def test_only_the_window_s_context_is_written_whatever_the_blocks(tmp_path: Any, recorded: Any,
                                                                   monkeypatch: Any) -> None:  # fmt: skip
    path, context = recorded
    lo, hi = context[0].ts_ns + 100_000_000, context[0].ts_ns + 300_000_000
    window = {"start": parse_time(f"@{lo / 1e9:.9f}", "--from"), "stop": parse_time(f"@{hi / 1e9:.9f}", "--to")}
    outs = []
    for rows in (export_module.EXPORT_ROWS, 301):
        monkeypatch.setattr(export_module, "EXPORT_ROWS", rows)
        export(Request(path, str(tmp_path / f"{rows}.pftrace"), "perfetto", progress=False, **window))
        got, _ = ftrace_events((tmp_path / f"{rows}.pftrace").read_bytes())
        outs.append(sorted((cpu, ev.timestamp, ev.SerializeToString()) for cpu, ev in got))
    assert outs[0] == outs[1]
    assert [ts for _, ts, _ in outs[0]] and all(lo <= ts < hi for _, ts, _ in outs[0])
    assert len(outs[0]) == sum(1 for ev in context if lo <= ev.ts_ns < hi)


# ---- Chrome JSON ------------------------------------------------------------------------------------------
def test_chrome_json_draws_each_cpu_s_threads_and_interrupts(tmp_path: Any, recorded: Any) -> None:
    path, context = recorded
    export(Request(path, str(tmp_path / "out.json"), "chrome-json", progress=False))
    doc = json.loads((tmp_path / "out.json").read_text())
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    host = next(pid for pid, name in procs.items() if name == "CPUs")
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
               and e["pid"] == host}  # fmt: skip
    for cpu in range(CPUS):
        runs = [e for e in events if e["ph"] == "X" and e["pid"] == host and threads[e["tid"]] == f"CPU {cpu}"]
        assert [(e["name"], e["args"].get("state", "")) for e in runs] == _runs(context, cpu)
        irqs = [e for e in events if e["ph"] == "X" and e["pid"] == host and threads[e["tid"]] == f"CPU {cpu} irq"]
        softirqs = [e for e in events if e["ph"] == "X" and e["pid"] == host
                    and threads[e["tid"]] == f"CPU {cpu} softirq"]  # fmt: skip
        entries = [ev for ev in context if ev.cpu == cpu and ev.fmt.name == "softirq_entry"]
        assert {e["name"] for e in irqs} == {"virtio0-input (24)"} and len(irqs) == len(entries)
        assert [e["name"] for e in softirqs] == [softirq_name(ev.values[0]) for ev in entries]
        assert all(e["dur"] == 14.0 for e in softirqs) and all(e["dur"] == 5.0 for e in irqs)
    wakeups = [e for e in events if e["ph"] == "i" and e["pid"] == host]
    assert len(wakeups) == sum(1 for ev in context if ev.fmt.name == "sched_waking")


def _runs(context: List[TraceEvent], cpu: int) -> List[Tuple[str, str]]:
    """Each thread run on the CPU between two switches (the idle task's left out): its name and the state the
    switch that ended it gives."""
    switches = [ev for ev in context if ev.cpu == cpu and ev.fmt.name == "sched_switch"]
    names = [f.name for f in CTX["sched:sched_switch"].fields]
    out = []
    for before, after in zip(switches, switches[1:]):
        v, w = dict(zip(names, before.values)), dict(zip(names, after.values))
        if v["next_pid"] != 0:
            out.append((f"{v['next_comm']} ({v['next_pid']})", task_state(w["prev_state"])))
    last = dict(zip(names, switches[-1].values))
    if last["next_pid"] != 0:  # still running at the end: drawn to it
        out.append((f"{last['next_comm']} ({last['next_pid']})", ""))
    return out


def test_the_npu_tracks_beside_the_context_are_the_references_bytes(tmp_path: Any, recorded: Any) -> None:
    """The context's rows in the blocks change nothing of the NPU's drawing (tests/test_export.py)."""
    from test_export import _same_bytes

    summaries = _same_bytes(tmp_path, recorded[0])
    assert summaries["chrome-json"]["host_context"]["running"] > 100
