"""The flight recorder beside a live analysis: one pump sink that keeps the raw batches (`FlightRecorder`),
analyses them (`BlockTimeline` -> `Analysis.feed_block`) and lets the findings decide the dumps.

`record --flight` runs it; so may any long-running consumer that has no analysis of its own. A consumer that
has one (the agent: metrics from its own `Analysis`) feeds the `FlightRecorder` itself instead: every raw
batch to `flight(batch)`, and after each `analysis.feed_block(...)` call `judge_analysis(flight, analysis,
found, now)`; `flight.tasks = analysis_tasks(analysis)` gives the dumps the analysis's thread -> process map.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.pipeline.batch import Batch
from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.sinks.flight.flight_recorder import FlightRecorder
from npu_trace.sinks.flight.incident_policy import OpenReset
from npu_trace.sources.procs import TaskSnapshot

ANALYSE_EVERY_NS = 100_000_000  # the analysis takes the timeline's released items this often (trace time)
ANALYSE_ROWS = 1 << 16  # ... or once this many are waiting


def open_resets(analysis: Analysis) -> List[OpenReset]:
    """The analysis's reset sequences still open: (device, first step's time, last step's time)."""
    return [(s.dev, s.first_ts, s.steps[-1][1] if s.steps else s.first_ts) for s in analysis.reset.open_sequences()]


def analysis_tasks(analysis: Analysis) -> Callable[[], TaskSnapshot]:
    """The thread -> process map `analysis` holds, when asked (a FlightRecorder's `tasks`: its dumps' headers)."""
    return lambda: TaskSnapshot(analysis.processes.threads(), analysis.processes.processes())


def judge_analysis(flight: FlightRecorder, analysis: Analysis, found: Sequence[Finding], now: Optional[int]) -> None:
    """What one `feed_block`/`feed`/`advance` of `analysis` returned (`found`) at its clock `now`, and the reset
    sequences it holds open, to the flight recorder."""
    flight.judge(found, now, open_resets(analysis))


class LiveFlight:
    """A pump sink: each batch into the flight recorder, then into the columnar timeline; about every 100 ms of
    trace time what the timeline released goes to the analysis (`Analysis.feed_block`: a block costs about a
    millisecond whatever its size, so not one per 5-ms read), whose findings and open reset sequences the
    recorder judges by the timeline's watermark. The analysis keeps no findings list (this session makes no
    final report): its memory stays bounded however long it runs."""

    def __init__(self, flight: FlightRecorder, blocks: BlockTimeline, analysis: Analysis) -> None:
        self.flight = flight
        self.blocks = blocks
        self.analysis = analysis
        flight.tasks = analysis_tasks(analysis)
        self._taken_ns: Optional[int] = None

    def __call__(self, batch: Batch) -> None:
        self.flight(batch)  # first: a dump opened by findings in this batch holds the batch already
        blocks = self.blocks
        blocks.add(batch)
        stamp = batch.mark.read_ns if batch.mark is not None else None
        due = stamp is not None and (self._taken_ns is None or stamp - self._taken_ns >= ANALYSE_EVERY_NS)
        if not (due or batch.final or blocks.pending_rows >= ANALYSE_ROWS):
            return
        self._taken_ns = stamp if stamp is not None else self._taken_ns
        found = self.analysis.feed_block(blocks.take(), blocks.now)
        self.analysis.findings.clear()
        judge_analysis(self.flight, self.analysis, found, blocks.now)
