"""The agent's pump sink: every batch into the columnar timeline, the analysis run on what it releases, the
findings counted, the metrics' snapshot renewed.

About every 100 ms of trace time (`ANALYSE_EVERY_NS`, by the reads' marks: never one analysis per 5-ms read),
or once 64 Ki rows wait, what the timeline released goes to `Analysis.feed_block` with the timeline's
watermark, so time moves the detectors on while the host is quiet: a reset sequence, a timeout's merge
window, a stalled reset are counted within about a second of their last event, not at the next event. The
findings are counted at once (`MetricsState.count`); the views (histograms, states, memory, health) are read
into a new snapshot about once a second of wall time (`publish_every_s`), and at the end. Memory stays
bounded: the analysis's findings are handed over and dropped, every view it keeps is bounded.

Listeners see everything too: `on_batch(batch)` before the timeline (the flight recorder's ring and dump),
`on_findings(findings, now, analysis)` after each analysis (its triggers), `on_transition(t)` for each
device state change (the agent logs them). Loss counts are the analysis's (what the stream said it lost)
plus the tracefs session's per-CPU counters (overruns, dropped events), read once a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.detectors.op_latency import op_histograms, p99_by_op
from npu_trace.detectors.rules import Rules, evaluate_counts, rule_names
from npu_trace.detectors.states import Transition
from npu_trace.events import LossLedger
from npu_trace.pipeline.batch import Batch
from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.sinks.metrics import MetricsState, Snapshot

ANALYSE_EVERY_NS = 100_000_000
ANALYSE_ROWS = 1 << 16
PUBLISH_EVERY_S = 1.0
NS = 1_000_000_000
KERNEL_LOSS_KINDS = ("overrun", "dropped")  # the session ledger's kernel counters (not in the stream)

OnFindings = Callable[[List[Finding], Optional[int], Analysis], None]


@dataclass
class Listeners:
    on_batch: Optional[Callable[[Batch], None]] = None
    on_findings: Optional[OnFindings] = None
    on_transition: Optional[Callable[[Transition], None]] = None
    on_violation: Optional[Callable[[str, bool], None]] = None  # (rule, now violated) when that changes


@dataclass
class AgentFigures:
    """The agent's own counters (for npu_trace_agent_*), kept by whoever does the work."""

    values: Dict[str, float] = field(default_factory=dict)

    def add(self, key: str, n: float = 1) -> None:
        self.values[key] = self.values.get(key, 0) + n

    def set(self, key: str, value: float) -> None:
        self.values[key] = value


