"""The columnar timeline releases what the reference timeline releases: the same items, in the same order, with
the same losses and the same clock, however the batches were cut and however often its blocks are taken.

The reference is the tests' `Timeline` (tests/reference/timeline.py: the page decoder, then the ordered merge
of objects). The batches here are hostile on purpose: marks that claim a CPU caught up while it still has pages
(its next records come late and are dropped), channel items with and without stamps, decoded TraceEvents among
the channel items (as BPF hands them over), pages that say events were missed before them, and bounds small
enough that the merge has to go past a stalled stream (lag) or past its count (max_held).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goldens import kernel_dirs, read
from npu_trace.detectors import Analysis
from npu_trace.device.profiles import PROFILES
from npu_trace.events import Loss, LossLedger, NpuEvent, TraceEvent
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import parse_header_page
from npu_trace.pipeline import Batch, Mark
from npu_trace.pipeline.blocktimeline import BlockTimeline, LiveBlocks, chunk_batches
from npu_trace.recording.schema import Chunk
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import formats, synth_events
from reference.analysis import ReferenceAnalysis
from reference.pages import CpuDecoders
from reference.timeline import OrderedMerge, Timeline

MS = 1_000_000
HEADER = parse_header_page(read(os.path.join(kernel_dirs()[0], "header_page")))
FORMATS = formats()
PROFILE = PROFILES["sim"]
LATE_LOSSES = 3
PLANS = plans(FORMATS.values(), layouts=PROFILE.layouts)


def hostile_batches(seed: int, cpus: int, lies: Optional[float] = None) -> List[Batch]:
    rng = random.Random(seed)
    events = synth_events(plan("mixed", seed % 4, 0.3, 2000, 2))
    per_cpu: Dict[int, List[TraceEvent]] = {c: [] for c in range(cpus)}
    channel: List[Any] = []
    last = -1
    for ev in events:
        last = max(ev.ts_ns, last + rng.choice([0, 0, 1]))  # equal stamps across CPUs happen
        if rng.random() < 0.03:  # decoded elsewhere (BPF): a channel item
            channel.append(ev._replace(ts_ns=last, cpu=-1))
            continue
        cpu = rng.randrange(cpus)
        per_cpu[cpu].append(ev._replace(cpu=cpu, ts_ns=last))
    for i in range(8):
        at = rng.choice(events).ts_ns
        channel.append(NpuEvent(at, "log", None, "note", -1, -1, {"source": "kmsg", "n": i}))
        channel.append(Loss("kmsg", -1, "overrun", i + 1, 0 if i % 2 else at))  # untimed, then timed
    channel.sort(key=lambda item: item.ts_ns)
    told = random.Random(-seed)  # the other draws as they were
    for _ in range(LATE_LOSSES):  # losses told after what came later (a recording's damaged part): some late
        at = told.randrange(1, len(channel))
        channel.insert(at, Loss("recording", -1, "damaged", 0, max(1, channel[at - 1].ts_ns - 40 * MS)))
    enc = PageEncoder(HEADER)
    pages: Dict[int, List[bytes]] = {}
    for cpu, evs in per_cpu.items():
        out: List[bytes] = []
        step = max(1, len(evs) // 6)
        for k in range(0, len(evs), step):  # some runs of pages say events were missed before them
            rows = [(e.ts_ns, e.pid, e.fmt, e.values) for e in evs[k : k + step]]
            out += enc.pages(rows, missed=rng.choice([None, None, 0, 7]))
        pages[cpu] = out
    return cut_into_reads(pages, channel, rng, lies)


def cut_into_reads(pages: Dict[int, List[bytes]], channel: List[Any], rng: random.Random,
                   lies: Optional[float]) -> List[Batch]:  # fmt: skip
    left = {cpu: list(p) for cpu, p in pages.items()}
    chan = list(channel)
    batches: List[Batch] = []
    clock = 0
    if lies is None:  # how often a mark says a CPU is caught up while it is not
        lies = rng.choice([0.0, 0.03, 0.15])
    while any(left.values()) or chan:
        taken: List[Tuple[int, bytes]] = []
        for cpu in rng.sample(sorted(left), len(left)):
            n = rng.randint(0, 3)
            taken += [(cpu, page) for page in left[cpu][:n]]
            del left[cpu][:n]
        n = rng.randint(0, 4)
        items, chan = chan[:n], chan[n:]
        newest = max((int.from_bytes(page[:8], "little") for _, page in taken), default=0)
        clock = max(clock, newest + rng.randint(0, 30 * MS))  # the read's time: after what it found
        caught = tuple(c for c in left if not left[c] or rng.random() < lies)  # a lie: late records
        wm = chan[0].ts_ns if chan and rng.random() < 0.9 else clock
        mark = Mark(clock, caught, wm) if rng.random() < 0.9 else None
        batches.append(Batch(taken, items, mark))
    return [*batches, Batch([], [], None, final=True)]


def reference(batches: List[Batch], cpus: int, **bounds: int) -> Tuple[List[Any], List[Any], LossLedger, str]:
    ledger = LossLedger()
    timeline = Timeline(CpuDecoders(HEADER, build_decoders(FORMATS.values(), layouts=PROFILE.layouts), ledger=ledger),
                        merge=OrderedMerge(**bounds), cpus=range(cpus), channels=True)  # fmt: skip
    analysis = ReferenceAnalysis(PROFILE)
    items: List[Any] = []
    clocks = []
    for batch in batches:
        out = timeline.push(batch)
        items += out
        analysis.feed(out, timeline.now)
        clocks.append(timeline.now)
    return items, clocks, ledger, json.dumps(analysis.finish(), sort_keys=True)


Run = Tuple[List[Any], List[Any], BlockTimeline, str]


def columnar(batches: List[Batch], cpus: int, rng: random.Random, **bounds: int) -> Run:
    decoders = build_decoders(FORMATS.values(), layouts=PROFILE.layouts)
    timeline = BlockTimeline(HEADER, decoders, PLANS, cpus=range(cpus), channels=True, **bounds)
    analysis = Analysis(PROFILE)
    items: List[Any] = []
    clocks = []
    for batch in batches:
        timeline.add(batch)
        clocks.append(timeline.now)
        if rng.random() < 0.3 or batch.final:
            block = timeline.take()
            items += block.items()
            analysis.feed_block(block, timeline.now)
    return items, clocks, timeline, json.dumps(analysis.finish(), sort_keys=True)


def same(seed: int, cpus: int, takes: int, **bounds: int) -> None:
    batches = hostile_batches(seed, cpus)
    want, want_clocks, ledger, want_report = reference(batches, cpus, **bounds)
    got, clocks, timeline, report = columnar(batches, cpus, random.Random(takes), **bounds)
    assert len(got) == len(want)
    assert got == want
    assert clocks == want_clocks
    assert timeline.ledger.rows() == ledger.rows()
    assert report == want_report


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1 << 16), cpus=st.integers(1, 4), takes=st.integers(0, 1 << 16))
def test_the_columnar_timeline_releases_what_the_timeline_releases(seed: int, cpus: int, takes: int) -> None:
    same(seed, cpus, takes)


@pytest.mark.parametrize("bounds", [{"max_lag_ns": 2 * MS}, {"max_held": 40}, {"max_held": 300, "max_lag_ns": 30 * MS}])
def test_its_bounds_go_past_a_stalled_stream_as_the_merge_does(bounds: Dict[str, int]) -> None:
    for seed in range(6):
        same(seed, 3, seed, **bounds)


def test_late_records_are_dropped_and_counted_by_cpu() -> None:
    batches = hostile_batches(3, 2, lies=0.3)
    _, _, ledger, _ = reference(batches, 2)
    _, _, timeline, _ = columnar(batches, 2, random.Random(0))
    late = {k: v for k, v in timeline.late.items() if k[0] == "tracefs"}
    assert late, "the hostile reads should make some records late"
    assert timeline.ledger.rows() == ledger.rows()


def test_a_loss_that_comes_late_is_passed_on_never_dropped() -> None:
    """A loss stamped before what was already released goes to the front of the next release, its stamp kept
    (it is the count of what was lost: dropped, it would be one "late" item instead), as the merge passes it."""
    came_late = 0
    for seed in range(6):
        batches = hostile_batches(seed, 2)
        want, _, _, _ = reference(batches, 2)
        got, _, timeline, _ = columnar(batches, 2, random.Random(seed))
        assert got == want
        damaged = [i for i, item in enumerate(got) if isinstance(item, Loss) and item.kind == "damaged"]
        assert len(damaged) == LATE_LOSSES and ("recording", -1) not in timeline.late
        stamps = [int(getattr(item, "ts_ns", 0)) for item in got]
        came_late += sum(1 for i in damaged if stamps[i] < max(stamps[:i], default=0))
    assert came_late, "some of the losses should come after what was stamped later"


# ---- a recorded chunk, walked at once ------------------------------------------------------------------------
def as_recorded(batches: List[Batch], rng: random.Random) -> List[Any]:
    """The batches as a recording stores them: channel items as their own record before the pages they came
    with, pages and marks in chunks (a read without a mark only at a chunk's end), chunks cut at random."""
    parts: List[Any] = []
    pages: List[Tuple[int, bytes]] = []
    marks: List[Tuple[int, Mark]] = []

    def close() -> None:
        if pages or marks:
            parts.append(Chunk(len(parts), list(pages), None, None, list(marks), b"".join(p for _, p in pages)))
        pages.clear()
        marks.clear()

    for batch in batches:
        if batch.final:
            break
        if batch.events:
            close()
            parts.append(Batch([], batch.events))
        pages.extend(batch.pages)
        if batch.mark is not None:
            marks.append((len(pages), batch.mark))
        if batch.mark is None or rng.random() < 0.2:
            close()
    close()
    return [*parts, Batch([], [], None, final=True)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1 << 16), cpus=st.integers(1, 4), cut=st.integers(0, 1 << 16))
