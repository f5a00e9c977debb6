"""The columnar fast path gives what the reference path gives: same events, same findings, same summary.

The reference path (Normalizer -> NpuEvent -> detectors' feed) is the definition; the fast path (Block ->
BlockNormalizer -> detectors' feed_block) is an implementation of it. Every test here feeds the same items to
both, cut into batches at different places, and compares the results byte for byte. The items come from the
synthesizer (the simulator's plans turned into the events the driver would log), with the rare kinds (kmsg
timeouts, losses, BPF frees) sprinkled in at random, because those are where the fast path steps aside.
"""

from __future__ import annotations

import json
import random
from typing import Any, List, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.detectors import latency
from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.histogram import Histogram, bucket_index, bucket_indices
from npu_trace.detectors.latency import LatencyDetector, Samples, summaries
from npu_trace.detectors.memory import MemoryDetector
from npu_trace.device.profiles import PROFILES, SIM_LATENCY
from npu_trace.events import Loss, NpuEvent
from npu_trace.ftrace.columns import plans
from npu_trace.pipeline.blocks import records_of
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import MISSING, BlockNormalizer, kind_counts
from npu_trace.sim.scenarios import SCENARIOS, plan
from npu_trace.sim.synth import formats, synth_events
from reference.analysis import ReferenceAnalysis
from reference.normalize import Normalizer as ReferenceNormalizer

PROFILE = PROFILES["sim"]
PLANS = plans(formats().values(), layouts=PROFILE.layouts)


def sprinkled(scenario: str, seed: int, rng: random.Random, cpus: int = 2) -> List[Any]:
    """The synthesizer's events for one scenario on `cpus` CPUs, with rare kinds sprinkled in."""
    items: List[Any] = []
    for ev in synth_events(plan(scenario, seed, 1.0, 2000, 2)):
        items.append(ev._replace(cpu=rng.randrange(cpus)))
        r = rng.random()
        if r < 0.005:
            args = {"source": "kmsg", "lost_count": 4}
            items.append(NpuEvent(ev.ts_ns, "timeout", rng.choice([0, None]), "heartbeat", -1, -1, args))
        elif r < 0.007:
            items.append(Loss("tracefs", 0, "overrun", 3, ev.ts_ns))
        elif r < 0.009:
            args = {"va": 0x100000000000, "ret": 0, "source": "bpf", "latency_ns": 5000,
                    "entry_ts_ns": ev.ts_ns - 5000}  # fmt: skip
            items.append(NpuEvent(ev.ts_ns, "free", 0, "halMemFree", 1, 0, args))
        elif r < 0.012:
            items += npu_smi_poll(ev.ts_ns, rng)
    return items


def npu_smi_poll(ts: int, rng: random.Random) -> List[NpuEvent]:
    """One health-channel poll of two chips: process rows (the synthesizer's process among them), then each
    chip's reading, with numbers that make the accounting detector's conditions come and go."""
    out: List[NpuEvent] = []
    for dev in (0, 1):
        rows = [(4242, rng.randrange(0, 3000)), (77, rng.randrange(0, 2000))][: rng.randrange(3)]
        for pid, mb in rows:
            args = {"source": "npu-smi", "npu": dev, "chip": 0, "pid": pid, "name": "python3", "memory_mb": mb}
            out.append(NpuEvent(ts, "log", dev, "npu_smi_process", -1, -1, args))
        reading = {"source": "npu-smi", "npu": dev, "chip": 0, "name": "910B3", "health": "OK", "temp_c": 50,
                   "power_w": 93.6, "aicore_pct": 0, "used_mb": rng.randrange(0, 4000), "total_mb": 65536,
                   "memory": "hbm", "bus_id": f"0000:c{dev}:00.0", "processes": len(rows)}  # fmt: skip
        out.append(NpuEvent(ts, "log", dev, "npu_smi", -1, -1, reading))
    return out


