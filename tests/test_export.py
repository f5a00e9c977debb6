"""`npu-trace export`: a recording of a simulator scenario, exported, then decoded with Perfetto's own schema
(`perfetto_trace_pb2` from the `perfetto` package) and replayed as Perfetto's trace processor reads it (packets
sorted by timestamp, ties in file order): held against the scenario's ground truth (its planned actions and
`truth_expectations`) and against what `check` finds in the same recording.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import random
import stat
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import npu_trace.export.run as export_module
from export_reference import ProtoPerfettoWriter, reference_export
from npu_trace.ci.recording_analysis import Progress, analyze, blocks_of, profile_for
from npu_trace.cli import main
from npu_trace.detectors import Analysis
from npu_trace.device import hal
from npu_trace.device.profiles import PROFILES
from npu_trace.errors import UsageError
from npu_trace.events import Loss
from npu_trace.export import beside, perfetto_pieces, tracks
from npu_trace.export.chrome_json import _dumps, _name, _plain
from npu_trace.export.perfetto import PerfettoWriter
from npu_trace.export.pieces import Strings
from npu_trace.export.rowargs import args_of, as_dicts
from npu_trace.export.run import Request, export, parse_time
from npu_trace.export.track_map import Lane, LanePacker
from npu_trace.export.tracks import COUNTER, GROUP, SLICES, Track, flow_id, flow_ids
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.pipeline.blocks import records_of
from npu_trace.recording import RecordingWriter
from npu_trace.sim.scenarios import SCENARIOS, Action, plan
from npu_trace.sim.synth import formats, synth_events, truth_expectations
from npu_trace.sources.replay_source import ReplaySource
from test_timeline import HEADER, reads, spread, synth_header

LOST = 7  # events the lossy recording says were lost
PLANS = plans(formats().values(), layouts=PROFILES["sim"].layouts)


# ---- recordings ---------------------------------------------------------------------------------------------
def scenario(path: str, name: str = "ecc-reset", seed: int = 3, loss: bool = False) -> List[Action]:
    """A recording of a scenario (1 s, 3000 calls/s, 4 devices) spread over 3 CPUs and cut into reads at
    random, in chunks of a few pages each (many chunks: blocks_of takes blocks at a chunk's end); `loss`: an
    overrun of LOST events on CPU 1 in its middle. Returns the planned actions."""
    actions = plan(name, seed, 1.0, 3000, 4)
    events = synth_events(actions)
    enc = PageEncoder(HEADER)
    per_cpu = spread(events, 3, seed)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    batches = reads(pages, [], random.Random(seed), events[-1].ts_ns + 1)
    with RecordingWriter(path, synth_header(3), chunk_bytes=6 << 10) as w:
        for i, batch in enumerate(batches):
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
            if batch.mark is not None:
                w.add_mark(batch.mark)
            if loss and i == 0:  # read before anything was released: in its place in time, never late
                w.add_loss(Loss("tracefs", 1, "overrun", LOST, events[len(events) // 2].ts_ns))
    return actions


# ---- a Perfetto trace, read back --------------------------------------------------------------------------
@dataclass
class Slice:
    track: int
    name: str
    begin: int
    end: int
    args: Dict[str, Any]
    flows: List[int]
    terminating: List[int]
    depth: int
    parent: Optional[Slice] = None


@dataclass
class Decoded:
    tracks: Dict[int, pb.TrackDescriptor] = field(default_factory=dict)
    slices: List[Slice] = field(default_factory=list)
    instants: List[Tuple[int, int, str, Dict[str, Any], List[int]]] = field(default_factory=list)  # ..., flows
    counters: Dict[int, List[Tuple[int, float]]] = field(default_factory=dict)
    clock: Optional[pb.ClockSnapshot] = None

    def path(self, uuid: int) -> Tuple[str, ...]:
        out: List[str] = []
        while uuid:
            out.insert(0, self.tracks[uuid].name)
            uuid = self.tracks[uuid].parent_uuid
        return tuple(out)

    def device(self, uuid: int) -> Optional[int]:
        top = self.path(uuid)[0]
        return int(top.split()[1]) if top.startswith("NPU ") else None

    def on(self, prefix: str) -> List[Slice]:
        """The slices on the tracks whose name starts with `prefix` (lanes: "calls", "calls (2)", ...)."""
        return [s for s in self.slices if self.tracks[s.track].name.startswith(prefix)]

    def counter(self, *path: str) -> List[Tuple[int, float]]:
        uuids = [u for u in self.tracks if self.path(u) == path]
        assert len(uuids) == 1, (path, uuids)
        return self.counters.get(uuids[0], [])


def annotation(a: pb.DebugAnnotation, names: Dict[int, str]) -> Tuple[str, Any]:
    name = names[a.name_iid] if a.name_iid else a.name
    which = a.WhichOneof("value")
    if a.dict_entries:
        return name, dict(annotation(e, names) for e in a.dict_entries)
    if a.array_values:
        return name, [annotation(e, names)[1] for e in a.array_values]
    return name, getattr(a, which) if which else None


def decode(data: bytes) -> Decoded:
    """The packets as the trace processor reads them: sorted by timestamp (ties in file order), slices built
    by a stack per track. Asserts what Perfetto needs: one sequence whose incremental state is cleared
    first, every event on a track described before, every end matching a begin, nothing left open (ftrace
    bundles, the host's context, are left out)."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    out = Decoded()
    names: Dict[int, str] = {}
    keys: Dict[int, str] = {}
    events: List[Tuple[int, int, pb.TracePacket]] = []
    cleared = False
    for i, p in enumerate(trace.packet):
        if p.HasField("ftrace_events"):  # the host's context: its own sequence (tests/test_hostctx.py)
            continue
        assert p.trusted_packet_sequence_id == 1
        cleared = cleared or p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED != 0
        if p.HasField("clock_snapshot"):
            out.clock = p.clock_snapshot
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in out.tracks and (not d.parent_uuid or d.parent_uuid in out.tracks)
            out.tracks[d.uuid] = d
        for n in p.interned_data.event_names:
            assert n.iid not in names
            names[n.iid] = n.name
        for n in p.interned_data.debug_annotation_names:
            assert n.iid not in keys
            keys[n.iid] = n.name
        if p.HasField("track_event"):
            assert cleared and p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            assert p.track_event.track_uuid in out.tracks
            events.append((p.timestamp, i, p))
    stacks: Dict[int, List[Slice]] = {}
    for ts, _, p in sorted(events, key=lambda e: (e[0], e[1])):
        ev = p.track_event
        track = ev.track_uuid
        args = dict(annotation(a, keys) for a in ev.debug_annotations)
        stack = stacks.setdefault(track, [])
        if ev.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            parent = stack[-1] if stack else None
            s = Slice(track, names[ev.name_iid], ts, -1, args, list(ev.flow_ids), list(ev.terminating_flow_ids),
                      len(stack), parent)  # fmt: skip
            stack.append(s)
            out.slices.append(s)
        elif ev.type == pb.TrackEvent.TYPE_SLICE_END:
            assert stack, f"an end without a begin on {out.path(track)} at {ts}"
            stack.pop().end = ts
        elif ev.type == pb.TrackEvent.TYPE_INSTANT:
            out.instants.append((track, ts, names[ev.name_iid], args, list(ev.flow_ids)))
        elif ev.type == pb.TrackEvent.TYPE_COUNTER:
            assert out.tracks[track].HasField("counter")
            value = ev.counter_value if ev.HasField("counter_value") else ev.double_counter_value
            out.counters.setdefault(track, []).append((ts, value))
    assert all(not stack for stack in stacks.values()), "slices left open"
    return out


def exported(tmp_path: Any, rec: str, out: str = "out.pftrace", **kw: Any) -> Dict[str, Any]:
    return export(Request(rec, str(tmp_path / out), "perfetto" if out.endswith(".pftrace") else "chrome-json",
                          progress=False, **kw))  # fmt: skip


def hal_calls(actions: List[Action]) -> Counter[Tuple[int, str]]:
    return Counter((a.dev, a.func) for a in actions if hal.FUNC_BY_NAME[a.func].hal)


@pytest.fixture(scope="module")
def ecc(tmp_path_factory: Any) -> Tuple[str, List[Action], Decoded, Dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("ecc")
    rec = str(tmp / "ecc.npt")
    actions = scenario(rec)
    summary = exported(tmp, rec)
    with open(tmp / "out.pftrace", "rb") as f:
        return rec, actions, decode(f.read()), summary


# ---- the Perfetto trace against the ground truth ---------------------------------------------------------------
def test_one_call_slice_per_injected_hal_call_named_by_its_function_on_its_device(ecc: Any) -> None:
    _, actions, d, summary = ecc
    calls = d.on("calls")
    assert Counter((d.device(s.track), s.name) for s in calls) == hal_calls(actions)
    assert summary["mapped"]["calls"] == len(calls) and summary["mapped"]["unreturned_calls"] == 0
    assert all(s.end >= s.begin and s.args["pid"] > 0 and "comm" in s.args for s in calls)
    sends = [s for s in calls if s.name == "halMemAlloc"]
    assert all({"size", "ret"} <= set(s.args) for s in sends), sends[0].args


def test_overlapping_calls_go_to_separate_lanes_and_every_slice_nests_in_its_parent(ecc: Any) -> None:
    _, _, d, _ = ecc
    for s in d.slices:
        if s.parent is not None:
            assert s.parent.begin <= s.begin and s.end <= s.parent.end, (d.path(s.track), s, s.parent)
    nested_calls = [s for s in d.on("calls") if s.parent is not None]
    assert all(s.begin >= s.parent.begin for s in nested_calls if s.parent is not None)


def test_tasks_run_submit_to_completion_with_a_flow_from_their_submitting_call(ecc: Any) -> None:
    _, actions, d, summary = ecc
    tasks = [s for s in d.slices if s.name == "task"]
    completions = Counter(a.dev for a in actions if a.func == "trs_logic_cq_enque")
    assert Counter(d.device(s.track) for s in tasks) == completions
    assert all(d.tracks[s.track].name.startswith("stream ") for s in tasks)
    assert all(s.args["submit_ts_ns"] == s.begin <= s.end for s in tasks)
    sends = {f: s for s in d.on("calls") if s.name == "halSqTaskSend" for f in s.flows}
    assert len(sends) == sum(1 for s in d.on("calls") if s.name == "halSqTaskSend")
    for t in tasks:
        (flow,) = t.terminating
        send = sends[flow]
        assert d.device(send.track) == d.device(t.track) and send.end == t.begin
    assert summary["written"]["flows"] == len(tasks) + summary["mapped"]["resets"]  # and a reset's trigger


def test_interrupt_handlers_are_slices_per_line(ecc: Any) -> None:
    _, actions, d, summary = ecc
    handlers = [s for s in d.slices if d.path(s.track)[1:2] == ("interrupts",)]
    entries = Counter(a.dev for a in actions if a.func == "irq_handler_entry")
    assert Counter(d.device(s.track) for s in handlers) == entries
    assert summary["mapped"]["irqs"] == len(handlers) and summary["mapped"]["irq_exits_without_entry"] == 0


def test_the_reset_sequence_is_one_slice_with_a_nested_slice_per_step(ecc: Any) -> None:
    _, actions, d, _ = ecc
    exp = truth_expectations(actions)["resets"]
    assert exp
    resets = [s for s in d.on("reset") if s.depth == 0]
    assert sorted(d.device(s.track) for s in resets) == sorted(exp)
    for r in resets:
        assert r.name == "reset complete"
        steps = [s for s in d.slices if s.parent is r]
        assert [s.name for s in steps] == exp[d.device(r.track)]
        assert steps[0].begin == r.begin and steps[-1].end == r.end
        assert [s.begin for s in steps] == sorted(s.begin for s in steps)
        (trigger,) = r.terminating  # a flow from the timeout that set it off, on the device's events track
        (source,) = [i for i in d.instants if trigger in i[4]]
        assert source[2] == "timeout heartbeat" and d.path(source[0]) == (f"NPU {d.device(r.track)}", "events")
        assert source[1] < r.begin


def test_device_states_cover_each_device_and_the_reset_shows_as_resetting(ecc: Any) -> None:
    _, actions, d, _ = ecc
    states = d.on("state")
    dev = next(iter(truth_expectations(actions)["resets"]))
    mine = sorted((s for s in states if d.device(s.track) == dev), key=lambda s: s.begin)
    assert mine[0].name == "ok" and "resetting" in [s.name for s in mine]
    assert all(a.end == b.begin for a, b in zip(mine, mine[1:]))  # one state at a time, no gap
    assert {d.device(s.track) for s in states} == {a.dev for a in actions}


def test_memory_counters_end_at_the_bytes_the_scenario_left_allocated(ecc: Any) -> None:
    _, actions, d, _ = ecc
    leaks = truth_expectations(actions)["leaks"]
    allocating = {a.dev for a in actions if a.func == "devmm_alloc_done"}
    assert allocating
    for dev in sorted(allocating):
        live = d.counter(f"NPU {dev}", "memory", "live bytes")
        assert live and [ts for ts, _ in live] == sorted(ts for ts, _ in live)
        assert live[-1][1] == leaks.get(dev, (0, 0))[1]
        assert max(v for _, v in live) > 0
        per_pid = [u for u in d.tracks if d.path(u)[:2] == (f"NPU {dev}", "memory") and d.path(u)[-1][:4] == "pid "]
        assert sum(d.counters[u][-1][1] for u in per_pid) == live[-1][1]


def test_every_finding_check_makes_is_an_instant_with_its_details(ecc: Any) -> None:
    rec, _, d, _ = ecc
    found = analyze(rec, "sim", progress=False)["analysis"]["findings"]
    shown = [(i[2], i[3]) for i in d.instants if d.tracks[i[0]].name == "findings"]
    assert Counter(n.split()[0] for n, _ in shown) == Counter(f["kind"] for f in found)
    assert sorted(n for n, _ in shown) == sorted(f"{f['kind']} {f['op']}" if f["op"] else f["kind"] for f in found)
    timeouts = [a for n, a in shown if n.startswith("timeout")]
    assert timeouts and all(a for a in timeouts)


def test_the_clock_is_declared_monotonic_with_the_wall_clock_anchor(ecc: Any) -> None:
    rec, _, d, _ = ecc
    from npu_trace.sources.replay_source import ReplaySource

    anchor = ReplaySource(rec).header["clock_anchor"]
    assert d.clock is not None and d.clock.primary_trace_clock == pb.BUILTIN_CLOCK_MONOTONIC
    assert {c.clock_id: c.timestamp for c in d.clock.clocks} == {
        pb.BUILTIN_CLOCK_MONOTONIC: anchor["mono_ns"],
        pb.BUILTIN_CLOCK_REALTIME: anchor["realtime_ns"],
    }


def test_no_loss_instant_when_nothing_was_lost(ecc: Any) -> None:
    _, _, d, _ = ecc
    assert not [i for i in d.instants if d.tracks[i[0]].name == "loss"]
    assert [v for _, v in d.counter("npu-trace", "events lost")] == [0]


def test_a_lossy_recording_shows_its_loss_as_an_instant_and_a_counter(tmp_path: Any) -> None:
    rec = str(tmp_path / "lossy.npt")
    scenario(rec, "steady", 5, loss=True)
    exported(tmp_path, rec)
    with open(tmp_path / "out.pftrace", "rb") as f:
        d = decode(f.read())
    lost = [i for i in d.instants if d.tracks[i[0]].name == "loss"]
    assert len(lost) == 1 and lost[0][2] == f"lost {LOST} events"
    assert lost[0][3]["cpu"] == 1 and lost[0][3]["loss_kind"] == "overrun"
    values = [v for _, v in d.counter("npu-trace", "events lost")]
    assert values[0] == 0 and values[-1] == LOST
    assert [i[2] for i in d.instants if d.tracks[i[0]].name == "findings"].count("loss") == 1


# ---- Chrome JSON -------------------------------------------------------------------------------------------
def test_chrome_json_is_valid_trace_event_format_with_the_same_calls(tmp_path: Any, ecc: Any) -> None:
    rec, actions, d, _ = ecc
    exported(tmp_path, rec, "out.json")
    with open(tmp_path / "out.json") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["clock_domain"] == "CLOCK_MONOTONIC"
    assert {e["ph"] for e in events} <= {"X", "i", "C", "M", "s", "f"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in events:
        assert isinstance(e["pid"], int) and (e["ph"] == "M" or isinstance(e["ts"], (int, float)))
        if e["ph"] == "X":
            assert e["dur"] >= 0 and (e["pid"], e["tid"]) in threads
    calls = Counter((int(procs[e["pid"]].split()[1]), e["name"]) for e in events
                    if e["ph"] == "X" and threads[(e["pid"], e["tid"])].startswith("calls"))  # fmt: skip
    assert calls == hal_calls(actions)
    tasks = [s for s in d.slices if s.name == "task"]
    assert sum(1 for e in events if e["ph"] == "X" and e["name"] == "task") == len(tasks)
    starts = {e["id"] for e in events if e["ph"] == "s"}
    finishes = [e["id"] for e in events if e["ph"] == "f"]
    assert finishes and set(finishes) <= starts and all(e.get("bp") == "e" for e in events if e["ph"] == "f")


# ---- the window and the devices -------------------------------------------------------------------------------
def test_a_window_and_a_device_cut_what_is_shown_never_what_is_analysed(tmp_path: Any, ecc: Any) -> None:
    rec, _, whole, _ = ecc
    summary = exported(tmp_path, rec, "cut.pftrace", start=parse_time("0.2", "--from"),
                       stop=parse_time("0.6", "--to"), devices=frozenset({0}))  # fmt: skip
    with open(tmp_path / "cut.pftrace", "rb") as f:
        d = decode(f.read())
    lo, hi = summary["window"]
    assert summary["stopped_at_window_end"] and hi - lo == 400_000_000
    assert {d.path(u)[0] for u in d.tracks} == {"npu-trace", "NPU 0"}
    for s in d.slices:
        assert lo <= s.begin <= s.end <= hi
    inside = [s for s in whole.on("calls") if whole.device(s.track) == 0 and lo <= s.begin and s.end < hi]
    assert Counter(s.name for s in d.on("calls") if not s.args.get("clipped")) == Counter(s.name for s in inside)
    live = d.counter("NPU 0", "memory", "live bytes")
    before = [v for ts, v in whole.counter("NPU 0", "memory", "live bytes") if ts <= lo]
    assert live[0] == (lo, before[-1] if before else 0)  # the memory live when the window opens, carried in


@pytest.mark.parametrize("out", ["odd.pftrace", "odd.json"])
def test_values_past_what_a_column_or_a_track_holds_are_drawn(tmp_path: Any, out: str) -> None:
    """What a driver may write into its fields: an allocation of 2^64 - 57344 bytes (a u64 the memory detector
    holds, past int64), an IRQ 1651048576 and a device 2^32 - 1 (track ranks past Perfetto's int32). Before: an
    OverflowError in the drawing's changes, a ValueError in the track's description; now drawn, exit 0."""
    events = synth_events(plan("ecc-reset", 3, 0.3, 3000, 4))
    odd = {"ascend_devmm_alloc_done": (2, (1 << 64) - 57344), "ascend_irq_handler_entry": (2, 1651048576),
           "ascend_halSqTaskSend": (1, (1 << 32) - 1)}  # fmt: skip
    changed = []
    for i, e in enumerate(events):
        at = odd.pop(e.fmt.name, None)
        if at is not None:
            events[i] = e._replace(values=(*e.values[: at[0]], at[1], *e.values[at[0] + 1 :]))
            changed.append(e.fmt.name)
    assert len(changed) == 3
    enc = PageEncoder(HEADER)
    per_cpu = spread(events, 2, 3)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    rec = str(tmp_path / "odd.npt")
    with RecordingWriter(rec, synth_header(2)) as w:
        for batch in reads(pages, [], random.Random(3), events[-1].ts_ns + 1):
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
            if batch.mark is not None:
                w.add_mark(batch.mark)
    summary = exported(tmp_path, rec, out)
    assert summary["bytes"] > 0 and summary["mapped"]["irqs"] > 0 and summary["mapped"]["calls"] > 0


@pytest.mark.parametrize("out", ["whole.pftrace", "whole.json"])
def test_a_window_that_starts_before_the_recording_starts_at_its_first_event(tmp_path: Any, ecc: Any,
                                                                            out: str) -> None:  # fmt: skip
    """--from @0 or a wall-clock time before the boot (a negative trace time): the window opens at the first event,
    the file the same as without --from (before: Perfetto refused the negative stamp with a traceback, Chrome
    JSON wrote it and said the export spanned 26 hours)."""
    rec = ecc[0]
    plain = exported(tmp_path, rec, out)
    with open(tmp_path / out, "rb") as f:
        want = f.read()
    for start in ("@0", "2000-01-01T00:00:00Z"):
        summary = exported(tmp_path, rec, "from-" + out, start=parse_time(start, "--from"))
        assert summary["window"] == plain["window"]
        with open(tmp_path / ("from-" + out), "rb") as f:
            assert f.read() == want


def test_the_window_is_read_as_seconds_timestamps_or_wall_clock() -> None:
    assert parse_time("1.5", "--from").ns == 1_500_000_000 and parse_time("250ms", "--to").ns == 250_000_000
    stamp = parse_time("@12.000000005", "--from")
    assert (stamp.kind, stamp.ns) == ("mono", 12_000_000_005)
    wall = parse_time("1970-01-01T00:00:02Z", "--from")
    assert (wall.kind, wall.ns, wall.resolve(0, (100, 1_000_000_000))) == ("wall", 2_000_000_000, 1_000_000_100)
    for bad in ("soon", "1.5x", "2026-01-01T00:00:00"):
        with pytest.raises(UsageError):
            parse_time(bad, "--from")


@pytest.mark.parametrize(
    "args, words",
    [
        (["missing.npt", "-o", "{tmp}/x.pftrace"], ["missing.npt"]),
        (["{rec}", "-o", "{tmp}/x.txt"], ["cannot tell the format", ".pftrace"]),
        (["{rec}", "-o", "{tmp}/x.json", "--from", "soon"], ["--from", "soon"]),
        (["{rec}", "-o", "{tmp}/x.json", "--from", "2", "--to", "1"], ["--to 1 is not after --from 2"]),
        (["{rec}", "-o", "{tmp}/x.json", "--from", "50"], ["the window holds none"]),
        (["{rec}", "-o", "{tmp}/x.json", "--devices", "a"], ["--devices"]),
        (["{rec}", "-o", "{rec}", "--format", "perfetto"], ["is the recording itself"]),
        (["{rec}", "-o", "{tmp}/nodir/x.json"], ["cannot write"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2_and_leaves_no_file(tmp_path: Any, capsys: Any, ecc: Any, args: List[str],
                                                             words: List[str]) -> None:  # fmt: skip
    rec = ecc[0]
    argv = ["export", *(a.format(tmp=tmp_path, rec=rec) for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-trace: ") and all(w in err[0] for w in words), err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_command_writes_the_file_and_says_what_it_drew(tmp_path: Any, capsys: Any, ecc: Any) -> None:
    out = tmp_path / "run.perfetto-trace"
    assert main(["export", ecc[0], "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "(perfetto," in err and "calls" in err and "loss: none" in err
    assert decode(out.read_bytes()).slices


@pytest.mark.parametrize("fmt", ["chrome-json", "perfetto"])
def test_an_output_that_is_a_fifo_is_written_in_place_not_replaced(tmp_path: Any, capsys: Any, ecc: Any,
                                                                      fmt: str) -> None:  # fmt: skip
    """A FIFO (or a device: /dev/null) is written as a shell's redirection writes it; a file written beside it
    and moved over it replaced /dev/null with a regular file (as root, `export -o /dev/null`)."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    keeper = os.open(fifo, os.O_RDWR)  # a writer of the FIFO from the start: the reader's open never waits, and
    got: List[bytes] = []  # its end of file comes once the export's end and this one are closed
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        assert main(["export", ecc[0], "-o", str(fifo), "--format", fmt]) == 0
    finally:
        os.close(keeper)
        reader.join()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo"]
    data = got[0]
    if fmt == "chrome-json":
        assert json.loads(data)["traceEvents"]
    else:
        assert decode(data).slices
    assert f"{len(data) / 1e6:.1f} MB" in capsys.readouterr().err  # what was written, not the FIFO's size (0)


# ---- the pieces -------------------------------------------------------------------------------------------------
def test_the_watches_tell_the_same_tasks_and_memory_on_both_paths() -> None:
    """What the export draws comes from the detectors' watches: the columnar path tells what the reference
    path tells, task for task and change for change."""
    events = synth_events(plan("mixed", 2, 0.5, 2000, 2))
    told = []
    for fast in (False, True):
        analysis, seen = Analysis(PROFILES["sim"]), _Seen()
        analysis.latency.task_watch = analysis.memory.watch = seen
        if fast:
            for i in range(0, len(events), 997):
                analysis.feed_block(records_of(events[i : i + 997], PLANS))
        else:
            analysis.feed(events)
        told.append((seen.tasks_told, seen.changes_told))
    assert told[0] == told[1] and told[0][0] and told[0][1]


class _Seen:
    def __init__(self) -> None:
        self.tasks_told: List[Tuple[int, int]] = []
        self.changes_told: List[Tuple[int, int, int, int]] = []

    def tasks(self, nb: Any, rows: Any, submitted: Any) -> None:
        self.tasks_told += [(int(nb.block.ts[r]), int(s)) for r, s in zip(rows.tolist(), submitted.tolist())]

    def task(self, complete: Any, submitted: int) -> None:
        self.tasks_told.append((complete.ts_ns, submitted))

    def changes(self, ts: Any, dev: Any, pid: Any, delta: Any) -> None:
        self.changes_told += [tuple(int(x) for x in row) for row in zip(ts, dev, pid, delta)]


def test_a_lane_takes_a_slice_only_where_it_nests() -> None:
    lane = Lane(Track(1, "calls", SLICES))
    lane.add(10, 20)
    assert lane.fits(20, 30)  # after it, touching
    assert lane.fits(5, 25)  # around it
    assert not lane.fits(15, 30)  # across its end
    assert not lane.fits(10, 30)  # the same begin: it would open first and close first
    packer = LanePacker(lambda i: Track(100 + i, f"calls {i}", SLICES))
    assert [packer.place(b, e).uuid for b, e in [(0, 10), (5, 12), (11, 13), (0, 20)]] == [100, 101, 100, 101]


# ---- the writers against their references -------------------------------------------------------------------
def _same_bytes(tmp_path: Any, rec: str, **kw: Any) -> Dict[str, Any]:
    """The export (columns, the wire format by hand) and the reference (every row one by one, every packet a
    protobuf message) of `rec`, to each format: the same bytes and the same summary."""
    summaries = {}
    for out, fmt in (("out.pftrace", "perfetto"), ("out.json", "chrome-json")):
        fast = export(Request(rec, str(tmp_path / ("fast-" + out)), fmt, progress=False, **kw))
        ref = reference_export(Request(rec, str(tmp_path / ("ref-" + out)), fmt, progress=False, **kw))
        assert (tmp_path / ("fast-" + out)).read_bytes() == (tmp_path / ("ref-" + out)).read_bytes(), (rec, out)
        assert {**fast, "out": None} == {**ref, "out": None}
        summaries[fmt] = fast
    return summaries


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_export_writes_the_references_bytes_on_every_scenario(tmp_path: Any, name: str) -> None:
    """Every simulator scenario, a loss in its middle."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, name, 5, loss=True)
    summary = _same_bytes(tmp_path, rec)
    assert summary["perfetto"]["written"]["slices"] > 100


def test_the_export_writes_the_references_bytes_in_a_window_of_some_devices(tmp_path: Any) -> None:
    rec = str(tmp_path / "rec.npt")
    scenario(rec, "ecc-reset", 3)
    _same_bytes(tmp_path, rec, start=parse_time("0.2", "--from"), stop=parse_time("0.6", "--to"),
                devices=frozenset({0}))  # fmt: skip


def test_the_export_writes_the_references_bytes_whatever_the_blocks(tmp_path: Any, monkeypatch: Any) -> None:
    """Small blocks: calls, handlers and tasks that cross a block's edge, memory carried from block to block."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, "irq-storm", 2, loss=True)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 997)
    _same_bytes(tmp_path, rec)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 61)
    _same_bytes(tmp_path, rec)


def test_the_export_s_first_and_last_blocks_are_small_and_every_row_is_read_once(tmp_path: Any) -> None:
    """blocks_of's ramp (the export's EXPORT_RAMP): the first block is smaller, and so is the last (the blocks
    of the last rows are taken part by part); the rows are those read without it, in the same order (the bytes
    written whatever the blocks: the tests above)."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, "irq-storm", 2)

    def blocks(ramp: int) -> List[Any]:
        source = ReplaySource(rec)
        analysis = Analysis(profile_for(source, None), source.scope_filter(), tasks=source.tasks,
                            processes=source.processes)  # fmt: skip
        bar = Progress(0)
        bar.enabled = False
        return [block for block, _ in blocks_of(source, analysis, 2000, bar, ramp)]

    whole, stepped = blocks(1), blocks(4)
    assert len(stepped[0]) < len(whole[0]) and len(stepped) > len(whole)
    last = [len(b) for b in whole if len(b)][-1]
    assert 0 < [len(b) for b in stepped if len(b)][-1] < last // 4
    for col in ("ts", "cpu", "etype"):
        assert np.array_equal(np.concatenate([getattr(b, col) for b in whole]),
                              np.concatenate([getattr(b, col) for b in stepped]))  # fmt: skip


def test_the_export_writes_the_references_bytes_whatever_the_names_seen_interned(tmp_path: Any,
                                                                                monkeypatch: Any) -> None:  # fmt: skip
    """The table of (name, layout) seen interned grown from one entry, run after run (the runs whose names are
    all interned write no interned data)."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, "ecc-reset", 2, loss=True)
    monkeypatch.setattr(perfetto_pieces, "INTERNED_TABLE", (1, 1))
    _same_bytes(tmp_path, rec)


GOLDEN = ["npu_trace/data/demo.npt", "tests/data/tracedat/own.npt", "tests/data/hostctx/sim-ecc-reset.npt"]


@pytest.mark.parametrize("path", GOLDEN)
def test_the_export_writes_the_references_bytes_on_the_golden_recordings(tmp_path: Any, path: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _same_bytes(tmp_path, os.path.join(root, path))


def test_the_export_writes_the_references_bytes_on_an_imported_trace_dat(tmp_path: Any) -> None:
    """trace-cmd's own file of the golden run (tests/data/tracedat), imported, then exported both ways."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rec = str(tmp_path / "imported.npt")
    dat = os.path.join(root, "tests", "data", "tracedat", "trace-v7.dat")
    assert main(["import", dat, "-o", rec, "--profile", "sim"]) == 0
    _same_bytes(tmp_path, rec)


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text() | st.binary(max_size=4)
    | st.sampled_from(["\udcff", "é", "", "%s"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), inner,
                                                                max_size=3),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=4) | st.integers(0, 5), _VALUES, max_size=5), st.text(max_size=6),
       st.integers(0, (1 << 64) - 1), st.lists(st.integers(1, (1 << 63) - 1), max_size=2),
       st.integers(-(1 << 65), 1 << 65) | st.floats())  # fmt: skip
def test_the_wire_format_by_hand_is_protobufs_own(args: Dict[Any, Any], name: str, ts: int, flows: List[int],
                                                  value: Any) -> None:  # fmt: skip
    """Every kind of packet PerfettoWriter writes by hand, for any arguments, is the bytes of the message
    ProtoPerfettoWriter builds (and what perfetto_trace_pb2 decodes)."""
    out = []
    for cls in (PerfettoWriter, ProtoPerfettoWriter):
        stream = io.BytesIO()
        w = cls(stream)
        w.header({"clock": "mono", "mono_ns": 5, "realtime_ns": 7})
        group, track = Track(3, "NPU 0", GROUP, rank=-1), Track(1 << 62, "calls", SLICES, 3, 10, top=3)
        counters = Track(9, "live bytes", COUNTER, 3, 2, "bytes", 3)
        for t in (group, track, counters):
            w.track(t)
        w.begin(track, ts, name, args, flows, flows[:1])
        w.instant(track, ts, name + "!", args, flows)
        w.end(track, ts)
        w.counter(counters, ts, value)
        out.append((stream.getvalue(), w.close()))
    assert out[0] == out[1]
    pb.Trace().ParseFromString(out[0][0])


def test_arguments_made_as_columns_are_the_normalized_events_own() -> None:
    """args_of (the export's arguments of many rows at once) gives each row the arguments the normalizer gives
    its event before pairing (NormBlock.event: the return's own, for the rows whose entry it did not merge)."""
    events = synth_events(plan("mixed", 4, 0.5, 2000, 2))
    analysis = Analysis(PROFILES["sim"])
    checked = 0
    for i in range(0, len(events), 997):
        nb = analysis.normalize_block(records_of(events[i : i + 997], PLANS))
        analysis.feed_normalized(nb)
        rows = np.flatnonzero((nb.group_of >= 0) & ~nb.paired)
        strings = Strings()
        sets, rejected = args_of(nb, rows, strings)
        assert not len(rejected)
        got = as_dicts(sets, np.arange(len(rows)), strings)
        assert got == [nb.event(r).args for r in rows.tolist()]
        checked += len(rows)
    assert checked > 1000


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), max_size=60), st.integers(0, 3))
def test_lanes_placed_at_once_are_lanes_placed_one_by_one(spans: List[Tuple[int, int]], cut: int) -> None:
    """place_many (runs that follow every end before them go to the first lane at once) places each slice
    where place() would, whatever the runs and however the calls are cut."""
    ends = np.cumsum([e for _, e in spans]).astype(np.int64) if spans else np.zeros(0, np.int64)
    begins = np.array([max(0, int(end) - b) for (b, _), end in zip(spans, ends.tolist())], dtype=np.int64)
    one = LanePacker(lambda i: Track(100 + i, f"lane {i}", SLICES))
    want = [one.place(int(b), int(e)).uuid - 100 for b, e in zip(begins.tolist(), ends.tolist())]
    many = LanePacker(lambda i: Track(100 + i, f"lane {i}", SLICES))
    at = min(cut * 7, len(begins))
    got = [*many.place_many(begins[:at], ends[:at]).tolist(), *many.place_many(begins[at:], ends[at:]).tolist()]
    assert got == want
    assert [(lane.roots, lane.floor, lane.last_end) for lane in many.lanes] == [
        (lane.roots, lane.floor, lane.last_end) for lane in one.lanes
    ]


@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans()), max_size=20))
def test_flow_ids_of_columns_are_flow_ids_one_by_one(rows: List[Tuple[int, int, bool]]) -> None:
    """Both ways of folding the columns (compiled where built, numpy) give flow_id's numbers."""
    dev = np.array([d for d, _, _ in rows], dtype=np.int64)
    value = np.array([v for _, v, _ in rows], dtype=np.int64)
    has = np.array([h for _, _, h in rows], dtype=bool)
    want = [flow_id("task", d if d >= 0 else None, v, v if h else None, None) for d, v, h in rows]
    compiled = tracks._flows
    try:
        for fold in {compiled, None}:
            tracks._flows = fold
            assert flow_ids("task", (dev, dev >= 0), value, (value, has), None).tolist() == want
    finally:
        tracks._flows = compiled
    assert flow_id("task", True) != flow_id("task", 1) and flow_id("task", [1]) == flow_id("task", [1])


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_chrome_json_text_is_json_dumps(value: Any) -> None:
    try:
        want = json.dumps(value, separators=(",", ":"), default=str, allow_nan=False)
    except (ValueError, TypeError):
        want = json.dumps(_plain(value), separators=(",", ":"), default=str, allow_nan=False)
    assert _dumps(value) == want
    if isinstance(value, str):
        assert _name(value) == want


def test_annotations_kept_for_equal_values_of_other_types_are_not_reused() -> None:
    """1, True and 1.0 are equal dict keys: each is written as its own type, after the others were kept."""
    out = []
    for cls in (PerfettoWriter, ProtoPerfettoWriter):
        stream = io.BytesIO()
        w = cls(stream)
        w.header({"clock": "boot"})
        track = Track(5, "events", SLICES)
        w.track(track)
        for args in ({"x": 1}, {"x": True}, {"x": 1.0}, {"x": "1"}, {1: 1}, {True: 1}, {"x": 1}, {"x": "é" * 40}):
            w.instant(track, 10, "i", args)
        w.close()
        out.append(stream.getvalue())
    assert out[0] == out[1]
    d = pb.Trace.FromString(out[0])
    events = [p.track_event for p in d.packet if p.HasField("track_event")]
    values = [a.WhichOneof("value") for e in events for a in e.debug_annotations]
    assert values == ["int_value", "bool_value", "double_value", "string_value", "int_value", "int_value", "int_value",
                      "string_value"]  # fmt: skip


def test_string_values_are_numbered_as_np_unique_numbers_them_even_when_their_hashes_collide() -> None:
    """rowargs._codes finds distinct byte values by a hash of their 8-byte words, checked against the values:
    two values made to share a hash (words (0, x) and (1, K ^ x) both hash to x) stay two, and the codes are
    those np.unique's byte order gives."""
    from npu_trace.export.pieces import Strings
    from npu_trace.export.rowargs import _codes, _distinct_rows

    k, x = 0x9E3779B97F4A7C15, 0x6162636465666768
    words = np.array([[0, x], [1, k ^ x], [0, x], [1, k ^ x]], dtype=np.uint64)
    rows = words.view(np.uint8).reshape(4, 16)
    groups, first = _distinct_rows(rows)
    assert len(first) == 2 and groups[0] == groups[2] != groups[1] == groups[3]
    rng = np.random.default_rng(7)
    raw = rng.choice(np.array([b"irq-b", b"irq-a", b"", b"irq-a\0x", b"\xff\xfe", b"irq-aa"], dtype="S7"), 500)
    got, want = Strings(), Strings()
    uniq, inverse = np.unique(raw, return_inverse=True)
    expected = want.codes([bytes(u).split(b"\0")[0].decode("utf-8", "backslashreplace") for u in uniq.tolist()])
    assert _codes(raw, got).tolist() == expected[inverse.reshape(-1)].tolist()
    assert got.items == want.items


def test_running_memory_totals_are_each_keys_own_running_sum() -> None:
    """part_memory._running (one running sum in key order) gives what a running sum per key gives, from the
    totals carried in and leaving each key's total, over keys of one and two columns."""
    from npu_trace.export.part_memory import _running

    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(0, 40))
        dev, pid, delta = rng.integers(-2, 5, n), rng.integers(0, 4, n), rng.integers(-(1 << 40), 1 << 40, n)
        keys = [dev] if trial % 2 else [dev, pid]
        carried = {0: 7, 3: -2} if trial % 2 else {(0, 1): 5, (4, 3): 9}
        want, live = [], dict(carried)
        for i in range(n):
            key = int(dev[i]) if trial % 2 else (int(dev[i]), int(pid[i]))
            live[key] = live.get(key, 0) + int(delta[i])
            want.append(live[key])
        got_live = dict(carried)
        assert _running(got_live, keys, delta).tolist() == want
        assert got_live == live


@pytest.mark.parametrize("out", ["out.pftrace", "out.json"])
def test_the_summary_s_size_is_the_file_s(tmp_path: Any, out: str) -> None:
    """The bytes the summary says (what the writer wrote) are the file's size, host context included."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    summary = exported(tmp_path, os.path.join(root, "tests/data/hostctx/sim-ecc-reset.npt"), out)
    assert summary["bytes"] == os.path.getsize(tmp_path / out) > 0


def test_the_standard_output_s_link_is_written_in_place_whatever_it_leads_to(tmp_path: Any, ecc: Any) -> None:
    """-o /proc/self/fd/1 (or /dev/stdout) where the shell sent the output to a file: the file gets the trace
    (a file made beside the link and moved over it replaced /dev/stdout itself, as root; in /proc it cannot be
    made, so a regression fails here without touching the host's /dev)."""
    out = tmp_path / "redirected.json"
    code = ("import sys; from npu_trace.cli import main; sys.exit(main(['export', sys.argv[1], '-o', "
            "'/proc/self/fd/1', '--format', 'chrome-json', '--quiet']))")  # fmt: skip
    with open(out, "wb") as f:
        proc = subprocess.run([sys.executable, "-c", code, ecc[0]], stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(out.read_bytes())["traceEvents"] and sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert beside.in_place("/dev/stdout") and not beside.in_place(str(out))


_TO_STDOUT = "import sys; from npu_trace.cli import main; sys.exit(main(['export', *sys.argv[1:]]))"


@pytest.mark.parametrize("fmt", ["perfetto", "chrome-json"])
def test_dash_is_the_standard_output(tmp_path: Any, ecc: Any, fmt: str) -> None:
    """-o -: the trace to the standard output (a pipe here), the same bytes as to a file; the summary on the
    standard error says where it went; no file named "-" is made."""
    ext = ".pftrace" if fmt == "perfetto" else ".json"
    assert main(["export", ecc[0], "-o", str(tmp_path / ("file" + ext)), "-q"]) == 0
    proc = subprocess.run([sys.executable, "-c", _TO_STDOUT, ecc[0], "-o", "-", "--format", fmt],
                          capture_output=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == (tmp_path / ("file" + ext)).read_bytes()
    assert "to the standard output (" in proc.stderr.decode()
    assert not (tmp_path / "-").exists()


def test_dash_appends_where_the_shell_opened_the_output_to_append(tmp_path: Any, ecc: Any) -> None:
    """`>> FILE`: what the file held stays before the trace (the descriptor is the shell's own, not reopened)."""
    out = tmp_path / "log.json"
    out.write_bytes(b"kept\n")
    with open(out, "ab") as f:
        proc = subprocess.run([sys.executable, "-c", _TO_STDOUT, ecc[0], "-o", "-", "--format", "chrome-json", "-q"],
                              stdout=f, stderr=subprocess.PIPE, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    data = out.read_bytes()
    assert data.startswith(b"kept\n") and json.loads(data[5:])["traceEvents"]


def test_a_binary_trace_is_not_written_to_a_terminal(tmp_path: Any, ecc: Any) -> None:
    import pty

    main_fd, terminal = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-c", _TO_STDOUT, ecc[0], "-o", "-", "--format", "perfetto", "-q"],
                              stdout=terminal, stderr=subprocess.PIPE, timeout=120, cwd=tmp_path)  # fmt: skip
    finally:
        os.close(terminal)
        os.close(main_fd)
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines() == [
        "npu-trace: -o -: a Perfetto trace is binary: redirect the standard output to a file or a pipe"]
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_stops_early_is_one_line_naming_the_standard_output(tmp_path: Any, ecc: Any) -> None:
    """`| head -c 10`: the pipe closes under the export (EPIPE), which says so in one line and exits 2."""
    assert main(["export", ecc[0], "-o", str(tmp_path / "whole.json"), "-q"]) == 0
    r, w = os.pipe()
    # the premise: the trace does not fit in the pipe with the 10 bytes the reader takes, so the export is still
    # writing when the reader leaves
    capacity = fcntl.fcntl(w, getattr(fcntl, "F_GETPIPE_SZ", 1032))  # Python 3.10 on names the constant
    assert capacity + 10 < (tmp_path / "whole.json").stat().st_size
    proc = subprocess.Popen([sys.executable, "-c", _TO_STDOUT, ecc[0], "-o", "-", "--format", "chrome-json", "-q"],
                            stdout=w, stderr=subprocess.PIPE, cwd=tmp_path)  # fmt: skip
    os.close(w)
    with os.fdopen(r, "rb") as reading:
        assert reading.read(10)
    err = proc.communicate(timeout=120)[1].decode()
    assert proc.returncode == 2
    assert err.strip().splitlines() == ["npu-trace: cannot write the standard output: Broken pipe"]