class LiveMetrics:
    def __init__(
        self,
        blocks: BlockTimeline,
        analysis: Analysis,
        state: MetricsState,
        *,
        rules: Rules,
        ledger: Optional[LossLedger] = None,
        update_loss: Optional[Callable[[], None]] = None,
        listeners: Optional[Listeners] = None,
        figures: Optional[AgentFigures] = None,
        info: Sequence[Tuple[str, str]] = (),
        clock: Callable[[], float] = time.monotonic,
        mono_ns: Callable[[], int] = time.monotonic_ns,
        publish_every_s: float = PUBLISH_EVERY_S,
    ) -> None:
        self.blocks = blocks
        self.analysis = analysis
        self.state = state
        self.rules = rules
        self.ledger = ledger
        self.update_loss = update_loss or (lambda: None)
        self.listeners = listeners or Listeners()
        self.figures = figures or AgentFigures()
        self.info = tuple(info)
        self.clock = clock
        self.mono_ns = mono_ns
        self.publish_every_s = publish_every_s
        self.violated: Dict[str, bool] = {}
        self._taken_ns: Optional[int] = None
        self._published = -float("inf")
        self._finished = False

    # ---- the pump's side ------------------------------------------------------------------------------------
    def __call__(self, batch: Batch) -> None:
        if self.listeners.on_batch is not None:
            self.listeners.on_batch(batch)
        blocks = self.blocks
        blocks.add(batch)
        stamp = batch.mark.read_ns if batch.mark is not None else None
        due = stamp is not None and (self._taken_ns is None or stamp - self._taken_ns >= ANALYSE_EVERY_NS)
        if due or batch.final or blocks.pending_rows >= ANALYSE_ROWS:
            self._taken_ns = stamp if stamp is not None else self._taken_ns
            self.analyse()
        if batch.final or self.clock() - self._published >= self.publish_every_s:
            self.publish()

    def analyse(self) -> List[Finding]:
        """What the timeline released, analysed; the findings counted and handed to the listeners."""
        found = self.analysis.feed_block(self.blocks.take(), self.blocks.now)
        self.analysis.findings.clear()  # kept by Analysis for a final report the agent never makes: bounded
        self.state.count(found)
        if self.listeners.on_findings is not None:
            self.listeners.on_findings(found, self.blocks.now, self.analysis)
        for t in self.analysis.states.take_transitions():
            if self.listeners.on_transition is not None:
                self.listeners.on_transition(t)
        return found

    def finish(self) -> Snapshot:
        """After the source's final batch: the findings only the end decides (leaks) counted, the last
        snapshot made."""
        if not self._finished:
            self._finished = True
            report = self.analysis.finish()
            self.state.count(Finding(f["kind"], f["device"], f["op"], f["ts_ns"], f["details"])
                             for f in report["findings"] if f["kind"] != "loss")  # fmt: skip
        return self.publish()

    # ---- figures ----------------------------------------------------------------------------------------------
    def set_rules(self, rules: Rules) -> None:
        """New thresholds (SIGHUP): judged at the next snapshot."""
        self.rules = rules
        self.violated = {k: v for k, v in self.violated.items() if k in dict(rule_names(rules))}

    def lost(self) -> Dict[str, int]:
        """Events lost per source: the stream's losses and the kernel's per-CPU counters."""
        out: Dict[str, int] = {}
        for row in self.analysis.detectors["loss"].summary()["rows"]:
            if row["kind"] != "page_missed":
                out[row["source"]] = out.get(row["source"], 0) + int(row["lost"])
        for source, kind, _cpu, n in self.ledger.rows() if self.ledger is not None else ():
            if kind in KERNEL_LOSS_KINDS:
                out[source] = out.get(source, 0) + n
        return out

    def loss_rows(self) -> int:
        """What check would report as loss findings: each (source, kind, CPU) that lost or flagged anything."""
        rows = self.analysis.detectors["loss"].summary()["rows"]
        n = sum(1 for r in rows if r["lost"] or r["records"])
        kernel = self.ledger.rows() if self.ledger is not None else ()
        return n + sum(1 for _s, kind, _c, count in kernel if kind in KERNEL_LOSS_KINDS and count)

    def publish(self) -> Snapshot:
        self._published = self.clock()
        self.update_loss()
        lost = self.lost()
        self.state.findings[("loss", "")] = self.loss_rows()
        if not self.state.findings[("loss", "")]:
            del self.state.findings[("loss", "")]
        rules = self.judge(lost)
        now = self.blocks.now
        if now is not None:
            self.figures.set("analysed_until_seconds", now / NS)
            self.figures.set("analysis_lag_seconds", max(0, self.mono_ns() - now) / NS)
        return self.state.publish(self.analysis, lost, rules, self.figures.values, self.info)

    def judge(self, lost: Mapping[str, int]) -> List[Tuple[str, bool]]:
        """Every rule in force, and whether what the agent saw since it started violates it."""
        counts: Dict[str, int] = {}
        for (kind, _dev), n in self.state.findings.items():
            counts[kind] = counts.get(kind, 0) + n
        op_counts: Mapping[Tuple[str, str], int] = self.state.by_op
        total = sum(lost.values())
        incomplete = total > 0 or bool(counts.get("loss"))
        health = self.analysis.detectors["health"].summary()["devices"]
        p99 = p99_by_op(op_histograms(self.analysis)) if self.rules.p99_max_ns else {}
        broken = {v.rule for v in evaluate_counts(self.rules, counts, op_counts, p99, total, incomplete, health)}
        out = []
        for rule, _ in rule_names(self.rules):
            now = rule in broken
            if self.violated.get(rule, False) != now and self.listeners.on_violation is not None:
                self.listeners.on_violation(rule, now)
            self.violated[rule] = now
            out.append((rule, now))
        return out