def cuts(rng: random.Random, n: int, count: int) -> List[int]:
    return [0, *sorted(rng.sample(range(1, n), min(n - 1, count))), n] if n > 1 else [0, n]


def batches(items: Sequence[Any], bounds: Sequence[int]) -> List[Sequence[Any]]:
    return [items[lo:hi] for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


# ---- normalizing ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_block_normalizes_to_the_reference_events(scenario: str) -> None:
    rng = random.Random(scenario)
    items = sprinkled(scenario, 3, rng)
    want = ReferenceNormalizer(PROFILE.mapping).feed(items)
    fast = BlockNormalizer(Normalizer(PROFILE.mapping))
    got: List[NpuEvent] = []
    for batch in batches(items, cuts(rng, len(items), 30)):
        block = fast.normalize(records_of(batch, PLANS))
        events = [block.event(i) for i in range(len(block))]
        rows = np.arange(len(block))
        for name in ("va", "size", "stream", "task", "latency_ns", "entry_ts_ns", "ret", "lost_count"):
            assert block.int_arg(rows, name) == [ev.args.get(name, MISSING) for ev in events], name
        got += events
    assert got == want


def test_a_block_counts_its_kinds_like_its_events() -> None:
    rng = random.Random(7)
    items = sprinkled("mixed", 1, rng)
    block = BlockNormalizer(Normalizer(PROFILE.mapping)).normalize(records_of(items, PLANS))
    counts: dict = {}
    for i in range(len(block)):
        kind = block.event(i).kind
        counts[kind] = counts.get(kind, 0) + 1
    assert kind_counts(block) == counts


# ---- whole analysis --------------------------------------------------------------------------------------------
def reference(items: Sequence[Any], bounds: Sequence[int]) -> str:
    analysis = ReferenceAnalysis(PROFILE)
    for batch in batches(items, bounds):
        analysis.feed(batch, batch[-1].ts_ns - 5)
    return json.dumps(analysis.finish(), sort_keys=True)


def fast(items: Sequence[Any], bounds: Sequence[int], objects: float = 0.0) -> str:
    """`objects`: the share of trace records handed over as decoded TraceEvents (as BPF does)."""
    analysis = Analysis(PROFILE)
    pick = random.Random(len(items))
    for batch in batches(items, bounds):
        kept = [i for i in range(len(batch)) if pick.random() < objects]
        analysis.feed_block(records_of(batch, PLANS, objects_too=kept), batch[-1].ts_ns - 3)
    return json.dumps(analysis.finish(), sort_keys=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_fast_path_finds_what_the_reference_finds(scenario: str) -> None:
    rng = random.Random(scenario + "analysis")
    for seed in (1, 2):
        items = sprinkled(scenario, seed, rng)
        want, got = reference(items, cuts(rng, len(items), 20)), fast(items, cuts(rng, len(items), 7))
        assert json.loads(got)["findings"] == json.loads(want)["findings"]
        assert got == want


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), scenario=st.sampled_from(SCENARIOS), pieces=st.integers(0, 12))
def test_where_the_batches_are_cut_changes_nothing(seed: int, scenario: str, pieces: int) -> None:
    rng = random.Random(seed)
    items = sprinkled(scenario, 1 + seed % 5, rng)
    assert fast(items, cuts(rng, len(items), pieces)) == reference(items, [0, len(items)])


@pytest.mark.parametrize("share", [0.1, 1.0])
def test_records_decoded_elsewhere_count_as_records(share: float) -> None:
    """BPF hands over TraceEvents it decoded itself: as objects in a block, they are shaped, paired (with
    the records around them too) and counted exactly as the reference does."""
    rng = random.Random(11)
    for scenario in ("mixed", "fragmentation"):
        items = sprinkled(scenario, 2, rng)
        assert fast(items, cuts(rng, len(items), 5), share) == reference(items, [0, len(items)])


