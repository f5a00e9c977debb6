"""Running the detectors over a recording: the replay source feeding `Analysis`, as `check` and `diff` use it."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, TextIO, Tuple

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.op_latency import op_histograms
from npu_trace.device.profiles import PROFILES, Profile, get_profile
from npu_trace.errors import UsageError
from npu_trace.events import UNCOUNTED
from npu_trace.pipeline.batch import Batch
from npu_trace.pipeline.blocks import Block
from npu_trace.sources.replay_source import ReplaySource


class Progress:
    """A one-line progress display on a terminal (stderr); silent otherwise."""

    def __init__(self, total_bytes: int, out: Optional[TextIO] = None) -> None:
        self.total = max(1, total_bytes)
        out = sys.stderr if out is None else out  # the stream of now, not the one when this module was imported
        self.out = out
        self.enabled = out.isatty()
        self.shown = 0.0

    def update(self, done_bytes: int, events: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.shown < 0.2:
            return
        self.shown = now
        frac = min(1.0, done_bytes / self.total)
        bar = "#" * int(frac * 30)
        self.out.write(f"\r[{bar:<30}] {frac * 100:5.1f}%  {events} events")
        self.out.flush()

    def done(self) -> None:
        if self.enabled and self.shown:
            self.out.write("\r" + " " * 60 + "\r")
            self.out.flush()


def profile_for(source: ReplaySource, name: Optional[str]) -> Profile:
    if name:
        return get_profile(name)
    recorded = str(source.header.get("profile", ""))
    if recorded not in PROFILES:
        raise UsageError(f"the recording's profile {recorded!r} is unknown here: name one with --profile")
    return PROFILES[recorded]


# the fast path analyses the released items in blocks of about this many (a block's columns stay in the caches)
BLOCK_ROWS = 1 << 16


def analyze(path: str, profile_name: Optional[str] = None, progress: bool = True) -> Dict[str, Any]:
    """{"analysis": Analysis.finish(), "reading": {...}, "latency": {op: Histogram}, "ecc_times": the health
    detector's `ecc_times()`, "header": the recording's header} for one recording: its blocks
    (`BlockTimeline`) through `Analysis.feed_block` (tests/reference/analyze.py is the same one event at a
    time, which the tests hold it equal to, byte for byte)."""
    source = ReplaySource(path)
    analysis = Analysis(profile_for(source, profile_name), source.scope_filter(), tasks=source.tasks,
                        processes=source.processes)  # fmt: skip
    analysis.memory.leaks_at_end = source.window is None  # a flight dump's end is not the processes' end
    source.only = analysis.mapped_events()  # unmapped events: counted, not decoded
    bar = Progress(os.path.getsize(path) if progress else 0)
    bar.enabled = bar.enabled and progress
    for block, now in blocks_of(source, analysis, BLOCK_ROWS, bar):
        analysis.feed_block(block, now)
    bar.done()
    return finish(source, analysis)


def finish(source: ReplaySource, analysis: Analysis) -> Dict[str, Any]:
    """analyze()'s result once every block was fed."""
    if source.reader.truncated:
        analysis.truncated(source.reader.truncation)
    result = analysis.finish()
    return {"analysis": result, "reading": reading_of(source), "latency": op_histograms(analysis),
            "ecc_times": analysis.health.ecc_times(), "header": source.header}  # fmt: skip


def blocks_of(source: ReplaySource, analysis: Analysis, rows: int, bar: Progress,
              ramp: int = 1) -> Iterator[Tuple[Block, Optional[int]]]:  # fmt: skip
    """The recording as the columnar timeline's blocks of about `rows` rows (check's reading: each recorded
    chunk walked in place), each with the timeline's watermark after it. The events of formats without a rule,
    skipped unread, are counted into `analysis` after each block; `bar` is told the progress. `ramp`: the first
    blocks grow to `rows` in that many steps (rows/ramp, 2 rows/ramp, ...; the export's drawing waits for the
    first block, npu_trace.export.run), and so are the blocks of the last 2 `rows` rows (told from the bytes left
    at the rows read so far per byte): the last block is small (the export's drawing draws it once the
    analysis has ended)."""
    blocks = source.block_timeline()
    skipped, taken, read = 0, 0, 0
    size = os.path.getsize(source.reader.path) if ramp > 1 else 0
    for part in source.parts():
        if isinstance(part, Batch):
            blocks.add(part)
        else:
            blocks.add_chunk(part)
        want = rows * min(taken + 1, ramp) // ramp
        if size:
            at = source.reader_position()
            pending = blocks.pending_rows
            left = (size - at) * (read + pending) // max(at, 1)  # the rows still to read, at the rate so far
            want = rows // ramp if left < 2 * rows else want
        if blocks.pending_rows >= want or blocks.ended:
            taken += 1
            block = blocks.take()
            read += len(block)
            yield block, blocks.now
            analysis.count_unmapped(source.events_skipped - skipped)
            skipped = source.events_skipped
            bar.update(source.reader_position(), source.events_read)
    yield blocks.take(), blocks.now
    analysis.count_unmapped(source.events_skipped - skipped)


def reading_of(source: ReplaySource) -> Dict[str, Any]:
    reader = source.reader
    return {
        "events": source.events_read,
        "channel_events": source.channel_events_read,
        "pages": source.pages_read,
        "schema": reader.schema,
        "profile": source.header.get("profile"),
        "kernel": source.header.get("kernel"),
        "truncated": reader.truncated,
        "truncation": reader.truncation,
        "damaged": list(reader.damaged),
        "lost": source.ledger.total,
        "incomplete": source.ledger.incomplete(),
        "loss": [list(row) for row in source.ledger.rows()],
        "scope": source.scope.header() if not source.scope.empty else None,
        "window": window_of(source),
    }


def gaps(reading: Dict[str, Any]) -> List[str]:
    """What a recording lacks, as reading_of says it: where it is cut, its damaged parts, its losses ([]: none)."""
    out = [f"cut: {reading['truncation']}"] if reading["truncated"] else []
    out += [f"damaged part skipped: {damage}" for damage in reading["damaged"]]
    if reading["incomplete"]:
        counted = f"{reading['lost']} events" if reading["lost"] else "an unknown number of events"
        rows = [f"{s}/{k}/cpu{c}" + (f"={n}" if n else "") for s, k, c, n in reading["loss"] if n or k in UNCOUNTED]
        out.append(f"{counted} lost ({', '.join(rows)})")
    return out


def window_of(source: ReplaySource) -> Optional[Dict[str, Any]]:
    """What a flight recorder's dump says of its window (None for a whole recording): its trigger, where it
    starts and ends and why, what the ring held (the JSON report's `reading.window`)."""
    window = source.window
    if window is None:
        return None
    keys = ("trigger", "from_ns", "requested_from_ns", "held_from_ns", "to_ns", "closed", "seconds", "after_s",
            "batches", "pages", "events")  # fmt: skip
    out = {k: window.get(k) for k in keys}
    incident = window.get("incident")
    if isinstance(incident, dict):
        out["principal"] = incident.get("principal")
        out["triggers"] = incident.get("counts")
    return out
