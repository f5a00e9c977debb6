"""A log-linear latency histogram (HDR-like): bounded memory, < 0.4% error on any percentile.

Values below 128 ns have a bucket each; above, every power of two is split into 128 equal buckets, so a
bucket is at most 1/128 of its lower bound wide and the reported midpoint is within 1/256 (0.4%) of any
value in it. A u64 range needs at most ~7,300 buckets, kept sparse. min and max are exact.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Tuple

SUB_BITS = 7
SUB = 1 << SUB_BITS  # 128


def bucket_index(value: int) -> int:
    if value < SUB:
        return max(value, 0)
    shift = value.bit_length() - SUB_BITS - 1
    return shift * SUB + (value >> shift)


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