def test_a_chunk_walked_at_once_is_its_reads_one_by_one(seed: int, cpus: int, cut: int) -> None:
    parts = as_recorded(hostile_batches(seed, cpus), random.Random(cut))
    batches = [b for part in parts for b in ([part] if isinstance(part, Batch) else chunk_batches(part))]
    want, want_clocks, ledger, want_report = reference(batches, cpus)
    decoders = build_decoders(FORMATS.values(), layouts=PROFILE.layouts)
    timeline = BlockTimeline(HEADER, decoders, PLANS, cpus=range(cpus), channels=True)
    analysis = Analysis(PROFILE)
    got: List[Any] = []
    read = 0  # batches of the reference read so far
    for part in parts:
        if isinstance(part, Batch):
            timeline.add(part)
            read += 1
        else:
            timeline.add_chunk(part)
            read += sum(1 for _ in chunk_batches(part))
        assert timeline.now == want_clocks[read - 1]  # after a chunk: where the reference is after its last read
        block = timeline.take()
        got += block.items()
        analysis.feed_block(block, timeline.now)
    assert got == want
    assert timeline.ledger.rows() == ledger.rows()
    assert json.dumps(analysis.finish(), sort_keys=True) == want_report


# ---- a live consumer's takes ----------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("rows, every_s", [(1 << 30, 0.05), (150, 1e9), (400, 0.02)])
def test_a_live_consumer_takes_by_rows_by_time_and_at_the_end(rows: int, every_s: float) -> None:
    """LiveBlocks takes once `rows` are pending, or `every_s` after its last take, or at the end; what it
    hands over (and the analysis fed with it) is the reference's, whatever it coalesces."""
    batches = hostile_batches(11, 2)
    want, _, _, want_report = reference(batches, 2)
    clock = FakeClock()
    decoders = build_decoders(FORMATS.values(), layouts=PROFILE.layouts)
    live = LiveBlocks(BlockTimeline(HEADER, decoders, PLANS, cpus=range(2), channels=True), clock, rows, every_s)
    analysis = Analysis(PROFILE)
    got: List[Any] = []
    takes = 0
    for batch in batches:
        clock.t += 0.005  # a read every 5 ms
        block = live.push(batch)
        if block is None:
            assert not batch.final and live.timeline.pending_rows < rows
            continue
        takes += 1
        got += block.items()
        analysis.feed_block(block, live.timeline.now)
    assert live.timeline.ended
    assert got == want
    assert json.dumps(analysis.finish(), sort_keys=True) == want_report
    reads = len(batches)
    if every_s < 1:  # by time at least every every_s (4 reads of 5 ms at 0.02 s), and far fewer than the reads
        assert reads / (every_s / 0.005) - 1 <= takes < reads
    else:  # by rows only: a take whenever 150 rows were pending, and at the end
        assert 1 < takes < reads
