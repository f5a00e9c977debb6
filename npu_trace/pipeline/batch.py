"""What a source hands the pipeline on each read: a `Batch` of raw pages and channel items, and its `Mark`.

A `Mark` is what the source knows after the read: the time the read began (on the trace clock), the CPUs whose
ring buffer it read empty (caught up), and the channels' watermark (no channel item stamped earlier can still
come). The ordered merge (`npu_trace.pipeline.merge`) turns marks into per-stream watermarks; a recording keeps
them beside the pages, so a replay releases events exactly as the live session did.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

# How long after its timestamp an event may still become readable: a ring-buffer writer stamps the event, then
# commits it; a writer interrupted in between (its virtual CPU descheduled, on a busy host) commits late.
# A stream read empty at time T therefore promises only T - COMMIT_MARGIN_NS. Measured on a 2-vCPU VM with
# three CPU hogs beside the simulator on 2 CPUs (7 runs, 1.2 M events): with no margin at all, no event came
# late. At the tracepoint bench's full speed (5 M getpid events at 1.8-1.9 M/s, the reader on the other CPU,
# load 2-4 from other work): with no margin, 11 records came late, up to 0.8 ms; with 2 ms, one 2.2 ms late in
# three runs, and 6 to 23 a run under more load; with 10 ms, none. 10 ms holds 20,000 records at 2 M/s.
COMMIT_MARGIN_NS = 10_000_000


class Mark(NamedTuple):
    read_ns: int  # trace clock (CLOCK_MONOTONIC) just before the read began
    caught_up: Tuple[int, ...]  # CPUs whose last read came back empty
    channels_ns: Optional[int] = None  # the channels' watermark; None: no channels


class Batch(NamedTuple):
    pages: List[Tuple[int, bytes]]  # raw ftrace ring-buffer pages (cpu, page), in read order
    events: List[Any]  # the other channels' items (NpuEvents; TraceEvents and Losses from BPF), time-sorted
    mark: Optional[Mark] = None  # None: nothing new is known of the streams' progress
    final: bool = False  # the source has ended: everything held is released


def empty_batch() -> Batch:
    return Batch([], [])
