"""`Analysis`: the block normalizer and every detector, fed the timeline's blocks in time order, ending in a report.

The report is a deterministic function of the item sequence, whatever the batch split and however often time
was advanced: time comes only from event timestamps and the timeline's watermarks, findings are totally
ordered (`Finding.sort_key`), summaries are built from sorted keys, and every number is an int.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

import numpy as np

from npu_trace.detectors.accounting import AccountingDetector
from npu_trace.detectors.base import Detector, Finding, sort_findings
from npu_trace.detectors.faults import AppErrorDetector, FaultDetector
from npu_trace.detectors.health import HealthDetector
from npu_trace.detectors.latency import LatencyDetector
from npu_trace.detectors.links import explain
from npu_trace.detectors.loss import LossDetector
from npu_trace.detectors.memory import MemoryDetector
from npu_trace.detectors.processes import Processes
from npu_trace.detectors.reset import ResetDetector
from npu_trace.detectors.states import DeviceStateDetector
from npu_trace.detectors.timeouts import TimeoutDetector
from npu_trace.device.profiles import Profile
from npu_trace.events import NpuEvent
from npu_trace.pipeline.blocks import Block, objects_block
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.scope import ScopeFilter, scoped
from npu_trace.pipeline.vnormalize import KIND_CODE, BlockNormalizer, NormBlock, kind_counts, kind_in, time_span


class Analysis:
    """feed(items) -> the findings those items completed; advance(now) -> those time completed;
    finish() -> {"findings": [...], "summary": {...}}."""

    def __init__(self, profile: Profile, scope: Optional[ScopeFilter] = None,
                 tasks: Optional[Mapping[int, int]] = None,
                 processes: Optional[Iterable[int]] = None) -> None:  # fmt: skip
        """`scope`: the pipeline's part of what the trace was scoped to (npu_trace.pipeline.scope), applied
        around normalization; None or an inactive one: every event is analysed. `tasks`: thread id -> its
        process at the start (a session's `tasks`, a recording's header `extra.tasks`), `processes` the
        processes then (None: not known): what is said per process adds its threads up, the threads started
        later told by the trace's own newtask events (npu_trace.detectors.processes)."""
        self.normalizer = Normalizer(profile.mapping)
        self._scope = scope
        # typed, for their read-only views (check, diff, the TUI's collector, exporters)
        self.latency = LatencyDetector(profile.latency)
        self.reset = ResetDetector(profile.reset)
        self.processes = Processes(tasks, processes)  # fed before the detectors that read it (both paths)
        self.memory = MemoryDetector(self.processes)
        # npu-smi against the traced bytes (of the processes the trace saw start)
        self.accounting = AccountingDetector(self.memory.process_bytes, self.processes.whole_life)
        self.states = DeviceStateDetector(profile.reset)
        self._timeouts = TimeoutDetector(profile.merge_ns)
        self.health = HealthDetector()
        self.block_normalizer = BlockNormalizer(self.normalizer)  # over its rules and call pairing
        self._last_seen = 0  # the latest stamp of the items fed as blocks
        self.detectors: Dict[str, Detector] = {
            "processes": self.processes,
            "latency": self.latency,
            "reset": self.reset,
            "memory": self.memory,
            "accounting": self.accounting,
            "timeouts": self._timeouts,
            "health": self.health,
            "loss": LossDetector(),
            "states": self.states,
            "faults": FaultDetector(),
            "app_errors": AppErrorDetector(),
        }
        self.findings: List[Finding] = []
        self.kind_counts: Counter[str] = Counter()
        self.first_ts: Optional[int] = None
        self.last_ts: Optional[int] = None
        self.now: Optional[int] = None  # the latest time advance() was told
        self._report: Optional[Dict[str, Any]] = None

    def begin_tasks(self, tasks: Optional[Mapping[int, int]], processes: Optional[Iterable[int]]) -> None:
        """The tasks alive when tracing began, for an analysis made before its session started (the TUI's
        worker): as `tasks` and `processes` of __init__, before anything is fed."""
        self.processes.begin(tasks, processes)

    @property
    def scope(self) -> Optional[ScopeFilter]:
        """The scope filter when it has work (a live session's becomes active once it started)."""
        scope = self._scope
        return scope if scope is not None and scope.active else None

    def feed(self, items: Sequence[Any], now: Optional[int] = None) -> List[Finding]:
        """Items as objects, in time order (TraceEvents decoded elsewhere, Losses, the other channels'
        NpuEvents): as a block of objects (`feed_block`). `now`: the timeline's watermark after them."""
        return self.feed_block(objects_block(items), now)

    def advance(self, now: Optional[int]) -> List[Finding]:
        """Time has reached `now` (the timeline's watermark: nothing earlier is still to come), events or
        not: the detectors judge what time alone completes (an overdue reset step, a timeout's merge window)."""
        if now is None or (self.now is not None and now <= self.now):
            return []
        self.now = now
        new: List[Finding] = []
        for detector in self.detectors.values():
            new.extend(detector.advance(now))
        self.findings.extend(new)
        return sort_findings(new)

    def truncated(self, where: str) -> None:
        """The input ended before its end (a recording cut by a crash): evidence as incomplete as a lossy
        trace, said as a finding at the last event's time, before finish()."""
        details = {"where": where, "last_ts_ns": self.last_ts}
        self.findings.append(Finding("truncated", None, "recording", self.last_ts or 0, details))

    def mapped_events(self) -> Set[str]:
        """The "system:name" events the profile maps: every other event is only counted (as "log")."""
        return set(self.normalizer.rules)

    def count_unmapped(self, n: int) -> None:
        """`n` events of formats without a rule, read but not decoded: counted exactly as feed() counts them
        (out of a device scope: they name no device)."""
        if not n:
            return
        if self.scope is not None and self.scope.devices:
            self.scope.dropped["device"] += n
        else:
            self.kind_counts["log"] += n

    def normalize(self, items: Sequence[Any]) -> List[NpuEvent]:
        """Items as objects, as the detectors see them, unmapped ones included (as "log" events): normalized and
        scoped, not fed (a consumer that shows them first, then calls feed_events)."""
        nb = self.normalize_block(objects_block(items))
        return [nb.event(i) for i in range(len(nb))]

    # ---- the path: a whole block at once -----------------------------------------------------------------
    def feed_block(self, block: Block, now: Optional[int] = None) -> List[Finding]:
        """The timeline's items as a columnar block (`npu_trace.pipeline.blocks`): what feeding them one by one
        would do (same counts, pairings, findings and summaries: tests/reference/analysis.py is that), with
        arrays for the events that come by the hundred thousand (calls, tasks, IRQs, memory) and objects only
        for the rare ones."""
        if not len(block):
            return self.advance(now) if now is not None else []
        return self.feed_normalized(self.normalize_block(block), now)

    def normalize_block(self, block: Block) -> NormBlock:
        """A block normalized (pairing state carried from block to block) and scoped, not yet fed: the TUI's
        views read it too."""
        scope = self.scope
        if scope is None:
            return self.block_normalizer.normalize(block)
        return scoped(scope, block, self.block_normalizer.normalize)

    def feed_normalized(self, nb: NormBlock, now: Optional[int] = None) -> List[Finding]:
        """A normalized block to the detectors (see feed_block)."""
        if not len(nb):
            return self.advance(now) if now is not None else []
        block = nb.block
        previous, self._last_seen = self._last_seen, int(block.ts[-1])
        self._count_block(nb)
        new = self.latency.feed_block(nb)
        rare = np.flatnonzero(~nb.counted_only & ~kind_in(nb.kind, HOT_CODES))
        events = [nb.event(r) for r in rare.tolist()]
        new += self._feed_memory(nb, rare, events)
        new += self._feed_rare(nb, rare, events, previous)
        self.findings.extend(new)
        found = sort_findings(new)
        return found + self.advance(now) if now is not None else found

    def _feed_memory(self, nb: NormBlock, rows: np.ndarray, events: List[NpuEvent]) -> List[Finding]:
        """The memory detector's rows of the block, and the accounting detector's rare events: the memory
        detector is fed up to each event the accounting one reads its counts at (an npu-smi reading, an
        allocation failure), as feed() would have fed it every event before that one."""
        out: List[Finding] = []
        lo, done = 0, 0
        for i, ev in enumerate(events):
            if self.accounting.needs_memory(ev):
                out += self.memory.feed_block(nb, lo, int(rows[i]))
                self.processes.feed(events[done : i + 1])  # the threads started before the reading, as feed()
                out += self.accounting.feed(events[done : i + 1])
                lo, done = int(rows[i]), i + 1
        out += self.memory.feed_block(nb, lo) if lo else self.memory.feed_block(nb)
        self.processes.feed(events[done:])
        return out + self.accounting.feed(events[done:])

    def _feed_rare(self, nb: NormBlock, rows: np.ndarray, events: List[NpuEvent], previous: int) -> List[Finding]:
        """The rare events (resets, timeouts, ECC, health, loss, failures) as objects, in order. The detectors
        that judge by time (a reset's overdue step, a timeout's merge window, a device's stalled reset) also
        get the stamps of the items between them, as feed() would have shown them every item."""
        stamps = nb.block.ts
        last = int(stamps[-1])
        before = [int(stamps[r - 1]) if r else previous for r in rows.tolist()]
        out = self._timeouts.feed_sparse(events, before, last)
        for detector in self.detectors.values():
            if detector is not self._timeouts and detector not in (self.latency, self.memory, self.accounting,
                                                                   self.processes):  # fmt: skip
                out += detector.feed(events)  # a detector reads no hot kind (see detectors.base)
                out += detector.advance(last)
        return out

    def _count_block(self, nb: NormBlock) -> None:
        for kind, n in kind_counts(nb).items():
            self.kind_counts[kind] += n
        span = time_span(nb)
        if span is not None:
            low, high = span
            self.first_ts = low if self.first_ts is None else min(self.first_ts, low)
            self.last_ts = high if self.last_ts is None else max(self.last_ts, high)

    def feed_events(self, events: List[NpuEvent]) -> List[Finding]:
        """Already-normalized events (sources that produce NpuEvents themselves)."""
        self._count(events)
        new: List[Finding] = []
        for part in self._parts(events):
            for detector in self.detectors.values():
                new.extend(detector.feed(part))
        self.findings.extend(new)
        return sort_findings(new)

    def _parts(self, events: List[NpuEvent]) -> List[List[NpuEvent]]:
        """`events` cut after each one the accounting detector reads the memory detector's counts at (so the
        memory detector has seen every event before it); one part when there is none."""
        cuts = [i + 1 for i, ev in enumerate(events) if self.accounting.needs_memory(ev)]
        if not cuts:
            return [events]
        bounds = [0, *cuts, len(events)]
        return [events[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]

    def finish(self) -> Dict[str, Any]:
        """Flush every detector (once) and return the report."""
        if self._report is None:
            for detector in self.detectors.values():
                self.findings.extend(detector.flush())
            self.findings = explain(sort_findings(self.findings))  # which driver finding explains an app's error
            findings = [f.to_dict() for f in self.findings]
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
            **({"scope": self._scope.summary()} if self._scope is not None and not self._scope.scope.empty else {}),
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
HOT = ("call", "irq", "submit", "complete", "alloc", "free")  # the kinds taken as columns, never one by one
HOT_CODES = [KIND_CODE[k] for k in HOT]