# ---- the detectors' columnar parts, one by one ------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    lats=st.lists(st.one_of(st.integers(1000, 50_000), st.integers(1_000_000, 90_000_000)), min_size=1,
                  max_size=300),
    config=st.sampled_from([{}, SIM_LATENCY, {"warmup": 3, "refresh": 5, "window": 16, "k": 2, "floor_ns": 30000},
                            {"k": 1.5}, {"floor_ns": 0, "k": 3, "refresh": 1, "window": 5},
                            {"thresholds_ns": {"halMemAlloc": 40_000}, "warmup": 0},
                            {"thresholds_ns": {"halMemAlloc": 40_000.5}, "k": 2.25, "window": 7, "refresh": 3},
                            {"ops": {"halMemAlloc": {"adaptive": False}}},
                            {"ops": {"halMemAlloc": {"absolute_ns": None}}, "warmup": 1, "window": 200}]),
    data=st.data(),
    compiled=st.booleans(),
)  # fmt: skip
def test_latency_samples_at_once_are_samples_one_by_one(lats: List[int], config: Any, data: Any,
                                                        compiled: bool) -> None:  # fmt: skip
    """Both scans of a run (the C extension's, the numpy twin) against the samples one by one."""
    one, many = LatencyDetector(config), LatencyDetector(config)
    if compiled:  # the extension takes every run here: its twin is never asked
        assert latency.IMPLEMENTATION == "c"
        many._run = lambda *args: pytest.fail("the compiled scan gave the run to its twin")  # type: ignore
    else:
        many._run_compiled = lambda *args: False  # type: ignore
    want: List[Any] = []
    got: List[Any] = []
    for i, lat in enumerate(lats):
        one._sample_at(0, "halMemAlloc", lat, i * 10, i * 10 + lat, 7, "call", want)
    bounds = [0, *sorted(data.draw(st.sets(st.integers(1, len(lats)), max_size=5))), len(lats)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            continue
        lat = np.array(lats[lo:hi], dtype=np.int64)
        start = np.arange(lo, hi, dtype=np.int64) * 10
        bucket = bucket_indices(lat) if data.draw(st.booleans()) else None  # as _feed_samples gives them, or not
        summary = None if bucket is None else summaries(lat, bucket, np.zeros(1, dtype=np.int64))[0]
        many.samples(0, "halMemAlloc", Samples(lat, start, start + lat, np.full(hi - lo, 7), ["call"] * (hi - lo),
                                               bucket, summary), got)  # fmt: skip
    a, b = one.stats[(0, "halMemAlloc")], many.stats[(0, "halMemAlloc")]
    assert got == want
    assert (a.seen, a.baseline, list(a.window), a.spikes) == (b.seen, b.baseline, list(b.window), b.spikes)
    assert a.hist.buckets == b.hist.buckets


@pytest.mark.parametrize("compiled", [True, False])
def test_a_latency_at_a_threshold_is_not_a_spike(compiled: bool) -> None:
    """A latency exactly at the thresholds (k x the baseline, and the absolute one), then one above them."""
    config = {"k": 2, "floor_ns": 0, "warmup": 3, "refresh": 1, "thresholds_ns": {"halMemAlloc": 2000}}
    lats = [1000] * 6 + [2000, 2001, 1000, 1999]
    one, many = LatencyDetector(config), LatencyDetector(config)
    if not compiled:
        many._run_compiled = lambda *args: False  # type: ignore
    want: List[Any] = []
    got: List[Any] = []
    for i, lat in enumerate(lats):
        one._sample_at(0, "halMemAlloc", lat, i, i + lat, 7, "call", want)
    lat = np.array(lats, dtype=np.int64)
    start = np.arange(len(lats), dtype=np.int64)
    many.samples(0, "halMemAlloc", Samples(lat, start, start + lat, np.full(len(lats), 7), ["call"] * len(lats)), got)
    assert [(f.details["latency_ns"], f.details["adaptive_ns"]) for f in want] == [(2001, 2000)]
    assert got == want


@st.composite
def memory_events(draw: Any) -> List[NpuEvent]:
    events, t = [], 0
    # in some runs an address past int64 (events only carry one: the detector keeps its live allocations as a map
    # then, columns otherwise)
    addresses = [0x10, 0x20, 0x30, 2**64 - 16] if draw(st.booleans()) else [0x10, 0x20, 0x30]
    for _ in range(draw(st.integers(1, 80))):
        t += draw(st.integers(0, 3))
        dev, va, tid = draw(st.sampled_from([0, 1, None])), draw(st.sampled_from(addresses)), draw(
            st.integers(1, 3))  # fmt: skip
        kind = draw(st.sampled_from(["alloc", "alloc", "free", "free", "alloc_fail"]))
        if kind == "alloc":
            args = {"va": va, "size": draw(st.integers(1, 99))}
            events.append(NpuEvent(t, "alloc", dev, "halMemAlloc", tid, 0, args))
        elif kind == "free":
            events.append(NpuEvent(t, "free", dev, "halMemFree", tid, 0, {"va": va}))
        else:
            args = {"size": 5, "free_bytes": 9, "largest_free": 2, "ret": 6}
            events.append(NpuEvent(t, "alloc_fail", dev, "halMemAlloc", 1, 0, args))
    return events


@settings(max_examples=150, deadline=None)
@given(events=memory_events(), data=st.data())
def test_memory_accounting_at_once_is_accounting_one_by_one(events: List[NpuEvent], data: Any) -> None:
    one, many = MemoryDetector(), MemoryDetector()
    bounds = [0, *sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=3))), len(events)]
    normalizer = BlockNormalizer(Normalizer({}))
    want: List[Any] = []
    got: List[Any] = []
    for batch in batches(events, bounds):
        want += one.feed(batch)
        if data.draw(st.booleans()):  # the live allocations kept as columns (a block), or as a map (events)
            got += many.feed_block(normalizer.normalize(records_of(batch, {})))
        else:
            got += many.feed(batch)
    assert got == want
    assert many.summary() == one.summary()
    assert many.flush() == one.flush()


