"""What an exported timeline is made of, whatever its file format: tracks, slices, instants, counters, flows.

The mapping (`npu_trace.sinks.timeline`) decides what goes where and calls a `TraceWriter`; the writers
(`npu_trace.sinks.perfetto`, `npu_trace.sinks.chrome_json`) only encode. A `Track` is a value: its uuid is a
hash of a stable key (`track_uuid`), so the same recording always exports to the same bytes.

Writers' contract: `track(t)` comes once per track, before any event on it (a group's before its children);
`begin`/`end` pairs on one track nest properly (the mapping guarantees it: `LanePacker`), and a slice's `end`
follows its `begin` before any other event of that track, or after its nested slices only; flows are ids
(`flow_id`) given on the `begin` of the slice they leave (`flow_out`) and of the slice they reach (`flow_in`).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Dict, Mapping, NamedTuple, Optional, Protocol, Sequence, Union

GROUP, SLICES, INSTANTS, COUNTER = "group", "slices", "instants", "counter"
Value = Union[int, float]


class Track(NamedTuple):
    uuid: int
    name: str
    kind: str  # GROUP, SLICES, INSTANTS or COUNTER
    parent: int = 0  # the parent track's uuid (0: top level)
    rank: int = 0  # order among its siblings
    unit: str = ""  # counters: "bytes", "count", or a unit name ("°C", "GT/s", "lanes")
    top: int = 0  # the top-level group it belongs to (Chrome JSON: its process); 0 for a top-level group


def track_uuid(*key: Any) -> int:
    """A stable 63-bit id for a track key (never 0, the implicit global track)."""
    return _hash("track", key) or 1


def flow_id(*key: Any) -> int:
    """A stable 63-bit id for a flow key (a task's submit, a reset's trigger). Both ends of a flow compute it:
    the latest are kept (keys told apart by their parts' types too: True is not 1)."""
    try:
        return _kept_flow_id(*key)
    except TypeError:  # a part that cannot be a dict key
        return _hash("flow", key) or 1


@functools.lru_cache(maxsize=1 << 12, typed=True)
def _kept_flow_id(*key: Any) -> int:
    return _hash("flow", key) or 1


def _hash(domain: str, key: Sequence[Any]) -> int:
    digest = hashlib.blake2b(repr((domain, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class TraceWriter(Protocol):
    """An exported timeline's file: see the module docstring for the order of the calls."""

    def header(self, info: Mapping[str, Any]) -> None:
        """The recording (host, kernel, profile, tool) and its clock: `clock`, `mono_ns`, `realtime_ns`."""

    def track(self, track: Track) -> None: ...

    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None: ...  # fmt: skip

    def end(self, track: Track, ts: int) -> None: ...

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        ...

    def counter(self, track: Track, ts: int, value: Value) -> None: ...

    def close(self) -> Dict[str, int]:
        """Finish the file; what was written: {"slices", "instants", "counters", "flows", "tracks", "bytes"}."""


def tally() -> Dict[str, int]:
    return {"slices": 0, "instants": 0, "counters": 0, "flows": 0, "tracks": 0, "bytes": 0}


def counter_value(value: Any) -> Optional[Value]:
    """A counter's value from an event argument: ints and floats (not bools), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value
