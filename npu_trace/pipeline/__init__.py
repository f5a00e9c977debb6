"""The middle of the house: one pump, one ordered merge, one timeline, for live and replay alike.

sources (tracefs, channels, BPF, a recording) -> `Batch`es -> `pump` -> `BlockTimeline` (the page walker, the
ordered merge; `npu_trace.pipeline.blocktimeline`) -> blocks in time order -> the block normalizer and the
detectors (`npu_trace.detectors.Analysis`) and every sink.
"""

from __future__ import annotations

from npu_trace.pipeline.batch import Batch, Mark, empty_batch
from npu_trace.pipeline.merge import CHANNELS
from npu_trace.pipeline.pump import POLL_INTERVAL_S, Sink, Source, pump

__all__ = [
    "CHANNELS",
    "POLL_INTERVAL_S",
    "Batch",
    "Mark",
    "Sink",
    "Source",
    "empty_batch",
    "pump",
]
