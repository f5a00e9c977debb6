"""Dump files: their names (time, device, kind) and the directory's retention bound. Pure.

A dump is named by the wall-clock time of its incident's first trigger (UTC, to the millisecond; trace-clock
times are turned into wall-clock ones by the session's clock anchor), the device and the kind of the trigger
that names it (the gravest: a reset before a heartbeat lost before a timeout ...):
`flight-20250317T081502.117Z-dev3-reset.npt`. While it is written it is `<name>.partial`, renamed once closed,
so every `.npt` in the directory is a finished dump. Retention keeps the newest `keep` dumps within
`keep_bytes`; it only ever removes finished dumps of this naming (never another file, never the dump just
written).
"""

from __future__ import annotations

import re
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PREFIX = "flight-"
PARTIAL = ".partial"
NAME_RE = re.compile(r"^flight-\d{8}T\d{6}\.\d{3}Z-(?:dev\d+|nodev)-[a-z_]+(?:-\d+)?\.npt$")


def wall_ns(ts_ns: int, anchor: Dict[str, int]) -> int:
    """A trace-clock (CLOCK_MONOTONIC) time as wall-clock ns, by the clock anchor {"mono_ns", "realtime_ns"}."""
    return anchor["realtime_ns"] + ts_ns - anchor["mono_ns"]


def dump_name(ts_ns: int, device: Optional[int], kind: str, anchor: Dict[str, int], taken: Sequence[str] = ()) -> str:
    """The file name of a dump whose trigger happened at `ts_ns`; `-2`, `-3`, ... when the name is `taken`."""
    real = wall_ns(ts_ns, anchor)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(real // 1_000_000_000))
    dev = "nodev" if device is None else f"dev{device}"
    base = f"{PREFIX}{stamp}.{real // 1_000_000 % 1000:03d}Z-{dev}-{kind}"
    name, n = f"{base}.npt", 1
    while name in taken or name + PARTIAL in taken:
        n += 1
        name = f"{base}-{n}.npt"
    return name


def shipped_mark(name: str) -> str:
    """The empty file beside a dump that says it was shipped (an agent's --ship): `.NAME.shipped`."""
    return f".{name}.shipped"


def is_dump(name: str) -> bool:
    return bool(NAME_RE.match(name))


def to_remove(dumps: Sequence[Tuple[str, int]], keep: int, keep_bytes: int, protect: str = "",
              removable: Callable[[str], bool] = lambda _name: True) -> List[str]:  # fmt: skip
    """The dumps (name, size) to remove, oldest first, so that at most `keep` remain within `keep_bytes`
    (`protect`: the dump just written, never removed even when alone it is larger; `removable`: whether a dump
    may go at all: an agent that ships its dumps removes only those shipped, the others stay over the bound)."""
    mine = sorted((d for d in dumps if is_dump(d[0])), key=lambda d: _order(d[0]))
    count, total = len(mine), sum(size for _, size in mine)
    out = []
    for name, size in mine:
        if count <= keep and total <= keep_bytes:
            break
        if name == protect or not removable(name):
            continue
        out.append(name)
        count -= 1
        total -= size
    return out


def _order(name: str) -> Tuple[str, int]:
    """Time order (the names' time stamps), then the -N suffix."""
    stem = name[: -len(".npt")]
    head, _, tail = stem.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (stem, 1)
