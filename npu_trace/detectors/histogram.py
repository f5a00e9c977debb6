"""A log-linear latency histogram (HDR-like): bounded memory, < 0.4% error on any percentile.

Values below 128 ns have a bucket each; above, every power of two is split into 128 equal buckets, so a
bucket is at most 1/128 of its lower bound wide and the reported midpoint is within 1/256 (0.4%) of any
value in it. A u64 range needs at most ~7,300 buckets; a histogram keeps the range it has seen. min and max
are exact.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Optional, Tuple

import numpy as np

SUB_BITS = 7
SUB = 1 << SUB_BITS  # 128


def bucket_index(value: int) -> int:
    if value < SUB:
        return max(value, 0)
    shift = value.bit_length() - SUB_BITS - 1
    return shift * SUB + (value >> shift)


def bucket_indices(values: np.ndarray) -> np.ndarray:
    """`bucket_index` of every value (int64), exactly: the bit length from the float's exponent, corrected
    where rounding to a double carried a value up to the next power of two (never a float log)."""
    v: np.ndarray = values.astype(np.int64)
    out = np.maximum(v, 0)
    big = v >= SUB
    if big.any():
        b = v[big]
        length = np.minimum(np.frexp(b.astype(np.float64))[1].astype(np.int64), 63)
        length -= np.left_shift(np.int64(1), length - 1) > b  # 2**(length - 1) <= b: the exact bit length
        shift = length - SUB_BITS - 1
        out[big] = shift * SUB + (b >> shift)
    return out


def bucket_bounds(index: int) -> Tuple[int, int]:
    """[low, high] of the values in bucket `index`."""
    if index < 2 * SUB:
        return index, index
    shift = index // SUB - 1
    low = (index - shift * SUB) << shift
    return low, low + (1 << shift) - 1


class Histogram:
    """Counts per bucket in one array over the range of buckets seen (a latency distribution spans a few
    hundred), so a block's samples are added in a few array operations; `buckets` is the sparse view."""

    __slots__ = ("_base", "_counts", "count", "max", "min", "total")

    def __init__(self) -> None:
        self._base = 0  # the bucket index of _counts[0]
        self._counts: np.ndarray = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    @property
    def buckets(self) -> Dict[int, int]:
        """{bucket index: samples} of the buckets that hold any."""
        at = np.flatnonzero(self._counts)
        return dict(zip((at + self._base).tolist(), self._counts[at].tolist()))

    def _cover(self, low: int, high: int) -> None:
        """Make room for bucket indexes low..high."""
        n = len(self._counts)
        if n and self._base <= low and high < self._base + n:
            return
        base = min(low, self._base) if n else low
        top = max(high, self._base + n - 1) if n else high
        counts: np.ndarray = np.zeros(top - base + 1, dtype=np.int64)
        counts[self._base - base : self._base - base + n] = self._counts
        self._base, self._counts = base, counts

    def add(self, value: int) -> None:
        idx = bucket_index(value)
        self._cover(idx, idx)
        self._counts[idx - self._base] += 1
        if not self.count or value < self.min:
            self.min = value
        self.max = max(self.max, value)
        self.count += 1
        self.total += value

    def percentile(self, q: float) -> int:
        """The value at rank ceil(q * count) (0 < q <= 1), as its bucket's midpoint clamped to [min, max]."""
        if not self.count:
            return 0
        rank = max(1, math.ceil(round(q * self.count, 9)))
        at = int(np.searchsorted(np.cumsum(self._counts), rank))  # the first bucket where the ranks reach it
        if at >= len(self._counts):
            return self.max
        low, high = bucket_bounds(at + self._base)
        return min(max((low + high) // 2, self.min), self.max)

    def add_all(self, values: Iterable[int]) -> None:
        for v in values:
            self.add(v)

    def add_many(self, values: np.ndarray, buckets: Optional[np.ndarray] = None, summary: Optional[Any] = None) -> None:
        """Every value of an int64 array, as add() would one by one (`buckets`: their bucket_indices, if known;
        `summary`: their low, high, bucket_low, bucket_high and total, if known: npu_trace.detectors.latency)."""
        if not len(values):
            return
        idx = bucket_indices(values) if buckets is None else buckets
        if summary is None:
            first, last, low, high = int(idx.min()), int(idx.max()), int(values.min()), int(values.max())
            safe = max(abs(low), abs(high)) < (1 << 62) // len(values)  # the int64 sum cannot overflow
            total = int(values.sum(dtype=np.int64)) if safe else None
        else:
            low, high, first, last, total = summary
        self._cover(first, last)
        self._counts[first - self._base : last - self._base + 1] += np.bincount(idx - first, minlength=last - first + 1)
        self.min = low if not self.count else min(self.min, low)
        self.max = max(self.max, high)
        self.count += len(values)
        self.total += total if total is not None else sum(values.tolist())

    def merge(self, other: Histogram) -> None:
        """Add `other`'s samples (bucket by bucket: exact, as if its values had been added here)."""
        if len(other._counts):
            self._cover(other._base, other._base + len(other._counts) - 1)
            at = other._base - self._base
            self._counts[at : at + len(other._counts)] += other._counts
        if other.count:
            self.min = other.min if not self.count else min(self.min, other.min)
            self.max = max(self.max, other.max)
        self.count += other.count
        self.total += other.total

    @property
    def mean(self) -> int:
        return self.total // self.count if self.count else 0
