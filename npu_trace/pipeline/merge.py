"""The ordered merge's rules: items of several streams in, one time-ordered stream out. The production path
implements them over columns (`npu_trace.pipeline.blocktimeline.BlockTimeline`: `release_bound` and `late_key`
are shared with it here); tests/reference/timeline.py holds the per-item merge they are defined by.

Streams: one per CPU of the trace (a CPU's ring buffer hands its records over in time order), and one for the
other channels (kmsg, uevents, npu-smi, BPF: each read is sorted, but one read may hold items older than the
newest of the read before). Each stream has a *watermark*: its promise that no item stamped earlier will
still come from it. An item is released once it is older than every stream's watermark (ts < the minimum),
so nothing released can be overtaken by an item still to come, however the streams were cut into pushes.

Equal timestamps: items stamped alike come out by stream key (CPU 0, 1, ..., then the channels' key, which
is larger), then in the order their stream delivered them. The output is thus a function of each stream's
own item sequence, not of how the streams were cut into pushes or interleaved.

Items without a time (stamped 0: e.g. a `Loss` of counters taken at a file rotation) are passed on at the
front of the next release.

Bounds (memory stays bounded whatever a stream does): a stream whose watermark stops (a stalled CPU, a hung
npu-smi poll) holds the others back at most `max_lag_ns` behind the most advanced watermark, and at most
`max_held` items in all; past a bound, release goes on without it. An item that then arrives older than what
was already released is never emitted out of order: it is dropped and counted as a `Loss` of kind "late"
(source "tracefs" and its CPU for trace records, the item's channel otherwise), which the next release
carries at its front. A `Loss` that arrives late is not dropped (it is itself the count of events lost, and
the ledger holds it already): it goes to the front of the next release, as an untimed item does.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Tuple

CHANNELS = 1 << 20  # the key of the channels' stream: after every CPU
MAX_HELD = 2_000_000  # items held in all before release goes past the slowest stream
MAX_LAG_NS = 10_000_000_000  # how far the slowest watermark may trail the most advanced one


def release_bound(watermarks: Sequence[float], released: float, max_lag_ns: int, held: int, max_held: int,
                  cut: Callable[[int], float]) -> Tuple[float, int]:  # fmt: skip
    """Where release may go now: the lowest watermark, but at most `max_lag_ns` behind the highest and, with
    more than `max_held` items held, past the oldest half of them (`cut(count)`: a time before which about
    `count` held items lie). (the point, how many of the bounds were reached)."""
    if not watermarks:
        return released, 0
    low, high = min(watermarks), max(watermarks)
    forced = 0
    if high - low > max_lag_ns:
        low = high - max_lag_ns
        forced += 1
    if held > max_held:
        low = max(low, cut(held - max_held // 2))
        forced += 1
    return low, forced


def late_key(key: int, item: Any) -> Tuple[str, int]:
    """Where a late item is counted: a trace record by its CPU, a channel's item by its source."""
    if key < CHANNELS:
        return ("tracefs", key)
    args = getattr(item, "args", None)
    source = args.get("source") if isinstance(args, dict) else None
    return (str(source or "channels"), -1)
