"""`replay --headless` by the reference path: the recording's batches through the reference timeline (records
decoded one by one, those of an event no format describes kept as their bytes), the recording's scope applied
one event at a time, each released item printed by the reference printer. The production `replay` (blocks,
text from the columns) is held equal to it, byte for byte."""

from __future__ import annotations

import io
from typing import Tuple

from npu_trace.device.profiles import PROFILES
from npu_trace.sources.replay_source import ReplaySource

from .scope import RawScope
from .text import StreamPrinter
from .timeline import replay_timeline


def replay_lines(path: str, fmt: str) -> Tuple[str, int, int]:
    """(what `replay --headless --format FMT` prints, the trace records read, those shown by their fields)."""
    source = ReplaySource(path)
    timeline, _ = replay_timeline(source, keep_unknown=True)
    scope = source.scope_filter()
    profile = PROFILES.get(str(source.header.get("profile", "")))
    keep = RawScope(scope, profile.mapping) if scope.active and profile is not None else None
    out = io.StringIO()
    printer = StreamPrinter(out, fmt, source.comm, source.reader.kernel_text())
    for batch in source.batches():
        items = timeline.push(batch)
        printer.write_batch(keep.keep(items) if keep is not None else items)
    printer.write_batch(timeline.flush())
    return out.getvalue(), timeline.events, printer.unformatted
