"""Processes and their tasks as /proc tells them: a process's thread-group id, and the ids of its threads now."""

from __future__ import annotations

import os
from typing import Any, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Set

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


class TaskSnapshot(NamedTuple):
    """Every task alive at one moment: `threads` {tid: tgid} of the threads that are not their process's main
    thread, `processes` the thread-group ids (None: not known whole, e.g. more tasks than a header keeps)."""

    threads: Dict[int, int]
    processes: Optional[FrozenSet[int]]

    def header(self) -> Dict[str, Any]:
        """The header's `extra.tasks` ({"tid": tgid}) and `extra.processes` (sorted ids, when known whole)."""
        out: Dict[str, Any] = {"tasks": {str(t): g for t, g in sorted(self.threads.items())}}
        if self.processes is not None:
            out["processes"] = sorted(self.processes)
        return out

    def merged(self, older: TaskSnapshot, most: int = MAX_TASKS) -> TaskSnapshot:
        """This snapshot over an older map (a rotated file's: the threads it knew that are gone now may still
        have events in the pages not read yet), at most `most` threads (the older ones first left out, and then
        the processes are not known whole)."""
        gone = [(t, g) for t, g in older.threads.items() if t not in self.threads]
        room = max(0, most - len(self.threads))
        threads = {**dict(gone[len(gone) - room :] if room else []), **self.threads}
        known: Optional[FrozenSet[int]] = None
        if len(gone) <= room and self.processes is not None and older.processes is not None:
            known = self.processes | older.processes
        return TaskSnapshot(threads, known)


def task_snapshot(proc: str = PROC, most: int = MAX_TASKS) -> TaskSnapshot:
    """The tasks alive now (read from /proc; a process gone meanwhile is left out), at most `most` threads and
    `most` processes (beyond that the processes are not known whole)."""
    threads = {int(t): g for t, g in thread_groups(proc, most).items()}
    try:
        pids = frozenset(int(n) for n in os.listdir(proc) if n.isdigit())
    except OSError:
        return TaskSnapshot(threads, None)
    whole = len(pids) <= most and len(threads) < most
    return TaskSnapshot(threads, (pids | frozenset(threads.values())) if whole else None)


def snapshot_from_header(extra: Any) -> TaskSnapshot:
    """The header's task map (`extra.tasks`, `extra.processes`); a recording made before `processes` was kept
    (or whose list is not ids) does not say which processes it knew: None."""
    listed = extra.get("processes") if isinstance(extra, dict) else None
    known = None
    if isinstance(listed, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in listed):
        known = frozenset(listed)
    return TaskSnapshot(tasks_from_header(extra), known)


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
