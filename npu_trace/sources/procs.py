"""Processes and their tasks as /proc tells them: a process's thread-group id, and the ids of its threads now."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Set

PROC = "/proc"


def thread_group(pid: int, proc: str = PROC) -> Optional[int]:
    """The process (thread-group id) task `pid` belongs to; None when there is no such task."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def tasks_of(pids: Iterable[int], proc: str = PROC) -> List[int]:
    """The ids of every thread of the processes `pids` now (a process that is gone has none)."""
    out: Set[int] = set()
    for pid in pids:
        try:
            names = os.listdir(os.path.join(proc, str(pid), "task"))
        except OSError:
            continue
        out.update(int(n) for n in names if n.isdigit())
    return sorted(out)


MAX_TASKS = 1 << 16  # threads listed in a recording's header at most (a busy host's whole /proc stays small)


def thread_groups(proc: str = PROC, most: int = MAX_TASKS) -> Dict[str, int]:
    """{"tid": tgid} of every thread now that is not its process's main thread (those stand for themselves),
    at most `most` of them: what a recording's header keeps (`extra.tasks`)."""
    out: Dict[str, int] = {}
    try:
        pids = [n for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            names = os.listdir(os.path.join(proc, pid, "task"))
        except OSError:
            continue
        for tid in names:
            if tid.isdigit() and tid != pid and len(out) < most:
                out[tid] = int(pid)
    return out


def tasks_from_header(extra: Any) -> Dict[int, int]:
    """The `extra.tasks` map of a recording's header ({"tid": tgid}); entries that are not ids are left out."""
    tasks = extra.get("tasks") if isinstance(extra, dict) else None
    if not isinstance(tasks, dict):
        return {}
    out: Dict[int, int] = {}
    for tid, tgid in tasks.items():
        if isinstance(tid, str) and tid.isdigit() and isinstance(tgid, int) and not isinstance(tgid, bool):
            out[int(tid)] = tgid
    return out
