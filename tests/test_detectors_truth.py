"""Ground truth: for every simulator scenario, the detectors find exactly what the scenario injected.

The raw events are synthesized (npu_trace/sim/synth.py) from the planner's actions, the way the kernel would record
them; with a real run, pass the executor's truth dict to `synth_events` / `truth_expectations` instead.
"""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Optional

import pytest

from npu_trace.detectors import Analysis
from npu_trace.device.profiles import PROFILES
from npu_trace.sim.runner import build_truth
from npu_trace.sim.scenarios import SCENARIOS, plan
from npu_trace.sim.synth import TruthTally, host_events, records, synth_events, timed, truth_expectations
from npu_trace.sim.threads import HOST_LIKE

DURATION_S, RATE, DEVICES = 2.0, 2000, 2


def analyse(source: Any) -> Dict[str, Any]:
    analysis = Analysis(PROFILES["sim"])
    analysis.feed(synth_events(source))
    return analysis.finish()


def of_kind(report: Dict[str, Any], kind: str) -> List[Dict[str, Any]]:
    return [f for f in report["findings"] if f["kind"] == kind]


SPIKE_FLOOR_NS = PROFILES["sim"].latency["floor_ns"]  # no spike of the sim profile is shorter, either rule


def really_slow(live: Dict[str, Any], finding: Dict[str, Any]) -> bool:
    """A spike finding of a live run that no fault injected: a call of its device and op that really took longer
    than any spike's threshold, as its executor measured it around the call (the traced entry and return lie
    inside: a call descheduled inside it on a loaded host is slow, and the tracer is right to say so)."""
    return any(a["func"] == finding["op"] and a["dev"] == finding["device"] and a["kind"] != "spike"
               and a["start_ns"] <= finding["ts_ns"] <= a["end_ns"] and a["end_ns"] - a["start_ns"] > SPIKE_FLOOR_NS
               for a in live["actions"])  # fmt: skip


def check_spikes(report: Dict[str, Any], exp: Dict[str, Any], live: Optional[Dict[str, Any]] = None) -> int:
    """Every injected spike found; beyond them, nothing (offline), or (`live`: the run's truth, with the times
    its executor measured) only calls that really were that slow. How many of those were found."""
    found = of_kind(report, "spike")
    spikes = collections.Counter((f["device"], f["op"]) for f in found)
    if live is None:
        assert spikes == exp["spikes"]
        return 0
    assert spikes & exp["spikes"] == exp["spikes"], (spikes, exp["spikes"])  # every injected one
    extra = spikes - exp["spikes"]
    slow = [f for f in found if (f["device"], f["op"]) in extra and really_slow(live, f)]
    told = collections.Counter((f["device"], f["op"]) for f in slow)
    assert all(told[key] >= n for key, n in extra.items()), (extra, found)
    return sum(extra.values())


def check_against_truth(report: Dict[str, Any], exp: Dict[str, Any], live: Optional[Dict[str, Any]] = None) -> None:
    """The report is the truth's: `exp` (truth_expectations); `live`: the truth of a live run, whose calls a loaded
    host may really have made slow (`check_spikes`)."""
    slow = check_spikes(report, exp, live)
    fails = of_kind(report, "alloc_fail")
    assert collections.Counter(f["device"] for f in fails) == exp["alloc_fail"]
    timeouts = collections.Counter((f["device"], f["op"]) for f in of_kind(report, "timeout"))
    assert timeouts == exp["timeouts"]
    leaks = {f["device"]: (f["details"]["count"], f["details"]["bytes"]) for f in of_kind(report, "leak")}
    assert leaks == exp["leaks"]
    check_resets(of_kind(report, "reset_sequence"), exp)
    assert of_kind(report, "loss") == [] and not report["summary"]["loss"]["incomplete"]
    summary = report["summary"]
    assert summary["pairing"] == {"unpaired_entries": 0, "unpaired_returns": 0}  # every return met its entry
    latency = summary["latency"]
    assert (latency["unmatched_completes"], latency["pending_tasks"], latency["evicted_tasks"]) == (0, 0, 0)
    expected_total = sum(exp["spikes"].values()) + len(fails) + sum(exp["timeouts"].values()) + len(leaks)
    assert len(report["findings"]) == expected_total + slow + len(exp["resets"])


