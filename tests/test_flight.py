"""The flight recorder's pure parts, offline: the ring and its bounds, the incident policy (trigger, join,
extension by reset sequences, rate limit), dump names and the directory's retention."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Tuple

import pytest

from npu_trace.detectors.base import Finding
from npu_trace.errors import UsageError
from npu_trace.events import NpuEvent
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.sinks.flight.dumps import dump_name, is_dump, to_remove
from npu_trace.sinks.flight.incident_policy import Close, IncidentPolicy, Open, parse_kinds, trigger_kind
from npu_trace.sinks.flight.ring import FlightRing

S = 1_000_000_000
MS = 1_000_000


def batch(t_ns: int, n_pages: int = 1, size: int = 4096, events: Optional[List[NpuEvent]] = None,
          noise: bool = False) -> Batch:  # fmt: skip
    """A read at t_ns with `n_pages` distinct pages (their bytes name their read, or are random: `noise`) and
    some channel events."""
    rng = random.Random(t_ns)
    pages = [(i % 2, rng.randbytes(size) if noise else (f"{t_ns}:{i}:".encode() * size)[:size])
             for i in range(n_pages)]  # fmt: skip
    return Batch(pages, events or [], Mark(t_ns, (0, 1), t_ns - MS))


# ---- the ring ---------------------------------------------------------------------------------------------
def test_the_ring_gives_back_the_batches_it_kept_as_they_came() -> None:
    ring = FlightRing(60 * S, 64 << 20)
    ev = NpuEvent(5 * S, "ecc", 0, "dms_event", 1, 0, {"ce_count": 3, "temp_c": 80, "big": 1 << 70, "t": (1, 2)})
    kept = [batch(t * 10 * MS, n_pages=t % 3, events=[ev] if t == 500 else []) for t in range(1, 700)]
    for b in kept:
        ring.add(b)
    got = [b for _, b in ring.batches_since(0)]
    wanted, last = [], 0
    for b in kept:  # a read with data always, a quiet one 100 ms after the last mark kept at the earliest
        if b.pages or b.events or b.mark.read_ns - last >= 100 * MS:
            wanted.append(b)
            last = b.mark.read_ns
    assert len(wanted) < len(kept)
    assert [g.mark for g in got] == [w.mark for w in wanted]
    assert [g.pages for g in got] == [w.pages for w in wanted]
    (with_event,) = [g for g in got if g.events]
    # as a recording stores it: integers msgpack cannot hold as their text, tuples as lists
    assert with_event.events[0].args == {"ce_count": 3, "temp_c": 80, "big": str(1 << 70), "t": [1, 2]}
    since = [b.mark for _, b in ring.batches_since(3 * S)]
    assert since == [w.mark for w in wanted if w.mark.read_ns >= 3 * S]
    assert len(ring.segments) == 7 and all(seg.blob is not None for seg in list(ring.segments)[:-1])


def test_the_time_bound_lets_whole_old_segments_go_and_counts_them() -> None:
    ring = FlightRing(10 * S, 1 << 30)
    for t in range(1, 3001):  # 30 s of reads every 10 ms
        ring.add(batch(t * 10 * MS, n_pages=1, size=512))
    assert ring.oldest_ns is not None and 30 * S - ring.oldest_ns <= 11 * S  # within a segment of the bound
    assert ring.newest_ns == 30 * S
    ev = ring.stats
    assert ev.segments >= 18 and ev.batches == ev.pages > 0 and ev.early_segments == 0
    assert ev.batches + sum(seg.batches for seg in ring.segments) == 3000


def test_the_byte_bound_wins_over_seconds_and_says_so() -> None:
    bound = 2 << 20
    ring = FlightRing(600 * S, bound)
    peak = 0
    for t in range(1, 4001):
        ring.add(batch(t * 5 * MS, n_pages=2, size=4096, noise=True))  # 1.6 MiB/s of incompressible pages
        peak = max(peak, ring.bytes)
    assert peak <= bound + (1 << 20) + 8192  # the bound, and at most the segment being filled beyond it
    assert ring.bytes <= bound
    assert ring.stats.early_segments == ring.stats.segments > 0  # all went before their 600 s were over
    assert ring.oldest_ns is not None and ring.oldest_ns > 1 * S


def test_names_and_counters_annotate_segments_and_evicted_names_fold_into_the_base() -> None:
    ring = FlightRing(2 * S, 1 << 30)
    for t in range(1, 601):
        if ring.add(batch(t * 10 * MS)):
            ring.annotate({str(t): f"proc{t}"}, [["tracefs", "overrun", 0, t]])
    segments, comms, ledger = ring.since(5 * S)
    assert segments[0].last_ns is not None and segments[0].last_ns >= 5 * S
    assert ledger == segments[0].ledger
    assert "1" in comms and all(name not in comms for name in segments[0].comms)  # before the first chosen only
    assert set(ring.base_comms) <= set(comms)


# ---- the incident policy ---------------------------------------------------------------------------------
def timeout(ts: int, dev: int = 0, op: str = "cq_wait") -> Finding:
    return Finding("timeout", dev, op, ts, {})


def reset_finding(dev: int, steps: List[int]) -> Finding:
    return Finding("reset_sequence", dev, "reset", steps[0], {"status": "complete",
                   "steps": [{"step": f"s{i}", "ts_ns": t} for i, t in enumerate(steps)]})  # fmt: skip


def policy(**kw: Any) -> IncidentPolicy:
    args: Dict[str, Any] = {"seconds_ns": 60 * S, "after_ns": 2 * S, "gap_ns": 30 * S, **kw}
    return IncidentPolicy(**args)


def test_a_trigger_opens_a_window_from_seconds_before_it_to_after_it() -> None:
    p = policy()
    assert p.observe([Finding("spike", 0, "halMemAlloc", 90 * S, {})], 91 * S) == []  # not a default kind
    (opened,) = p.observe([timeout(100 * S)], 101 * S)
    assert isinstance(opened, Open)
    inc = opened.incident
    assert (inc.from_ns, inc.requested_from_ns, inc.until_ns) == (40 * S, 40 * S, 102 * S)
    assert p.observe([], 101_900 * MS) == []  # its window is not over
    (closed,) = p.observe([], 102 * S)
    assert isinstance(closed, Close) and closed.reason == "quiet" and closed.incident is inc


def test_one_incident_one_dump_and_an_open_reset_sequence_holds_the_window() -> None:
    p = policy()
    (opened,) = p.observe([timeout(100 * S)], 101 * S)
    assert p.observe([timeout(101 * S, op="mbox"), timeout(101 * S, op="heartbeat")], 102 * S) == []
    # the sequence opens (a trigger itself) and stays open long after every timeout's window
    assert p.observe([], 103 * S, [(0, 103 * S, 103 * S)]) == []
    assert p.observe([], 150 * S, [(0, 103 * S, 149 * S)]) == []
    assert p.observe([reset_finding(0, [103 * S, 149 * S, 160 * S])], 161 * S) == []  # it ended at 160 s: +2 s
    (closed,) = p.observe([], 162 * S)
    assert closed.incident is opened.incident and closed.reason == "quiet" and closed.at_ns == 162 * S
    inc = opened.incident
    assert inc.counts == {"timeout": 2, "heartbeat": 1, "reset": 1} and inc.until_ns == 162 * S
    assert inc.principal.kind == "reset" and inc.principal.device == 0


def test_a_reset_window_closes_after_its_last_step_plus_after() -> None:
    p = policy()
    p.observe([], 50 * S, [(1, 50 * S, 50 * S)])  # the first step opens it
    assert p.incident is not None and p.incident.first.kind == "reset"
    assert p.incident.from_ns == -10 * S  # seconds before the first step (before the session: the ring says)
    assert p.observe([reset_finding(1, [50 * S, 55 * S])], 56 * S) == []  # it ended at 55 s: 2 s more
    (closed,) = p.observe([], 57 * S)
    assert isinstance(closed, Close) and closed.incident.counts == {"reset": 1}


def test_precursors_hold_the_window_for_their_escalation_and_no_longer_once_the_reset_ended() -> None:
    p = policy(after_ns=10 * S)
    (opened,) = p.observe([timeout(100 * S)], 101 * S)
    assert opened.incident.until_ns == 110 * S  # long enough for a heartbeat lost and a reset to join it
    assert p.observe([timeout(103 * S, op="heartbeat")], 104 * S, [(0, 104 * S, 104 * S)]) == []
    assert p.observe([reset_finding(0, [104 * S, 107 * S])], 108 * S) == []
    assert p.incident is not None and p.incident.until_ns == 109 * S  # the reset's end + 2 s, not 113 s
    (closed,) = p.observe([], 109 * S)
    assert isinstance(closed, Close) and closed.incident.counts == {"timeout": 1, "heartbeat": 1, "reset": 1}


def test_the_rate_limit_suppresses_and_counts_triggers_and_the_next_dump_starts_where_the_last_ended() -> None:
    p = policy()
    p.observe([timeout(100 * S)], 101 * S)
    (first,) = p.observe([], 102 * S)
    assert isinstance(first, Close)
    assert p.observe([timeout(110 * S, dev=1)], 111 * S) == []  # within the 30 s gap: suppressed, counted
    assert [t.ts_ns for t in p.just_suppressed] == [110 * S]
    assert p.observe([], 121 * S, [(1, 120 * S, 120 * S)]) == []  # a reset sequence too
    assert p.observe([reset_finding(1, [120 * S, 125 * S])], 126 * S) == []  # its end: no dump either
    assert p.suppressed == {"timeout": 1, "reset": 1} and p.just_suppressed == []
    (opened,) = p.observe([timeout(140 * S, dev=1)], 141 * S)  # the gap is over
    inc = opened.incident
    assert isinstance(opened, Open) and inc.first.ts_ns == 140 * S
    assert inc.from_ns == 102 * S and inc.requested_from_ns == 80 * S  # no repeat of the previous dump
    assert inc.counts == {"timeout": 1}


def test_an_endless_incident_is_cut_at_the_length_bound() -> None:
    p = policy(max_ns=100 * S)
    p.observe([timeout(10 * S)], 11 * S)
    out: List[Any] = []
    for t in range(12, 200, 1):
        out += p.observe([timeout(t * S)], t * S)
    closes = [d for d in out if isinstance(d, Close)]
    assert closes[0].reason == "length_bound" and closes[0].at_ns == 110 * S


def test_dump_now_is_a_window_of_the_last_seconds_unless_a_dump_is_being_written() -> None:
    p = policy()
    p.observe([], 500 * S)
    opened, closed = p.manual(500 * S)
    assert isinstance(opened, Open) and isinstance(closed, Close) and closed.reason == "manual"
    assert (opened.incident.from_ns, opened.incident.until_ns) == (440 * S, 500 * S)
    p.observe([timeout(501 * S)], 502 * S)  # a manual dump sets no rate limit
    assert p.incident is not None and p.manual(502 * S) == []
    assert [type(d) for d in p.finish()] == [Close]


def test_dump_on_kinds() -> None:
    assert parse_kinds("reset, alloc_fail") == ("reset", "alloc_fail")
    assert "spike" in parse_kinds("all")
    with pytest.raises(UsageError, match="unknown kind 'resets'"):
        parse_kinds("resets")
    assert trigger_kind(timeout(1, op="heartbeat")) == "heartbeat"
    assert trigger_kind(Finding("link_degraded", 0, "pcie_link", 1, {})) == "link"
    assert trigger_kind(Finding("leak", 0, None, 1, {})) is None
    p = policy(kinds=("alloc_fail",))
    assert p.observe([timeout(5 * S)], 6 * S, [(0, 5 * S, 5 * S)]) == []  # neither a timeout nor a reset


# ---- names and retention --------------------------------------------------------------------------------
ANCHOR = {"mono_ns": 1000 * S, "realtime_ns": 1_767_225_600 * S}  # mono 1000 s = 2026-01-01T00:00:00Z


def test_dump_names_say_when_which_device_and_what() -> None:
    name = dump_name(1000 * S + 1_234 * MS, 3, "reset", ANCHOR)
    assert name == "flight-20260101T000001.234Z-dev3-reset.npt" and is_dump(name)
    assert dump_name(1000 * S, None, "manual", ANCHOR) == "flight-20260101T000000.000Z-nodev-manual.npt"
    taken = [name, name[:-4] + "-2.npt.partial"]
    assert dump_name(1000 * S + 1_234 * MS, 3, "reset", ANCHOR, taken).endswith("-dev3-reset-3.npt")
    assert not is_dump("run.npt") and not is_dump(name + ".partial")


def test_retention_removes_the_oldest_dumps_only_and_never_the_newest() -> None:
    def named(sec: int, suffix: str = "") -> str:
        return dump_name((1000 + sec) * S, 0, "timeout", ANCHOR)[:-4] + suffix + ".npt"

    dumps: List[Tuple[str, int]] = [(named(s), 100) for s in (30, 10, 20)] + [("notes.npt", 10**9)]
    dumps.append((named(10, "-2"), 100))
    assert to_remove(dumps, keep=2, keep_bytes=10**6) == [named(10), named(10, "-2")]
    assert to_remove(dumps, keep=10, keep_bytes=250) == [named(10), named(10, "-2")]
    assert to_remove([(named(1), 500)], keep=1, keep_bytes=100, protect=named(1)) == []
