"""`check`'s analysis of a recording by the reference path: the recording's batches through the reference
timeline (per-record page decoding, the ordered merge of objects) into the reference analysis (one event at a
time). `npu_trace.ci.recording_analysis.analyze` (blocks, columns) is held equal to it, byte for byte."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from npu_trace.ci.recording_analysis import Progress, finish, profile_for
from npu_trace.sources.replay_source import ReplaySource

from .analysis import ReferenceAnalysis
from .timeline import replay_timeline


def analyze(path: str, profile_name: Optional[str] = None, progress: bool = False) -> Dict[str, Any]:
    source = ReplaySource(path)
    analysis = ReferenceAnalysis(profile_for(source, profile_name), source.scope_filter(), tasks=source.tasks,
                                 processes=source.processes)  # fmt: skip
    analysis.memory.leaks_at_end = source.window is None
    source.only = analysis.mapped_events()
    bar = Progress(os.path.getsize(path) if progress else 0)
    timeline, decoders = replay_timeline(source)
    skipped = 0
    for batch in source.batches():
        analysis.feed(timeline.push(batch), timeline.now)
        analysis.count_unmapped(decoders.skipped - skipped)
        skipped = decoders.skipped
        bar.update(source.reader_position(), timeline.events + skipped)
    result = finish(source, analysis)
    result["reading"]["events"] = timeline.events + decoders.skipped  # read by the reference timeline
    return result
