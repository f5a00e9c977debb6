"""The reference analysis: `Analysis` fed one event at a time, by the reference normalizer and the scope's
per-event reference, each detector through its per-event `feed`. The production `Analysis` (a block at a time:
BlockNormalizer, the scope over blocks, the detectors' `feed_block`) is held equal to it, byte for byte."""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.device.profiles import Profile
from npu_trace.events import NpuEvent
from npu_trace.pipeline.blocks import Block
from npu_trace.pipeline.scope import ScopeFilter

from . import scope as ref_scope
from .normalize import Normalizer


class ReferenceAnalysis(Analysis):
    def __init__(self, profile: Profile, scope: Optional[ScopeFilter] = None,
                 tasks: Optional[Mapping[int, int]] = None,
                 processes: Optional[Iterable[int]] = None) -> None:  # fmt: skip
        super().__init__(profile, scope, tasks, processes)
        self.normalizer = Normalizer(profile.mapping)  # type: ignore[assignment]

    def feed(self, items: Sequence[Any], now: Optional[int] = None) -> List[Finding]:
        """The timeline's items, in time order: the trace's TraceEvents and Losses normalized one by one (call
        entries paired with their returns), the other channels' NpuEvents as they are."""
        scope = self.scope
        if scope is not None:
            items = ref_scope.raw(scope, items)
        events, logs = self.normalizer.feed_mapped(items)  # type: ignore[attr-defined]
        if scope is not None:
            events = ref_scope.events(scope, events)
        self.count_unmapped(logs)
        found = self.feed_events(events) if events else []
        return found + self.advance(now) if now is not None else found

    def normalize(self, items: Sequence[Any]) -> List[NpuEvent]:
        scope = self.scope
        if scope is None:
            return self.normalizer.feed(items)  # type: ignore[attr-defined, no-any-return]
        return ref_scope.events(scope, self.normalizer.feed(ref_scope.raw(scope, items)))  # type: ignore[attr-defined]

    def feed_block(self, block: Block, now: Optional[int] = None) -> List[Finding]:
        return self.feed(block.items(), now)