def check_resets(found: List[Dict[str, Any]], exp: Dict[str, Any]) -> None:
    assert sorted(f["device"] for f in found) == sorted(exp["resets"])
    for f in found:
        d, dev = f["details"], f["device"]
        assert d["status"] == "complete" and not d["out_of_order"] and d["missing"] == []
        assert [s["step"] for s in d["steps"]] == exp["resets"][dev]
        assert [s["ts_ns"] for s in d["steps"]] == sorted(s["ts_ns"] for s in d["steps"])
        assert d["trigger"]["op"] == "heartbeat" and d["trigger"]["ts_ns"] < f["ts_ns"]
        p, want = d["precursor"], exp["precursor"][dev]
        assert p["ecc"]["ce_last"] == want["ce_last"] and p["ecc"]["uce_last"] == want["uce_last"]
        assert p["ecc"]["ce_delta"] > 0 and p["ecc"]["uce_delta"] == 1  # the climb, then the uncorrectable one
        assert p["max_temp_c"] == want["max_temp_c"]
        assert p["timeouts"] == sum(n for (d_, _), n in exp["timeouts"].items() if d_ == dev)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_findings_equal_the_truth(scenario: str, seed: int) -> None:
    actions = plan(scenario, seed, DURATION_S, RATE, DEVICES)
    exp = truth_expectations(actions)
    report = analyse(actions)
    check_against_truth(report, exp)
    kinds = collections.Counter(f["kind"] for f in report["findings"])
    must = {"spikes": "spike", "fragmentation": "alloc_fail", "ecc-reset": "reset_sequence", "mixed": "reset_sequence"}
    if scenario in must:
        assert kinds[must[scenario]] > 0
    if scenario == "fragmentation":
        assert all(f["details"]["fragmentation"] for f in of_kind(report, "alloc_fail"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_findings_equal_the_truth_on_a_host_like_run(scenario: str) -> None:
    """Threads on two CPUs that move, tasks completed on the other CPU, calls returning on another CPU."""
    actions = plan(scenario, 3, DURATION_S, RATE, DEVICES, host=HOST_LIKE)
    events = host_events(actions, HOST_LIKE)
    assert {e.cpu for e in events} == {0, 1} and len({e.pid for e in events}) == HOST_LIKE.threads
    analysis = Analysis(PROFILES["sim"])
    analysis.feed(events)
    check_against_truth(analysis.finish(), truth_expectations(actions))


def test_truth_dict_with_executor_times() -> None:
    """The truth file path: records carry start_ns/end_ns (here: a replay of the executor, offset in time)."""
    actions = plan("mixed", 7, DURATION_S, RATE, 3)
    rows = [(start + 10**12, end + 10**12, a.ret or 0) for (start, end, _), a in zip(timed(records(actions)), actions)]
    truth = build_truth({"scenario": "mixed"}, actions, rows)
    report = analyse(truth)
    check_against_truth(report, truth_expectations(truth))
    assert report["summary"]["events"]["first_ts_ns"] >= 10**12


def test_summary_has_latency_stats_for_every_hal_call() -> None:
    report = analyse(plan("steady", 1, DURATION_S, RATE, 1))
    ops = {(r["device"], r["op"]) for r in report["summary"]["latency"]["ops"]}
    assert {(0, "halMemAlloc"), (0, "halMemFree"), (0, "halSqTaskSend"), (0, "halCqReportRecv"), (0, "task")} <= ops
    for row in report["summary"]["latency"]["ops"]:
        assert row["min_ns"] <= row["p50_ns"] <= row["p99_ns"] <= row["max_ns"]
    assert report["summary"]["pairing"] == {"unpaired_entries": 0, "unpaired_returns": 0}


def test_the_truth_tallied_action_by_action_is_the_truth() -> None:
    actions = plan("mixed", 4, DURATION_S, RATE, 3)
    tally = TruthTally()
    for a in actions:
        tally.add_action(a)
    assert tally.expectations() == truth_expectations(actions)


def test_a_live_runs_extra_spike_passes_only_on_a_call_that_really_was_that_slow() -> None:
    """`check_spikes(live=...)`: a spike no fault injected is accepted where the executor measured its call longer
    than any spike threshold, and nowhere else; an injected spike not found fails."""
    ms = 1_000_000
    slow = {"func": "halMemFree", "dev": 1, "kind": "call", "start_ns": 100 * ms, "end_ns": 130 * ms}
    fast = {"func": "halMemFree", "dev": 1, "kind": "call", "start_ns": 200 * ms, "end_ns": 201 * ms}
    live = {"actions": [slow, fast]}
    exp = {"spikes": collections.Counter({(0, "halMemAlloc"): 1})}
    injected = {"kind": "spike", "device": 0, "op": "halMemAlloc", "ts_ns": 5 * ms}

    def report(*extra: int) -> Dict[str, Any]:
        return {"findings": [injected] + [{"kind": "spike", "device": 1, "op": "halMemFree", "ts_ns": t * ms}
                                          for t in extra]}  # fmt: skip

    assert check_spikes(report(), exp, live) == 0 and check_spikes(report(110), exp, live) == 1
    for wrong in (report(200), report(140), {"findings": []}):  # a fast call, outside any call, the injected one
        with pytest.raises(AssertionError):
            check_spikes(wrong, exp, live)
    with pytest.raises(AssertionError):
        check_spikes(report(110), exp)  # offline: exactly what was injected
