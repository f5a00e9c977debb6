"""The reference timeline: each CPU's pages decoded record by record (`reference.pages`) and every item ordered
by the per-item merge (`OrderedMerge`), by the rules `npu_trace.pipeline.merge` states. The production path
(`npu_trace.pipeline.blocktimeline.BlockTimeline`: the page walker, columns) is held equal to it: the same
items in the same order, the same losses, the same clock.

`Timeline(decoders)` decodes each batch's pages with the per-CPU page decoders, pushes each CPU's records and
the channels' items into the ordered merge, sets the watermarks that the decoded records and the batch's mark
tell, and returns what the merge releases. A CPU's watermark is the timestamp of the last record decoded from
it and, once its read came back empty (the mark lists it as caught up), the time that read began less
`margin_ns`.
"""

from __future__ import annotations

import math
from itertools import chain, islice
from operator import attrgetter, le
from typing import Any, Dict, Iterable, List, Optional, Tuple

from npu_trace.events import Loss, LossLedger
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS, Batch, Mark
from npu_trace.pipeline.merge import CHANNELS, MAX_HELD, MAX_LAG_NS, late_key, release_bound
from npu_trace.sources.replay_source import ReplaySource

from .pages import CpuDecoders

MARGIN_NS = COMMIT_MARGIN_NS
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
        """Set untimed items and late losses aside for the front, drop (and count) other late ones; the rest
        stays."""
        keep = []
        for item in items:
            ts = _ts(item)
            if not ts or (ts < self.released and isinstance(item, Loss)):
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



class Timeline:
    def __init__(
        self,
        decoders: Optional[CpuDecoders],
        *,
        margin_ns: int = MARGIN_NS,
        merge: Optional[OrderedMerge] = None,
        ledger: Optional[LossLedger] = None,
        cpus: Iterable[int] = (),
        channels: bool = False,
    ) -> None:
        """`cpus`, `channels`: the streams that exist from the start (the CPUs traced, the other channels), so
        nothing is released before each has told its progress (a recording made before marks existed never
        tells it: its events wait for the bounds or the end)."""
        self.decoders = decoders
        self.margin_ns = margin_ns
        self.merge = merge or OrderedMerge()
        for key in (*cpus, *((CHANNELS,) if channels else ())):
            self.merge.advance(key, -math.inf)
        self.ledger = ledger if ledger is not None else (decoders.ledger if decoders is not None else LossLedger())
        self.events = 0  # trace records decoded (losses not counted)
        self.ended = False

    def push(self, batch: Batch) -> List[Any]:
        """Take one batch; returns the items now released, in time order."""
        if batch.pages:
            self._decode(batch.pages)
        if batch.events:
            self.merge.push(CHANNELS, batch.events)
        if batch.mark is not None:
            self._mark(batch.mark)
        if batch.final:
            self.ended = True
            return self._count(self.merge.flush())
        return self._count(self.merge.release())

    def flush(self) -> List[Any]:
        """Everything still held (the source ended without a final batch)."""
        self.ended = True
        return self._count(self.merge.flush())

    @property
    def now(self) -> Optional[int]:
        """The time up to which everything has been released: the detectors' clock (None before the first)."""
        wm = self.merge.watermark()
        return int(wm) if math.isfinite(wm) else None

    def _decode(self, pages: List[Tuple[int, bytes]]) -> None:
        assert self.decoders is not None, "a batch with pages needs page decoders"
        per_cpu: Dict[int, List[Any]] = {}
        backwards = {}
        for cpu, page in pages:
            out = per_cpu.get(cpu)
            decoder = self.decoders.decoder(cpu)
            if out is None:
                out = per_cpu[cpu] = []
                backwards[cpu] = decoder.backwards
            self.events += decoder.decode(page, out)
        for cpu, items in per_cpu.items():
            decoder = self.decoders.decoder(cpu)
            self.merge.push(cpu, items, ordered=decoder.backwards == backwards[cpu])  # its deltas only add up
            self.merge.advance(cpu, decoder.last_ts)

    def _mark(self, mark: Mark) -> None:
        floor = mark.read_ns - self.margin_ns
        for cpu in mark.caught_up:
            self.merge.advance(cpu, floor)
        if mark.channels_ns is not None:
            self.merge.advance(CHANNELS, mark.channels_ns)

    def _count(self, items: List[Any]) -> List[Any]:
        for loss in self.merge.take_late():
            self.ledger.add(loss)
        return items


def replay_timeline(source: ReplaySource, keep_unknown: bool = False) -> Tuple[Timeline, CpuDecoders]:
    """A recording's reference timeline (its formats, its `only`, its ledger) and its page decoders."""
    page_header, table = source.decoder_table()
    decoders = CpuDecoders(page_header, table, source.reader.byteorder, source.ledger, keep_unknown)
    timeline = Timeline(decoders, ledger=source.ledger, cpus=source.trace_cpus(), channels=source.had_channels())
    return timeline, decoders
