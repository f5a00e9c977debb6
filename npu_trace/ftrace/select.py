"""Event selection: globs resolved against available_events (the kernel refuses globs in set_event)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable, List, Sequence, Tuple

from npu_trace.errors import InputError


def _split(pattern: str, systems: Iterable[str]) -> Tuple[str, str]:
    if ":" in pattern:
        sys_pat, name_pat = pattern.split(":", 1)
        return sys_pat, name_pat
    if pattern in systems:
        return pattern, "*"
    return "*", pattern


def match_globs(patterns: Iterable[str], available: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(events matched, patterns that matched nothing).

    "sys:name" patterns match both parts; a bare pattern names a whole system ("irq" -> irq:*) when one has
    that name, otherwise an event name in any system ("ascend_*"). Order follows `available`, no duplicates.
    """
    systems = {ev.split(":", 1)[0] for ev in available}
    split = [tuple(ev.split(":", 1)) for ev in available if ":" in ev]
    chosen: List[str] = []
    seen = set()
    unmatched: List[str] = []
    for pat in (p.strip() for p in patterns):
        if not pat:
            continue
        sys_pat, name_pat = _split(pat, systems)
        hits = [f"{s}:{n}" for s, n in split if fnmatchcase(s, sys_pat) and fnmatchcase(n, name_pat)]
        if not hits:
            unmatched.append(pat)
        for ev in hits:
            if ev not in seen:
                seen.add(ev)
                chosen.append(ev)
    return chosen, unmatched


def resolve_globs(patterns: Iterable[str], available: Sequence[str]) -> List[str]:
    """Like match_globs, but every pattern must match at least one event."""
    chosen, unmatched = match_globs(patterns, available)
    if unmatched:
        raise InputError(
            f"no trace event matches {unmatched[0]!r} (see available_events; for the simulator: npu-trace sim load)"
        )
    return chosen
