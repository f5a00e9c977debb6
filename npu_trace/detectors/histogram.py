"""A log-linear latency histogram (HDR-like): bounded memory, < 0.4% error on any percentile.

Values below 128 ns have a bucket each; above, every power of two is split into 128 equal buckets, so a
bucket is at most 1/128 of its lower bound wide and the reported midpoint is within 1/256 (0.4%) of any
value in it. A u64 range needs at most ~7,300 buckets, kept sparse. min and max are exact.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Tuple

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
    __slots__ = ("buckets", "count", "max", "min", "total")

    def __init__(self) -> None:
        self.buckets: Dict[int, int] = {}
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def add(self, value: int) -> None:
        idx = bucket_index(value)
        self.buckets[idx] = self.buckets.get(idx, 0) + 1
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
        seen = 0
        for idx in sorted(self.buckets):
            seen += self.buckets[idx]
            if seen >= rank:
                low, high = bucket_bounds(idx)
                return min(max((low + high) // 2, self.min), self.max)
        return self.max

    def add_all(self, values: Iterable[int]) -> None:
        for v in values:
            self.add(v)

    def add_many(self, values: np.ndarray) -> None:
        """Every value of an int64 array, as add() would one by one."""
        if not len(values):
            return
        counts = np.bincount(bucket_indices(values))  # at most ~7,300 buckets
        idx = np.flatnonzero(counts)
        buckets = self.buckets
        for i, n in zip(idx.tolist(), counts[idx].tolist()):
            buckets[i] = buckets.get(i, 0) + n
        low, high = int(values.min()), int(values.max())
        self.min = low if not self.count else min(self.min, low)
        self.max = max(self.max, high)
        self.count += len(values)
        safe = max(abs(low), abs(high)) < (1 << 62) // len(values)  # the int64 sum cannot overflow
        self.total += int(values.sum(dtype=np.int64)) if safe else sum(values.tolist())

    def merge(self, other: Histogram) -> None:
        """Add `other`'s samples (bucket by bucket: exact, as if its values had been added here)."""
        for idx, n in other.buckets.items():
            self.buckets[idx] = self.buckets.get(idx, 0) + n
        if other.count:
            self.min = other.min if not self.count else min(self.min, other.min)
            self.max = max(self.max, other.max)
        self.count += other.count
        self.total += other.total

    @property
    def mean(self) -> int:
        return self.total // self.count if self.count else 0
