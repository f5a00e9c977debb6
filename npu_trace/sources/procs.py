"""Processes and their tasks as /proc tells them: a process's thread-group id, and the ids of its threads now."""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Set

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
