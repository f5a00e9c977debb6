"""The ordered merge: items of several streams in, one time-ordered stream out.

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
carries at its front.
"""

from __future__ import annotations

import math
from itertools import chain, islice
from operator import attrgetter, le
from typing import Any, Callable, Dict, List, Sequence, Tuple

from npu_trace.events import Loss

CHANNELS = 1 << 20  # the key of the channels' stream: after every CPU
MAX_HELD = 2_000_000  # items held in all before release goes past the slowest stream
MAX_LAG_NS = 10_000_000_000  # how far the slowest watermark may trail the most advanced one
_ts = attrgetter("ts_ns")  # TraceEvent, NpuEvent and Loss all carry it


class _Stream:
    __slots__ = ("items", "last", "ordered", "wm")

    def __init__(self) -> None:
        self.items: List[Any] = []
        self.last = -math.inf  # the latest stamp held
        self.ordered = True  # the held items are in time order
        self.wm = -math.inf

    def add(self, items: List[Any], ascending: bool, first: int, last: int) -> None:
        if self.ordered and (not ascending or first < self.last):
            self.ordered = False
        self.items += items
        if last > self.last:
            self.last = last

    def take(self, upto: float) -> List[Any]:
        """The held items stamped before `upto` (in time order, arrival order among equals)."""
        items = self.items
        if not self.ordered:
            items.sort(key=_ts)  # stable: arrival order among equal stamps
            self.ordered = True
        cut = len(items) if upto == math.inf else _bisect(items, upto)
        if not cut:
            return []
        taken = items[:cut]
        del items[:cut]
        if not items:
            self.last = -math.inf
        return taken


def _bisect(items: List[Any], upto: float) -> int:
    """The number of (time-ordered) items stamped before `upto`."""
    lo, hi = 0, len(items)
    if hi and _ts(items[-1]) < upto:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if _ts(items[mid]) < upto:
            lo = mid + 1
        else:
            hi = mid
    return lo


class OrderedMerge:
    """push(key, items) / advance(key, watermark) as streams deliver; release() -> the items now in order."""

    def __init__(self, max_held: int = MAX_HELD, max_lag_ns: int = MAX_LAG_NS) -> None:
        self.max_held = max_held
        self.max_lag_ns = max_lag_ns
        self.streams: Dict[int, _Stream] = {}
        self.released: float = -math.inf  # everything stamped before this has been released
        self.held = 0
        self.late: Dict[Tuple[str, int], int] = {}  # (source, cpu) -> items dropped as late
        self.forced = 0  # releases that went past a stream's watermark (a bound was reached)
        self._front: List[Any] = []  # untimed items and late losses: the next release starts with them
        self._late_losses: List[Loss] = []  # the late losses of the last release (take_late)

    def _stream(self, key: int) -> _Stream:
        st = self.streams.get(key)
        if st is None:
            st = self.streams[key] = _Stream()
        return st

    def push(self, key: int, items: List[Any], ordered: bool = False) -> None:
        """Items of stream `key` in the order it delivered them; `ordered`: the caller knows they are in time
        order (a CPU's records: the ring buffer's deltas never go back), so nothing is checked item by item."""
        if not items:
            return
        if ordered:
            first, last, ascending = _ts(items[0]), _ts(items[-1]), True
        else:
            stamps = list(map(_ts, items))
            ascending = _ascending(stamps)
            first, last = (stamps[0], stamps[-1]) if ascending else (min(stamps), max(stamps))
        if first < self.released or not first:  # late items, or untimed ones (stamped 0): set apart
            items = self._sift(key, items)
            if not items:
                return
            stamps = list(map(_ts, items))
            ascending, first, last = _ascending(stamps), min(stamps), max(stamps)
        self._stream(key).add(items, ascending, first, last)
        self.held += len(items)

    def _sift(self, key: int, items: List[Any]) -> List[Any]:
        """Set untimed items aside for the front, drop (and count) late ones; the rest stays."""
        keep = []
        for item in items:
            ts = _ts(item)
            if not ts:
                self._front.append(item)
            elif ts < self.released:
                where = late_key(key, item)
                self.late[where] = self.late.get(where, 0) + 1
            else:
                keep.append(item)
        return keep

    def advance(self, key: int, watermark: float) -> None:
        """Stream `key` will deliver nothing stamped before `watermark` (a watermark never moves back)."""
        st = self._stream(key)
        if watermark > st.wm:
            st.wm = watermark

    def watermark(self) -> float:
        """Where release stands: every item stamped before it has been released (-inf before the first)."""
        return self.released

    def release(self) -> List[Any]:
        """The held items that no stream can still precede, in time order (see the module docstring)."""
        return self._release(self._bound())

    def flush(self) -> List[Any]:
        """Everything held, in order (the end of the session)."""
        return self._release(math.inf)

    def _bound(self) -> float:
        low, forced = release_bound([st.wm for st in self.streams.values()], self.released, self.max_lag_ns,
                                    self.held, self.max_held, self._cut)  # fmt: skip
        self.forced += forced
        return low

    def _cut(self, count: int) -> float:
        """A time before which about `count` of the held items lie (the oldest first)."""
        stamps = sorted(map(_ts, chain.from_iterable(st.items for st in self.streams.values())))  # runs: fast
        return stamps[min(count, len(stamps)) - 1] + 1 if stamps else self.released

    def _release(self, upto: float) -> List[Any]:
        out = self._take_front()
        if upto <= self.released and upto != math.inf:
            return out
        parts = [st.take(upto) for _, st in sorted(self.streams.items()) if st.items]
        parts = [p for p in parts if p]
        if upto > self.released:
            self.released = upto
        if not parts:
            return out
        for items in parts:
            self.held -= len(items)
        merged = parts[0] if len(parts) == 1 else _merge_runs(parts)
        return out + merged if out else merged

    def _take_front(self) -> List[Any]:
        front, self._front = self._front, []
        if self.late:
            base = int(self.released) if math.isfinite(self.released) else 0
            losses = [Loss(source, cpu, "late", n, base) for (source, cpu), n in sorted(self.late.items())]
            self._late_losses += losses
            front += losses
            self.late = {}
        return front

    def take_late(self) -> List[Loss]:
        """The "late" losses released since the last call (for a loss ledger)."""
        losses, self._late_losses = self._late_losses, []
        return losses


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


def _ascending(stamps: List[int]) -> bool:
    return all(map(le, stamps, islice(stamps, 1, None)))


def _merge_runs(parts: List[List[Any]]) -> List[Any]:
    """Sorted runs (one per stream, in stream-key order) -> one sorted list: equal stamps keep the stream
    order, then the arrival order. Runs that do not overlap in time are only put one after the other."""
    bounds = sorted((_ts(p[0]), i) for i, p in enumerate(parts))
    order = [i for _, i in bounds]
    if all(_ts(parts[a][-1]) < _ts(parts[b][0]) or (_ts(parts[a][-1]) == _ts(parts[b][0]) and a < b)
           for a, b in zip(order, order[1:])):  # fmt: skip
        return list(chain.from_iterable(parts[i] for i in order))
    out = list(chain.from_iterable(parts))
    out.sort(key=_ts)  # stable: parts are in stream-key order, each in arrival order
    return out


def late_key(key: int, item: Any) -> Tuple[str, int]:
    """Where a late item is counted: a trace record by its CPU, a channel's item by its source."""
    if key < CHANNELS:
        return ("tracefs", key)
    args = getattr(item, "args", None)
    source = args.get("source") if isinstance(args, dict) else None
    return (str(source or "channels"), -1)