@given(st.lists(st.integers(0, 2**62), max_size=200))
def test_histogram_buckets_at_once_are_buckets_one_by_one(values: List[int]) -> None:
    one, many = Histogram(), Histogram()
    for v in values:
        one.add(v)
    many.add_many(np.array(values, dtype=np.int64))
    summed = Histogram()  # the latency detector's way: the buckets and a summary of the run given
    if values:
        arr = np.array(values, dtype=np.int64)
        idx = bucket_indices(arr)
        summed.add_many(arr, idx, summaries(arr, idx, np.zeros(1, dtype=np.int64))[0])

    def state(h: Histogram) -> Any:
        return h.buckets, h.count, h.min, h.max, h.total

    assert state(many) == state(one)
    assert state(summed) == state(one)
    assert list(bucket_indices(np.array(values, dtype=np.int64))) == [bucket_index(v) for v in values]


def test_with_a_scope_the_block_path_finds_what_the_scoped_reference_finds() -> None:
    """A device scope over blocks finds what the reference's scope, one event at a time, finds; the scope
    leaves out half the events (the other device's), which changes the findings."""
    from npu_trace.pipeline.scope import Scope, ScopeFilter

    rng = random.Random("scoped")
    items = sprinkled("spikes", 4, rng)
    bounds = cuts(rng, len(items), 20)

    def run(block: bool, scope: bool) -> str:
        kind = Analysis if block else ReferenceAnalysis
        analysis = kind(PROFILE, ScopeFilter(Scope(devices=(1,))) if scope else None)
        for batch in batches(items, bounds):
            if block:
                analysis.feed_block(records_of(batch, PLANS), batch[-1].ts_ns - 3)
            else:
                analysis.feed(batch, batch[-1].ts_ns - 3)
        return json.dumps(analysis.finish(), sort_keys=True)

    scoped = run(block=True, scope=True)
    assert scoped == run(block=False, scope=True)
    assert scoped != run(block=True, scope=False)
    assert json.loads(scoped)["summary"]["scope"]["dropped"]["device"] > 0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), wide=st.booleans())
