"""The middle of the house: one pump, one ordered merge, one timeline, for live and replay alike.

sources (tracefs, channels, BPF, a recording) -> `Batch`es -> `pump` -> `Timeline` (decode, ordered merge)
-> items in time order -> normalization and detectors (`npu_trace.detectors.Analysis`) and sinks.
"""

from __future__ import annotations

from npu_trace.pipeline.batch import Batch, Mark, empty_batch
from npu_trace.pipeline.merge import CHANNELS, OrderedMerge
from npu_trace.pipeline.pump import POLL_INTERVAL_S, Sink, Source, pump
from npu_trace.pipeline.timeline import MARGIN_NS, Timeline

__all__ = [
    "CHANNELS",
    "MARGIN_NS",
    "POLL_INTERVAL_S",
    "Batch",
    "Mark",
    "OrderedMerge",
    "Sink",
    "Source",
    "Timeline",
    "empty_batch",
    "pump",
]
