"""`Analysis`: the Normalizer and every detector, fed raw TraceEvent/Loss batches, ending in a report dict.

The report is a deterministic function of the item sequence, whatever the batch split: time comes only from
event timestamps, findings are totally ordered (`Finding.sort_key`), summaries are built from sorted keys,
and every number is an int.
"""

from __future__ import annotations

import heapq
from collections import Counter
from itertools import compress, count, islice, repeat
from operator import itemgetter, lt
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from npu_trace.detectors.base import Detector, Finding, sort_findings
from npu_trace.detectors.health import HealthDetector
from npu_trace.detectors.latency import LatencyDetector
from npu_trace.detectors.loss import LossDetector
from npu_trace.detectors.memory import MemoryDetector
from npu_trace.detectors.reset import ResetDetector
from npu_trace.detectors.timeouts import TimeoutDetector
from npu_trace.model import Normalizer, NpuEvent
from npu_trace.profiles import Profile


class Analysis:
    """feed(items) -> the findings those items completed; finish() -> {"findings": [...], "summary": {...}}."""

    def __init__(self, profile: Profile) -> None:
        self.normalizer = Normalizer(profile.mapping)
        self.latency = LatencyDetector(profile.latency)  # typed access (histograms) for check/diff
        self.detectors: Dict[str, Detector] = {
            "latency": self.latency,
            "reset": ResetDetector(profile.reset),
            "memory": MemoryDetector(),
            "timeouts": TimeoutDetector(profile.merge_ns),
            "health": HealthDetector(),
            "loss": LossDetector(),
        }
        self.findings: List[Finding] = []
        self.kind_counts: Counter[str] = Counter()
        self.first_ts: Optional[int] = None
        self.last_ts: Optional[int] = None
        self._report: Optional[Dict[str, Any]] = None
        self.hold_ns = profile.hold_ns
        self._held: List[Tuple[int, int, NpuEvent]] = []  # channel events waiting: heap of (ts, arrival, event)
        self._arrival = 0

    def feed(self, items: Sequence[Any]) -> List[Finding]:
        """A batch of raw TraceEvent/Loss items, or a batch of NpuEvents (the other channels': kmsg, uevents,
        npu-smi, bpf), never both in one batch."""
        if items and isinstance(items[0], NpuEvent):
            return self._feed_channel(list(items))
        events, logs = self.normalizer.feed_mapped(items)  # unmapped events: counted as "log", not built
        if logs:
            self.kind_counts["log"] += logs
        return self.feed_trace(events)

    def feed_trace(self, events: List[NpuEvent]) -> List[Finding]:
        """Normalized trace events (a caller that normalizes itself, e.g. to show unmapped events too): the
        held channel events are placed among them as feed() places them."""
        if self._held:
            return self._feed_trace(events)
        return self.feed_events(events)

    # ---- one timeline: the other channels' events wait for the trace to reach their time --------------
    # A channel event (read before the trace in each pass, so it usually comes early) is held until the first
    # trace event later than it, or an event more than `hold_ns` later than it, or the end; then it is used in
    # timestamp order. So a BPF free, a kmsg line or a uevent lands between the trace events around it. These
    # rules look at the sequence of events only: the result does not depend on how it was cut into batches.
    def _feed_channel(self, events: List[NpuEvent]) -> List[Finding]:
        if not self.hold_ns:
            return self.feed_events(events)
        out: List[Finding] = []
        held = self._held
        for ev in events:
            if held and held[0][0] + self.hold_ns < ev.ts_ns:
                out += self._release(ev.ts_ns - self.hold_ns, inclusive=False)
            heapq.heappush(held, (ev.ts_ns, self._arrival, ev))
            self._arrival += 1
        return out

    def _feed_trace(self, events: List[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        held, start, n = self._held, 0, len(events)
        stamps = list(map(_ts_of, events))
        while held and start < n:
            first = held[0][0]
            at = next(compress(count(start), map(lt, repeat(first, n - start), islice(stamps, start, None))), n)
            if at == n:
                break
            out += self.feed_events(events[start:at])
            out += self._release(stamps[at], inclusive=False)
            start = at
        out += self.feed_events(events[start:])
        return out

    def _release(self, upto: int, inclusive: bool = True) -> List[Finding]:
        """Use the held channel events stamped before `upto` (or at it, inclusive), in time order."""
        held, due = self._held, []
        while held and (held[0][0] < upto or (inclusive and held[0][0] == upto)):
            due.append(heapq.heappop(held)[2])
        return self.feed_events(due) if due else []

    def mapped_events(self) -> Set[str]:
        """The "system:name" events the profile maps: every other event is only counted (as "log")."""
        return set(self.normalizer.rules)

    def count_unmapped(self, n: int) -> None:
        """`n` events of formats without a rule, read but not decoded: counted exactly as feed() counts them."""
        if n:
            self.kind_counts["log"] += n

    def feed_events(self, events: List[NpuEvent]) -> List[Finding]:
        """Already-normalized events (sources that produce NpuEvents themselves)."""
        self._count(events)
        new: List[Finding] = []
        for detector in self.detectors.values():
            new.extend(detector.feed(events))
        self.findings.extend(new)
        return sort_findings(new)

    def finish(self) -> Dict[str, Any]:
        """Flush every detector (once) and return the report."""
        if self._report is None:
            if self._held:
                self.findings.extend(self._release(max(ts for ts, _, _ in self._held)))
            for detector in self.detectors.values():
                self.findings.extend(detector.flush())
            findings = [f.to_dict() for f in sort_findings(self.findings)]
            self._report = {"findings": findings, "summary": self.summary()}
        return self._report

    def summary(self) -> Dict[str, Any]:
        by_kind: Dict[str, int] = {}
        for f in self.findings:
            by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
        return {
            "events": {"total": sum(self.kind_counts.values()), "by_kind": dict(sorted(self.kind_counts.items())),
                       "first_ts_ns": self.first_ts, "last_ts_ns": self.last_ts},
            "findings": dict(sorted(by_kind.items())),
            "pairing": dict(sorted(self.normalizer.stats.items())),
            **{name: d.summary() for name, d in sorted(self.detectors.items())},
        }  # fmt: skip

    def _count(self, events: List[NpuEvent]) -> None:
        self.kind_counts.update(map(_kind_of, events))
        timed = [ev.ts_ns for ev in events if ev.kind != "lost" or ev.ts_ns]
        if timed:
            low, high = min(timed), max(timed)
            self.first_ts = low if self.first_ts is None else min(self.first_ts, low)
            self.last_ts = high if self.last_ts is None else max(self.last_ts, high)


_kind_of = itemgetter(1)  # NpuEvent.kind
_ts_of = itemgetter(0)  # NpuEvent.ts_ns
