"""Unit tests of each detector on hand-built NpuEvents, and of Analysis' determinism."""

from __future__ import annotations

import json
import random
from typing import Any, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.detectors import (
    Analysis,
    Finding,
    Histogram,
    LatencyDetector,
    LossDetector,
    MemoryDetector,
    ResetDetector,
    TimeoutDetector,
)
from npu_trace.device.hal import RESET_STEPS
from npu_trace.device.profiles import PROFILES, SIM_RESET
from npu_trace.events import Loss, NpuEvent
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import synth_events

US, MS, S = 1_000, 1_000_000, 1_000_000_000


def E(ts: int, kind: str, dev: Optional[int], op: str, **args: Any) -> NpuEvent:
    return NpuEvent(ts, kind, dev, op, 7, 0, args)


def call(ts: int, dev: int, op: str, latency: int) -> NpuEvent:
    return E(ts + latency, "call", dev, op, latency_ns=latency, entry_ts_ns=ts)


# ---- histogram / latency ---------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**11), min_size=1, max_size=400))
def test_histogram_percentiles_are_within_half_a_percent(values: List[int]) -> None:
    h = Histogram()
    for v in values:
        h.add(v)
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99, 1.0):
        exact = ordered[max(1, -(-int(q * 1000) * len(values) // 1000)) - 1]
        assert abs(h.percentile(q) - exact) <= exact / 250 + 1
    assert (h.min, h.max, h.count) == (ordered[0], ordered[-1], len(values))


def test_latency_stats_per_device_and_op() -> None:
    det = LatencyDetector()
    det.feed([call(i * MS, i % 2, "halMemFree", (i + 1) * US) for i in range(100)])
    rows = det.summary()["ops"]
    assert [(r["device"], r["op"], r["count"]) for r in rows] == [(0, "halMemFree", 50), (1, "halMemFree", 50)]
    assert rows[0]["min_ns"] == 1 * US and rows[0]["max_ns"] == 99 * US
    assert abs(rows[0]["p50_ns"] - 49 * US) <= 49 * US // 250


def test_absolute_threshold_fires_even_during_warm_up() -> None:
    (spike,) = LatencyDetector().feed([call(0, 0, "halMemAlloc", 6 * MS)])
    assert spike.kind == "spike" and spike.ts_ns == 0 and spike.op == "halMemAlloc"
    assert spike.details["rules"] == ["absolute"] and spike.details["threshold_ns"] == 4 * MS
    assert spike.details["baseline_ns"] is None and spike.details["latency_ns"] == 6 * MS


def test_adaptive_baseline_warms_up_then_fires_above_k_times_median() -> None:
    det = LatencyDetector({"floor_ns": 1 * MS, "k": 4, "warmup": 8})
    slow = [call(i * 10 * MS, 0, "custom", 2 * MS) for i in range(8)]
    assert det.feed(slow) == []  # no absolute threshold for "custom", adaptive still warming up
    assert det.feed([call(100 * MS, 0, "custom", 7 * MS)]) == []  # 7 ms < 4 x 2 ms
    (spike,) = det.feed([call(200 * MS, 0, "custom", 9 * MS)])
    assert spike.details["rules"] == ["adaptive"] and spike.details["threshold_ns"] == 8 * MS
    assert spike.details["baseline_ns"] == 2 * MS


def test_scheduling_noise_never_fires_and_spikes_stay_out_of_the_baseline() -> None:
    rng = random.Random(5)
    det = LatencyDetector()
    events = [call(i * MS, 0, "halSqTaskSend", rng.randint(1 * US, 20 * US)) for i in range(500)]
    events += [call(600 * MS + i * MS, 0, "halSqTaskSend", rng.randint(500 * US, 2 * MS)) for i in range(20)]
    assert det.feed(events) == []
    spikes = det.feed([call(S + i * 100 * MS, 0, "halSqTaskSend", 5 * MS) for i in range(100)])
    assert len(spikes) == 100  # a run of spikes does not teach the baseline that 5 ms is normal


def test_task_latency_pairs_submit_and_complete_by_device_stream_task() -> None:
    det = LatencyDetector()
    out = det.feed(
        [
            E(0, "submit", 0, "halSqTaskSend", stream=1, task=5),
            E(10, "submit", 1, "halSqTaskSend", stream=1, task=5),
            E(100 * US, "complete", 1, "task", stream=1, task=5),
            E(9 * MS, "complete", 0, "task", stream=1, task=5),
            E(9 * MS, "complete", 0, "task", stream=1, task=6),
        ]
    )
    rows = {(r["device"], r["op"]): r for r in det.summary()["ops"]}
    assert rows[(1, "task")]["max_ns"] == 100 * US - 10 and rows[(0, "task")]["max_ns"] == 9 * MS
    assert det.summary()["unmatched_completes"] == 1
    assert out == []  # "task" has no absolute threshold, and the adaptive rule is still warming up


def test_open_tasks_past_the_bound_forget_the_oldest_first() -> None:
    """Submits whose completions never come: past MAX_TASKS open, each new one forgets the oldest open task (its
    completion is then unmatched), whatever was opened and closed before; a task submitted again while open is
    the newest."""
    from npu_trace.detectors.latency import MAX_TASKS

    det = LatencyDetector()
    det.feed([E(i, "submit", 0, "s", stream=0, task=i) for i in range(10)])
    det.feed([E(20 + i, "complete", 0, "task", stream=0, task=i) for i in range(5)])  # 5..9 stay open
    det.feed([E(100 + i, "submit", 0, "s", stream=1, task=i) for i in range(MAX_TASKS)])  # forgets 5..9
    det.feed([E(10**9, "submit", 0, "s", stream=1, task=0), E(10**9 + 1, "submit", 0, "s", stream=2, task=0)])
    summary = det.summary()  # the second forgot (1, 1): (1, 0) was submitted again, the newest but one
    assert summary["pending_tasks"] == MAX_TASKS and summary["evicted_tasks"] == 5 + 1
    done = [(0, 4), (0, 5), (0, 9), (1, 0), (1, 1), (1, 2), (2, 0)]
    det.feed([E(2 * 10**9, "complete", 0, "task", stream=s, task=t) for s, t in done])
    assert det.summary()["unmatched_completes"] == 4  # (0, 4) closed before, (0, 5), (0, 9) and (1, 1) forgotten
    assert det.summary()["pending_tasks"] == MAX_TASKS - 3


def test_per_op_config_disables_rules() -> None:
    det = LatencyDetector(PROFILES["sim"].latency)
    for i in range(50):
        det.feed(
            [
                E(i * MS, "submit", 0, "s", stream=0, task=i),
                E(i * MS + 50 * US, "complete", 0, "task", stream=0, task=i),
            ]
        )
    assert (
        det.feed([E(S, "submit", 0, "s", stream=0, task=99), E(S + 60 * MS, "complete", 0, "task", stream=0, task=99)])
        == []
    )


# ---- reset sequences ----------------------------------------------------------------------------------
IMMEDIATE = {**SIM_RESET, "merge_ns": 0}  # each step closes or continues its sequence as it comes


def reset_run(dev: int, t0: int, gap: int, steps: Any = RESET_STEPS, fail: str = "") -> List[NpuEvent]:
    return [
        E(t0 + i * gap, "reset_step", dev, "reset", step=s, index=i + 1, ret=-1 if s == fail else 0)
        for i, s in enumerate(steps)
    ]


def precursors(dev: int) -> List[NpuEvent]:
    evs = [E(S * k, "ecc", dev, "dms_event", ce_count=10 * k, uce_count=k // 3, temp_c=60 + k) for k in range(1, 6)]
    evs += [E(6 * S, "timeout", dev, "mbox", wait_us=1000), E(7 * S, "timeout", dev, "heartbeat", lost_count=4)]
    return evs


def test_complete_reset_sequence_with_trigger_and_precursors() -> None:
    det = ResetDetector({**IMMEDIATE, "precursor_window_ns": 4 * S})
    out = det.feed([*precursors(0), *reset_run(0, 8 * S, S // 10)])
    (f,) = out
    d = f.details
    assert (f.kind, f.device, f.op, f.ts_ns) == ("reset_sequence", 0, "reset", 8 * S)
    assert d["status"] == "complete" and [s["step"] for s in d["steps"]] == list(RESET_STEPS)
    assert d["missing"] == [] and not d["out_of_order"] and d["duration_ns"] == 10 * S // 10
    assert d["trigger"]["op"] == "heartbeat" and d["trigger"]["ts_ns"] == 7 * S
    p = d["precursor"]
    assert (p["from_ns"], p["to_ns"], p["timeouts"]) == (3 * S, 7 * S, 2)
    assert p["timeouts_by_op"] == {"heartbeat": 1, "mbox": 1}
    # window [3 s, 7 s]: reports at 3, 4, 5 s; the baseline is the report at 2 s (ce 20, uce 0)
    assert p["ecc"] == {"reports": 3, "ce_first": 20, "ce_last": 50, "ce_delta": 30, "uce_first": 0, "uce_last": 1,
                        "uce_delta": 1}  # fmt: skip
    assert p["max_temp_c"] == 65
    assert det.flush() == [] and det.summary()["complete"] == 1


def test_failed_step_closes_the_sequence() -> None:
    det = ResetDetector(IMMEDIATE)
    (f,) = det.feed(reset_run(1, 0, MS, RESET_STEPS[:6], fail="rescan"))
    assert f.details["status"] == "failed" and f.details["failed_step"] == "rescan"
    assert f.details["reason"] == "step_failed" and f.details["trigger"] is None
    assert det.summary()["failed"] == 1


def test_step_timeout_makes_it_incomplete_and_a_late_step_opens_another() -> None:
    det = ResetDetector({**IMMEDIATE, "step_timeout_ns": 10 * S})
    assert det.feed(reset_run(0, 0, S, RESET_STEPS[:4])) == []
    assert [run.dev for run in det.open_sequences()] == [0]
    out = det.feed([E(14 * S, "ecc", 1, "dms_event", ce_count=1, uce_count=0, temp_c=50)])
    (f,) = out
    assert f.details["status"] == "incomplete" and f.details["reason"] == "step_timeout"
    assert f.details["waiting_for"] == "bus_remove" and "bus_remove" in f.details["missing"]
    late = det.flush()
    assert late == []
    (g,) = det.feed(reset_run(0, 20 * S, S, RESET_STEPS[4:]))
    assert g.details["status"] == "complete" and g.details["missing"] == list(RESET_STEPS[:4])


def test_session_end_leaves_an_incomplete_sequence() -> None:
    det = ResetDetector(IMMEDIATE)
    det.feed(reset_run(2, 0, S, RESET_STEPS[:3]))
    (f,) = det.flush()
    assert f.details["status"] == "incomplete" and f.details["reason"] == "session_end"
    assert f.details["waiting_for"] == "reset_begin"


def test_out_of_order_steps_and_stale_trigger() -> None:
    det = ResetDetector({**IMMEDIATE, "trigger_window_ns": 5 * S})
    steps = ["ready_for_hotreset", "remove", "unbind", "heartbeat_resume"]
    (f,) = det.feed([E(0, "timeout", 0, "heartbeat"), *reset_run(0, 10 * S, S, steps)])
    assert f.details["out_of_order"] and f.details["trigger"] is None


def test_one_story_from_several_channels_out_of_order() -> None:
    """ftrace steps delivered late, kmsg and uevent copies early: held 1 s, ordered, merged: one sequence."""
    steps = reset_run(0, 10 * S, 50 * MS)
    kmsg = [e._replace(ts_ns=e.ts_ns + 30 * US, args={**e.args, "source": "kmsg"}) for e in steps]
    uevent = [e._replace(ts_ns=e.ts_ns + 2 * MS, args={"step": e.args["step"], "source": "uevent"})
              for e in steps if e.args["step"] in ("unbind", "remove", "rescan", "probe")]  # fmt: skip
    early = sorted(kmsg + uevent, key=lambda e: e.ts_ns)
    trigger = E(9 * S, "timeout", 0, "heartbeat", lost_count=4)
    told_again = E(9 * S - 200, "timeout", 0, "heartbeat", source="kmsg", lost_count=4)  # its kmsg line
    feeds = [[told_again, *early[:10]], [trigger, *steps[:6]], early[10:], steps[6:], [E(30 * S, "irq", 1, "irq")]]
    det = ResetDetector(SIM_RESET)
    out = [f for batch in feeds for f in det.feed(batch)] + det.flush()
    (f,) = out
    d = f.details
    assert d["status"] == "complete" and not d["out_of_order"] and f.ts_ns == 10 * S
    assert [s["step"] for s in d["steps"]] == list(RESET_STEPS)
    assert [s["ts_ns"] for s in d["steps"]] == [e.ts_ns for e in steps]
    by_step = {s["step"]: s["sources"] for s in d["steps"]}
    assert by_step["remove"] == ["ftrace", "kmsg", "uevent"] and by_step["reset_begin"] == ["ftrace", "kmsg"]
    assert d["trigger"]["op"] == "heartbeat" and det.summary()["merged_steps"] == len(kmsg) + len(uevent)
    assert d["precursor"]["timeouts"] == 1  # one heartbeat loss, told by two channels
    # the result depends on the sequence of events only, not on how it was split into batches
    one = ResetDetector(SIM_RESET)
    assert [*one.feed([e for batch in feeds for e in batch]), *one.flush()] == out


def test_a_complete_sequence_waits_for_other_channels_copies_then_time_closes_it() -> None:
    end = (len(RESET_STEPS) - 1) * MS  # the last (end) step
    det = ResetDetector(SIM_RESET)
    assert det.feed(reset_run(0, 0, MS)) == []  # ended, but the end waits 1 s of event time for other copies
    assert det.feed([E(end + S, "irq", 3, "irq")]) == []  # 1 s exactly: a copy could still come
    (f,) = det.feed([E(end + S + 1, "irq", 3, "irq")])  # time moves on (any device, any kind)
    assert f.details["status"] == "complete"
    det = ResetDetector(SIM_RESET)  # the same with no event at all: the timeline's watermark moves time on
    det.feed(reset_run(0, 0, MS))
    assert det.advance(end + S) == [] and det.advance(end + S) == []
    (f2,) = det.advance(end + S + 2)  # everything before it has been seen: no copy can join any more
    assert f2 == f and det.advance(end + 10 * S) == []
    det = ResetDetector(SIM_RESET)
    det.feed(reset_run(0, 0, MS))
    (g,) = det.flush()
    assert g.details["status"] == "complete" and g.details["steps"][0]["sources"] == ["ftrace"]


def test_without_a_definition_the_reset_detector_is_off() -> None:
    assert ResetDetector({}).feed(reset_run(0, 0, S)) == []


# ---- memory, timeouts, loss ---------------------------------------------------------------------------
def test_memory_forgets_threads_that_hold_nothing() -> None:
    """Thread churn (each of 1,000 threads allocates and frees) leaves no per-thread entry behind."""
    det = MemoryDetector()
    for tid in range(1000, 2000):
        det.feed([NpuEvent(tid * 10, "alloc", 0, "halMemAlloc", tid, 0, {"size": 64, "va": tid}),
                  NpuEvent(tid * 10 + 1, "free", 0, "halMemFree", tid, 0, {"va": tid})])  # fmt: skip
    det.feed([E(30_000, "alloc", 0, "halMemAlloc", size=5, va=1)])
    assert det.pid_bytes == {(0, 7): 5} and det.top_processes(3) == [(0, 7, 5)]


def test_memory_live_bytes_failures_and_leaks() -> None:
    det = MemoryDetector()
    evs = [
        E(1, "alloc", 0, "halMemAlloc", size=100, va=0x10),
        E(2, "alloc", 0, "halMemAlloc", size=50, va=0x20),
        E(3, "alloc", 1, "halMemAlloc", size=7, va=0x10),
        E(4, "free", 0, "halMemFree", va=0x10),
        E(5, "free", 0, "halMemFree", va=0x99),
        E(6, "alloc_fail", 0, "halMemAlloc", size=10 << 30, free_bytes=20 << 30, largest_free=2 << 30, ret=6),
        E(7, "alloc_fail", 0, "halMemAlloc", size=30 << 30, free_bytes=20 << 30, largest_free=20 << 30, ret=6),
    ]
    fails = det.feed(evs)
    assert [f.details["fragmentation"] for f in fails] == [True, False]
    assert fails[0].details["free_bytes"] == 20 << 30 and fails[0].details["live_bytes"] == 50
    s = det.summary()
    assert s["devices"] == [
        {"device": 0, "live_bytes": 50, "peak_bytes": 150},
        {"device": 1, "live_bytes": 7, "peak_bytes": 7},
    ]
    assert s["unknown_frees"] == 1 and s["failures"] == 2
    leaks = det.flush()
    assert [(f.device, f.ts_ns, f.details["count"], f.details["bytes"]) for f in leaks] == [(0, 2, 1, 50), (1, 3, 1, 7)]


def test_timeouts_become_findings_with_their_wait() -> None:
    out = TimeoutDetector().feed(
        [
            E(5, "timeout", 0, "mbox", code=2, wait_us=3000),
            E(20 * MS, "timeout", 0, "halCqReportRecv", latency_ns=20 * MS - 5, entry_ts_ns=5, ret=-110),
            E(30 * MS, "timeout", 0, "heartbeat", lost_count=4),
            E(31 * MS, "call", 0, "halMemFree"),
        ]
    )
    assert [(f.op, f.ts_ns, f.details["wait_ns"]) for f in out] == [
        ("mbox", 5, 3_000_000),
        ("halCqReportRecv", 5, 20 * MS - 5),
        ("heartbeat", 30 * MS, None),
    ]


def test_loss_is_aggregated_per_source_kind_cpu() -> None:
    det = LossDetector()
    det.feed(
        [
            E(0, "call", 0, "x"),
            NpuEvent(50, "lost", None, "overrun", -1, 1, {"source": "tracefs", "lost": 3}),
            NpuEvent(70, "lost", None, "overrun", -1, 1, {"source": "tracefs", "lost": 4}),
            NpuEvent(60, "lost", None, "page_missed", -1, 0, {"source": "tracefs", "lost": 0}),
        ]
    )
    out = det.flush()
    assert [
        (f.ts_ns, f.details["loss_kind"], f.details["cpu"], f.details["lost"], f.details["records"]) for f in out
    ] == [
        (50, "overrun", 1, 7, 2),
        (60, "page_missed", 0, 0, 1),
    ]
    assert det.summary()["incomplete"] and det.summary()["lost"] == 7
    assert LossDetector().summary()["incomplete"] is False


# ---- the pipeline ---------------------------------------------------------------------------------------
def run(items: List[Any], cuts: List[int]) -> str:
    a = Analysis(PROFILES["sim"])
    bounds = [0, *sorted(cuts), len(items)]
    for lo, hi in zip(bounds, bounds[1:]):
        a.feed(items[lo:hi])
    return json.dumps(a.finish(), sort_keys=False)


def test_report_is_identical_whatever_the_batch_split() -> None:
    items: List[Any] = list(synth_events(plan("mixed", 3, 1.5, 1500, 2)))
    items.insert(len(items) // 2, Loss("tracefs", 0, "overrun", 5, items[len(items) // 2].ts_ns))
    whole = run(items, [])
    rng = random.Random(1)
    for _ in range(3):
        assert run(items, rng.sample(range(1, len(items)), 40)) == whole
    assert run(items, list(range(1, len(items)))[:: max(1, len(items) // 500)]) == whole
    report = json.loads(whole)
    assert report["summary"]["loss"]["incomplete"] and report["summary"]["loss"]["lost"] == 5
    keys = [
        (f["ts_ns"], f["kind"], -1 if f["device"] is None else f["device"], f["op"] or "") for f in report["findings"]
    ]
    assert keys == sorted(keys)


def test_feed_returns_findings_as_they_happen_and_finish_is_idempotent() -> None:
    a = Analysis(PROFILES["sim"])
    live = a.feed(synth_events(plan("spikes", 1, 1.0, 1000, 1)))
    assert live and all(isinstance(f, Finding) and f.kind == "spike" for f in live)
    assert a.finish() is a.finish()


def test_histogram_merge_equals_adding_every_value() -> None:
    a, b, both = Histogram(), Histogram(), Histogram()
    a.add_all([5, 900, 10**6])
    b.add_all([3, 10**9])
    both.add_all([5, 900, 10**6, 3, 10**9])
    a.merge(b)
    assert (a.buckets, a.min, a.max, a.count, a.total) == (both.buckets, both.min, both.max, both.count, both.total)


# ---- health: ECC, temperature, link, npu-smi health ----------------------------------------------------
def test_health_summary_and_link_and_health_findings() -> None:
    from npu_trace.detectors.health import HealthDetector

    det = HealthDetector()
    full = {"source": "sysfs", "bdf": "0000:3b:00.0", "speed": "16.0 GT/s PCIe", "width": 16,
            "max_speed": "16.0 GT/s PCIe", "max_width": 16, "degraded": 0}  # fmt: skip
    evs = [
        E(1, "ecc", 0, "dms_event", ce_count=1, uce_count=0, temp_c=62),
        E(2, "ecc", 0, "npu-smi", source="npu-smi", ce_count=3, uce_count=0),
        E(3, "thermal", 0, "npu-smi", source="npu-smi", temp_c=91),
        E(4, "ecc", 0, "dms_event", ce_count=255, uce_count=1, temp_c=80),
        E(5, "link", 0, "pcie_link", **full),
        E(6, "link", 0, "pcie_link", **{**full, "width": 8, "degraded": 1}),
        E(7, "link", 0, "pcie_link", **{**full, "width": 4, "degraded": 1}),  # still degraded: no new finding
        E(8, "link", 0, "pcie_link", **full),
        E(9, "link", 0, "pcie_link", **{**full, "speed": "8.0 GT/s PCIe", "degraded": 1}),
        E(10, "log", 1, "health", source="npu-smi", health="OK", previous=None, error_codes=[]),
        E(11, "log", 1, "health", source="npu-smi", health="Warning", previous="OK", error_codes=["80E01801"]),
        E(12, "log", 1, "health_note", source="health", note="npu-smi info: timeout"),
    ]
    out = det.feed(evs)
    assert [(f.kind, f.device, f.ts_ns) for f in out] == [("link_degraded", 0, 6), ("link_degraded", 0, 9),
                                                           ("health", 1, 11)]  # fmt: skip
    assert out[0].details["width"] == 8 and out[2].details["error_codes"] == ["80E01801"]
    dev0 = det.summary()["devices"]["0"]
    assert (dev0["ce_first"], dev0["ce_last"], dev0["ce_delta"], dev0["uce_delta"]) == (1, 255, 254, 1)
    assert dev0["max_temp_c"] == 91 and dev0["link_degraded"] is True
    assert det.summary()["devices"]["1"]["health"] == "Warning"


def test_one_timeout_told_by_two_channels_is_one_finding() -> None:
    def run(batches: List[List[NpuEvent]]) -> List[Any]:
        det = TimeoutDetector(merge_ns=S)
        return [*(f for b in batches for f in det.feed(b)), *det.flush()]

    evs = [
        E(10 * MS, "timeout", None, "heartbeat", source="kmsg", lost_count=4),  # the kmsg line came first
        E(10 * MS + 300, "timeout", 0, "heartbeat", lost_count=4),  # the probe
        E(20 * MS, "timeout", 0, "mbox", wait_us=1000),
        E(21 * MS, "timeout", None, "mbox", source="kmsg", wakeup_time_us=1000),
        E(22 * MS, "timeout", 0, "mbox", wait_us=2000),  # another mbox timeout from the probe: its own finding
        E(5 * S, "irq", 0, "irq"),
    ]
    out = run([evs])
    assert [(f.device, f.op, f.ts_ns, f.details.get("sources")) for f in out] == [
        (0, "heartbeat", 10 * MS + 300, ["ftrace", "kmsg"]),
        (0, "mbox", 20 * MS, ["ftrace", "kmsg"]),
        (0, "mbox", 22 * MS, ["ftrace"]),
    ]
    assert "source" not in out[0].details  # the probe's copy tells the details
    assert run([evs[:2], evs[2:4], evs[4:]]) == out and run([[e] for e in evs]) == out


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(1, 29), max_size=6, unique=True))
def test_timeouts_released_within_one_feed_do_not_lose_the_ones_after(cuts: List[int]) -> None:
    """Groups of timeouts more than a merge window apart, fed at once or in any pieces: every one is a finding
    (a release in the middle of a feed once dropped the timeouts that came after it in that feed)."""
    evs = [E(g * 2 * S + k * MS, "timeout", 0, op, wait_us=10) for g in range(10) for k, op in
           enumerate(("cq_wait", "halCqReportRecv", "mbox"))]  # fmt: skip
    bounds = [0, *sorted(cuts), len(evs)]
    det = TimeoutDetector(merge_ns=S)
    out = [f for a, b in zip(bounds, bounds[1:]) for f in det.feed(evs[a:b])] + det.flush()
    assert [(f.op, f.ts_ns) for f in out] == [(e.op, e.ts_ns) for e in evs]



# ---- device states ------------------------------------------------------------------------------------
def states_after(events: List[NpuEvent], definition: Any = None) -> Any:
    from npu_trace.detectors.states import DeviceStateDetector

    states = DeviceStateDetector(definition or IMMEDIATE)
    states.feed(events)
    states.flush()
    return states


def test_a_device_goes_degraded_resetting_offline_then_ok_through_a_reset() -> None:
    states = states_after([*precursors(0), *reset_run(0, 8 * S, S // 10)])
    changes = [(t.state, t.why) for t in states.take_transitions()]
    assert changes == [("degraded", "timeout mbox"), ("resetting", "reset step ready_for_hotreset"),
                       ("offline", "reset step remove"),  # removed, in reset, off the bus: gone until the rescan
                       ("resetting", "reset step rescan"), ("ok", "reset step heartbeat_resume")]  # fmt: skip
    (dev0,) = states.states().items()
    assert dev0[0] == 0 and dev0[1].state == "ok" and dev0[1].last_error == "timeout heartbeat"
    summary = states.summary()["devices"]["0"]
    assert summary["state"] == "ok" and summary["entered"]["degraded"] == 1 and summary["entered"]["ok"] == 1
    assert states.take_transitions() == []


def test_the_driver_saying_a_device_is_dead_takes_it_offline_until_a_reset_brings_it_back() -> None:
    states = states_after([E(S, "fault", 5, "send_msg_failed", ret=-19), E(2 * S, "fault", None, "kernel_fault"),
                           *reset_run(5, 8 * S, S // 10)])  # fmt: skip
    changes = [(t.ts_ns, t.dev, t.state, t.why) for t in states.take_transitions()]
    assert changes[0] == (S, 5, "offline", "driver: send_msg_failed (-19)") and changes[-1][2] == "ok"
    assert set(states.states()) == {5}  # a kernel fault names no device


def test_a_failed_or_unfinished_reset_leaves_the_device_offline() -> None:
    failed = states_after(reset_run(1, 0, MS, RESET_STEPS[:6], fail="rescan"))
    assert failed.states()[1].state == "offline" and failed.states()[1].last_error == "reset step rescan failed (-1)"
    unfinished = states_after(reset_run(2, 0, S, RESET_STEPS[:2]), {**IMMEDIATE, "step_timeout_ns": 10 * S})
    last = unfinished.take_transitions()[-1]
    assert (last.state, last.ts_ns, last.why) == ("offline", S, "reset incomplete: session_end")
    stalled = states_after([*reset_run(2, 0, S, RESET_STEPS[:2]), E(30 * S, "irq", 1, "irq")],
                           {**IMMEDIATE, "step_timeout_ns": 10 * S})  # fmt: skip
    last = stalled.take_transitions()[-1]  # judged when time passed its deadline, stamped at the deadline
    assert (last.state, last.ts_ns, last.why) == ("offline", 11 * S, "reset incomplete: step_timeout")
    alloc = states_after([E(1, "alloc_fail", 3, "halMemAlloc", size=10)])
    assert alloc.states()[3].state == "ok" and alloc.states()[3].last_error == "alloc failed: 10 bytes"


@settings(max_examples=300, deadline=None)
@given(seen=st.integers(0, 10_000), fresh=st.booleans(), at=st.integers(0, 5_000), refresh=st.integers(1, 300))
def test_the_last_refresh_of_one_index_is_the_columns_one(seen: int, fresh: bool, at: int, refresh: int) -> None:
    """The plain-integer last refresh (a run's end) equals the column one (every sample's) at that index."""
    import numpy as np

    from npu_trace.detectors.latency import OpStats

    det = LatencyDetector({"refresh": refresh})
    stats = OpStats(det.window)
    stats.seen, stats.baseline = seen, None if fresh else 7
    assert det._last_refresh_before(stats, at) == int(det._last_refresh(stats, np.array([at]))[0])
