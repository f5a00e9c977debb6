"""A live batch into a recording, as `record` writes it: the one rule every writer of live batches follows.

The other channels' events first (a read's channel events come before its pages), then the pages, then the
read's mark: the mark of every read that brought pages or events, and a quiet read's at most every
`MARK_EVERY_NS`, so that a replay's timeline releases events as the live one did (a little later where quiet
marks were left out). The recorder and the flight recorder's dumps write through it, and the flight ring keeps
the batches this rule keeps (`keeps`), so a dump is what `record` would have written for its window.
"""

from __future__ import annotations

from npu_trace.pipeline.batch import Batch
from npu_trace.recording.writer import RecordingWriter

MARK_EVERY_NS = 100_000_000  # a quiet read's mark is kept at most this often (one with data: always)


def keeps(batch: Batch, last_mark_ns: int) -> bool:
    """The batch has something a recording keeps: pages, events, or a quiet mark due (`last_mark_ns`: the
    time of the last mark kept)."""
    mark = batch.mark
    return bool(batch.pages or batch.events) or (mark is not None and mark.read_ns - last_mark_ns >= MARK_EVERY_NS)


class BatchWriter:
    """Writes batches into one RecordingWriter; counts what it wrote."""

    def __init__(self, writer: RecordingWriter) -> None:
        self.writer = writer
        self.mark_ns = 0  # the last mark written
        self.pages = 0
        self.events = 0
        self.batches = 0
        self.first_ns: int = -1  # the first and last mark written (-1: none yet)
        self.last_ns: int = -1

    def __call__(self, batch: Batch) -> None:
        writer = self.writer
        if batch.events:  # the other channels' events: before the pages read after them
            writer.add_events(batch.events)
            self.events += len(batch.events)
        for cpu, page in batch.pages:
            writer.add_page(cpu, page)
        self.pages += len(batch.pages)
        mark = batch.mark
        if mark is not None and keeps(batch, self.mark_ns):
            writer.add_mark(mark)
            self.mark_ns = self.last_ns = mark.read_ns
            if self.first_ns < 0:
                self.first_ns = mark.read_ns
        self.batches += 1
