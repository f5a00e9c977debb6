"""What an exported timeline is made of, whatever its file format: tracks, slices, instants, counters, flows.

The mapping (`npu_trace.export.track_map`) decides what goes where and calls a `TraceWriter`; the writers
(`npu_trace.export.perfetto`, `npu_trace.export.chrome_json`) only encode. A `Track` is a value: its uuid is a
hash of a stable key (`track_uuid`), so the same recording always exports to the same bytes.

Writers' contract: `track(t)` comes once per track, before any event on it (a group's before its children);
`begin`/`end` pairs on one track nest properly (the mapping guarantees it: `LanePacker`), and a slice's `end`
follows its `begin` before any other event of that track, or after its nested slices only; flows are ids
(`flow_id`, or `flow_ids` for a column of integer keys: the same numbers) given on the `begin` of the slice
they leave (`flow_out`) and of the slice they reach (`flow_in`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

try:
    from npu_trace.export import _flows
except ImportError:  # installed where no compiler was: numpy folds the keys, into the same numbers
    _flows = None  # type: ignore[assignment]

FLOWS = "c" if _flows is not None else "python"  # which folds flow ids (doctor names it)

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
    """A stable 63-bit id for a flow key (a task's submit, a reset's trigger). Both ends of a flow compute it.

    Its parts are folded one after the other into 64 bits (`_fold`: each part's kind, then its value, each
    mixed in by SplitMix64's finalizer), integers by their value, None by its kind alone, anything else by a
    hash of its type and text (True is not 1): so that `flow_ids` computes the ids of a column of integer keys
    at once, equal to this one's."""
    h = _SEED
    for part in key:
        kind, value = _part(part)
        h = _fold(_fold(h, kind), value)
    return (h >> 1) or 1


def flow_ids(domain: str, *parts: Union[np.ndarray, Tuple[np.ndarray, np.ndarray], None]) -> np.ndarray:
    """flow_id(domain, *row) of each row of integer columns (a None part: None in every row; a masked column
    (values, present): None where not present), as int64 numbers. Each part is folded in by the compiled
    `_flows.fold` where it was built, else by `_fold_part` (numpy: the same numbers)."""
    kind, value = _part(domain)
    h: np.ndarray = np.full(_rows(parts), _fold(_fold(_SEED, kind), value), dtype=np.uint64)
    for part in parts:
        values, present = (None, None) if part is None else part if isinstance(part, tuple) else (part, None)
        if values is not None:
            values = np.ascontiguousarray(values, dtype=np.int64)
        if present is not None:
            present = np.ascontiguousarray(present, dtype=bool)
        if _flows is not None:
            _flows.fold(h, values, present)
        else:
            h = _fold_part(h, values, present)
    out = (h >> np.uint64(1)).astype(np.int64)
    out[out == 0] = 1
    return out


_MASK = (1 << 64) - 1
_SEED = 0x243F6A8885A308D3  # the first fraction digits of pi: any odd constant
_INT, _NONE, _OTHER = 1, 2, 3
_I64 = (-(1 << 63), 1 << 63)


def _part(part: Any) -> Tuple[int, int]:
    """(kind, value) of a flow key's part: an int64 by itself, None by its kind, the rest by a hash."""
    if part.__class__ is int and _I64[0] <= part < _I64[1]:
        return _INT, part & _MASK
    if part is None:
        return _NONE, 0
    return _OTHER, _hash("part", (type(part).__name__, part))


def _fold(h: int, value: int) -> int:
    z = (h ^ value) + 0x9E3779B97F4A7C15 & _MASK
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


def _fold_part(h: np.ndarray, values: Optional[np.ndarray], present: Optional[np.ndarray]) -> np.ndarray:
    """One part of each row's key folded into its hash, in numpy (_flows.fold's twin)."""
    with np.errstate(over="ignore"):
        if values is None:
            return _fold_np(_fold_np(h, _NONE), 0)
        kinds = np.full(len(h), _INT, dtype=np.uint64)
        if present is not None:
            kinds[~present] = _NONE
            values = np.where(present, values, 0)
        return _fold_np(_fold_np(h, kinds), values.view(np.uint64))


def _fold_np(h: np.ndarray, value: Any) -> np.ndarray:
    z = (h ^ np.asarray(value, dtype=np.uint64)) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _rows(parts: Sequence[Any]) -> int:
    for part in parts:
        if part is not None:
            return len(part[0] if isinstance(part, tuple) else part)
    return 1


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


class BlockWriter(TraceWriter, Protocol):
    """A writer that also takes a block's pieces at once (npu_trace.export.pieces) and packets or lines made
    elsewhere (the host's context: npu_trace.export.hostctx)."""

    def pieces(self, p: Any, lo: int, hi: int, drawn: Any) -> None: ...

    def put(self, data: Any) -> None: ...


def tally() -> Dict[str, int]:
    return {"slices": 0, "instants": 0, "counters": 0, "flows": 0, "tracks": 0, "bytes": 0}


def counter_value(value: Any) -> Optional[Value]:
    """A counter's value from an event argument: ints and floats (not bools), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value
