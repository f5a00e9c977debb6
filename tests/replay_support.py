"""A recording's items, every one, in the timeline's order, as objects (for assertions on what a run recorded)."""

from __future__ import annotations

from typing import Any, List

from npu_trace.sources.replay_source import ReplaySource


def replayed_items(source: ReplaySource) -> List[Any]:
    """Every item of the recording in one time order, as the block timeline releases them (not paced)."""
    timeline = source.block_timeline()
    out: List[Any] = []
    for batch in source.batches():
        out += timeline.push(batch).items()
    return out
