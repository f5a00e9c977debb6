"""Decode, then order: a source's batches in, every item in one time order out (what every consumer reads).

`Timeline(decoders)` decodes each batch's pages with the per-CPU page decoders, pushes each CPU's records and
the channels' items into the ordered merge, sets the watermarks that the decoded records and the batch's mark
tell, and returns what the merge releases: TraceEvents and Losses of the trace, NpuEvents (and BPF's
TraceEvents) of the channels, in non-decreasing time (see `npu_trace.pipeline.merge` for ties and bounds).

A CPU's watermark is the timestamp of the last record decoded from it (its next ones cannot be older) and,
once its read came back empty (the mark lists it as caught up), the time that read began less `margin_ns`:
an event stamped before the read but committed to the ring buffer after it (its writer interrupted between
reserve and commit, or its virtual CPU descheduled there) still comes in time.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

from npu_trace.events import LossLedger
from npu_trace.ftrace.decode import CpuDecoders
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS, Batch, Mark
from npu_trace.pipeline.merge import CHANNELS, OrderedMerge

MARGIN_NS = COMMIT_MARGIN_NS


class Timeline:
    def __init__(
        self,
        decoders: Optional[CpuDecoders],
        *,
        margin_ns: int = MARGIN_NS,
        merge: Optional[OrderedMerge] = None,
        ledger: Optional[LossLedger] = None,
        cpus: Iterable[int] = (),
        channels: bool = False,
    ) -> None:
        """`cpus`, `channels`: the streams that exist from the start (the CPUs traced, the other channels), so
        nothing is released before each has told its progress (a recording made before marks existed never
        tells it: its events wait for the bounds or the end)."""
        self.decoders = decoders
        self.margin_ns = margin_ns
        self.merge = merge or OrderedMerge()
        for key in (*cpus, *((CHANNELS,) if channels else ())):
            self.merge.advance(key, -math.inf)
        self.ledger = ledger if ledger is not None else (decoders.ledger if decoders is not None else LossLedger())
        self.events = 0  # trace records decoded (losses not counted)
        self.ended = False

    def push(self, batch: Batch) -> List[Any]:
        """Take one batch; returns the items now released, in time order."""
        if batch.pages:
            self._decode(batch.pages)
        if batch.events:
            self.merge.push(CHANNELS, batch.events)
        if batch.mark is not None:
            self._mark(batch.mark)
        if batch.final:
            self.ended = True
            return self._count(self.merge.flush())
        return self._count(self.merge.release())

    def flush(self) -> List[Any]:
        """Everything still held (the source ended without a final batch)."""
        self.ended = True
        return self._count(self.merge.flush())

    @property
    def now(self) -> Optional[int]:
        """The time up to which everything has been released: the detectors' clock (None before the first)."""
        wm = self.merge.watermark()
        return int(wm) if math.isfinite(wm) else None

    def _decode(self, pages: List[Tuple[int, bytes]]) -> None:
        assert self.decoders is not None, "a batch with pages needs page decoders"
        per_cpu: Dict[int, List[Any]] = {}
        backwards = {}
        for cpu, page in pages:
            out = per_cpu.get(cpu)
            decoder = self.decoders.decoder(cpu)
            if out is None:
                out = per_cpu[cpu] = []
                backwards[cpu] = decoder.backwards
            self.events += decoder.decode(page, out)
        for cpu, items in per_cpu.items():
            decoder = self.decoders.decoder(cpu)
            self.merge.push(cpu, items, ordered=decoder.backwards == backwards[cpu])  # its deltas only add up
            self.merge.advance(cpu, decoder.last_ts)

    def _mark(self, mark: Mark) -> None:
        floor = mark.read_ns - self.margin_ns
        for cpu in mark.caught_up:
            self.merge.advance(cpu, floor)
        if mark.channels_ns is not None:
            self.merge.advance(CHANNELS, mark.channels_ns)

    def _count(self, items: List[Any]) -> List[Any]:
        for loss in self.merge.take_late():
            self.ledger.add(loss)
        return items