def test_task_pairing_at_once_is_pairing_one_by_one(data: Any, wide: bool) -> None:
    """Submits and completions of any keys (narrow ones pack into one integer, wide ones do not; absent
    streams, reused ids, completions without a submit, tasks left open across blocks)."""
    ids = st.sampled_from([0, 1, 5, (1 << 62) + 3, (1 << 63) - 1] if wide else [0, 1, 2, 7])
    events, t = [], 0
    for _ in range(data.draw(st.integers(1, 60))):
        t += data.draw(st.integers(0, 2))
        kind = data.draw(st.sampled_from(["submit", "complete"]))
        args = {"task": data.draw(ids)}
        if data.draw(st.booleans()):
            args["stream"] = data.draw(ids)
        events.append(NpuEvent(t, kind, data.draw(st.sampled_from([0, 1, None])), "task", 9, 0, args))
    one, many = LatencyDetector({}), LatencyDetector({})
    want = one.feed(events)
    normalizer = BlockNormalizer(Normalizer({}))
    bounds = [0, *sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=3))), len(events)]
    got = [f for batch in batches(events, bounds) for f in many.feed_block(normalizer.normalize(records_of(batch, {})))]
    assert got == want
    assert many.summary() == one.summary() and list(many.tasks.items()) == list(one.tasks.items())


SCOPES = {
    "device 0": {"devices": (0,)},
    "NPU interrupts": {"irqs": ((128, 0), (129, None), (133, 1))},  # others left out; 129 has no device
    "device 1 and interrupts": {"devices": (1,), "irqs": ((128, 0), (144, 1))},
    "task names": {"comms": ("npu_sim",),
                   "comm_events": ("ascend:ascend_halMemAlloc", "ascend:ascend_irq_handler_entry")},
}


@pytest.mark.parametrize("scope_name", sorted(SCOPES))
@pytest.mark.parametrize("scenario", ["irq-storm", "mixed"])
def test_a_scope_over_blocks_finds_what_the_scope_one_event_at_a_time_finds(scope_name: str, scenario: str) -> None:
    """Every part of the pipeline's scope (devices, the NPU's interrupts given their device, task names the
    kernel could not filter) as a stage over blocks, cut anywhere: the reference's report, byte for byte, and
    the same counts of what was left out."""
    from npu_trace.pipeline.scope import Applied, Scope, ScopeFilter

    spec = dict(SCOPES[scope_name])
    applied = Applied(comm_events=spec.pop("comm_events", ()))
    rng = random.Random(scope_name + scenario)
    items = sprinkled(scenario, 2, rng)
    names = {4242: "npu_sim"}
    comm_of = lambda pid: names.get(pid, "other") if pid % 3 else "other"  # noqa: E731  (some tasks out)

    def run(block: bool, bounds: Sequence[int]) -> str:
        analysis = (Analysis if block else ReferenceAnalysis)(PROFILE, ScopeFilter(Scope(**spec, applied=applied),
                                                                                   comm_of))  # fmt: skip
        for batch in batches(items, bounds):
            if block:
                analysis.feed_block(records_of(batch, PLANS), batch[-1].ts_ns - 3)
            else:
                analysis.feed(batch, batch[-1].ts_ns - 3)
        return json.dumps(analysis.finish(), sort_keys=True)

    want = run(False, [0, len(items)])
    assert run(True, cuts(rng, len(items), 9)) == want
    assert sum(json.loads(want)["summary"]["scope"]["dropped"].values()) > 0
