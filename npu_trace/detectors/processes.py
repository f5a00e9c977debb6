"""Which process each thread belongs to: the `pid` of trace events is a thread id.

ftrace's `common_pid` is the thread id of the task an event fired in, and so is the pid of the simulator's
uprobe events and of the BPF channel's HAL calls (npu_trace.bpf.records keeps the thread id); npu-smi's process
table, the driver's per-process accounting and a user asking "which process holds the memory" mean the process
(the thread group, tgid). The map has two parts, both in what a session analyses and a recording keeps:

* the tasks alive when tracing began (read from /proc once the session traces: the threads {tid: tgid} and the
  processes' ids; a recording's header `extra.tasks` and `extra.processes`, npu_trace.sources.procs);
* the tasks started since: every session traces `task:task_newtask` (fired in the parent when it clones, the
  new task's id and clone flags), events of kind "task" (op "newtask") in the stream itself. With CLONE_THREAD
  the new thread joins its parent's process, else it is a new process (its id is its tgid). Being events in
  time order, they update the map at the same place live, on replay, on both analysis paths, in a flight
  dump and in every file of a rotated recording (a clone precedes everything its task does).

A thread the map does not know stands for itself. When the processes alive at the start are known (not in a
recording made before they were kept), a thread id that holds memory and is neither a known process nor a
known thread is counted as unattributed (`unattributed(tids)`: its newtask event was lost, or the recording is
a later file of a rotation whose thread started and ended in an earlier one), never silently taken for a
process. An id seen again in a newtask event (the kernel reuses ids) for a task of another process is counted
in `reused_ids`: memory its earlier task still held is from then on said to be the new task's process.
`whole_life(pid)`: whether the trace saw the process start (its traced bytes are then all it allocated: the
accounting detector compares only those with npu-smi's).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

TASK = "task"  # the event kind (npu_trace.pipeline.normalize maps task:task_newtask to it)
NEWTASK = "newtask"
CLONE_THREAD = 0x00010000  # include/uapi/linux/sched.h
MAX_KNOWN = 1 << 17  # threads, and processes, the map holds at most (the oldest told are forgotten first)


class Processes:
    def __init__(self, tasks: Optional[Mapping[int, int]] = None, processes: Optional[Iterable[int]] = None) -> None:
        """`tasks`: {tid: tgid} of the threads alive at the start; `processes`: the processes then (None: not
        known, and no thread is counted as unattributed)."""
        # ordered (the oldest forgotten first at MAX_KNOWN): OrderedDicts, whose oldest goes in O(1)
        self.tasks: OrderedDict[int, int] = OrderedDict()
        self.known: Optional[OrderedDict[int, None]] = None  # an ordered set
        self.started: OrderedDict[int, None] = OrderedDict()  # the processes whose start the trace saw
        self.counts = {"threads_started": 0, "processes_started": 0, "reused_ids": 0, "forgotten": 0}
        self.begin(tasks, processes)

    def begin(self, tasks: Optional[Mapping[int, int]], processes: Optional[Iterable[int]]) -> None:
        """The tasks alive when tracing began (as __init__ takes them), for a map made before its session
        started (the TUI's): before any event is fed."""
        self.tasks = OrderedDict((t, g) for t, g in (tasks or {}).items() if t != g)  # threads only
        self.known = None if processes is None else OrderedDict.fromkeys([*processes, *self.tasks.values()])

    def of(self, tid: int) -> int:
        """The process (thread-group id) thread `tid` belongs to; `tid` itself when unknown."""
        return self.tasks.get(tid, tid)

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        for ev in events:
            if ev.kind == TASK and ev.op == NEWTASK:
                self._started(ev)
        return []

    def _started(self, ev: NpuEvent) -> None:
        tid, flags = ev.args.get("tid"), ev.args.get("flags")
        if not isinstance(tid, int) or not isinstance(flags, int) or tid <= 0:
            return
        before = self.tasks.get(tid)
        if flags & CLONE_THREAD:
            group = self.of(ev.pid)  # the clone runs in the parent: the new thread joins its process
            if (before is not None and before != group) or (before is None and self._is_process(tid)):
                self.counts["reused_ids"] += 1  # memory its earlier task holds is now said to be `group`'s
            _put(self.tasks, tid, group, self.counts)
            self.started.pop(tid, None)
            self.counts["threads_started"] += 1
        else:
            if before is not None:
                del self.tasks[tid]
                self.counts["reused_ids"] += 1
            if self.known is not None:
                _put(self.known, tid, None, self.counts)
            _put(self.started, tid, None, self.counts)
            self.counts["processes_started"] += 1

    def _is_process(self, tid: int) -> bool:
        return self.known is not None and tid in self.known

    def whole_life(self, pid: int) -> bool:
        """Did the trace see everything process `pid` did (it started after tracing began)? A process alive at
        the start may hold memory it allocated before (its traced bytes are a part of it). True for every
        process when the processes at the start are not known (as before they were kept)."""
        return self.known is None or pid in self.started

    def unattributed(self, tids: Iterable[int]) -> Optional[List[int]]:
        """The ids among `tids` (of tasks that held memory) neither a known process nor a known thread, sorted;
        None when the processes alive at the start are not known."""
        if self.known is None:
            return None
        known = self.known
        return sorted(t for t in set(tids) if t > 0 and t not in self.tasks and t not in known)

    def threads(self) -> Dict[int, int]:
        """{tid: tgid} of every thread known now (what a flight recorder's dump keeps in its header)."""
        return dict(self.tasks)

    def processes(self) -> Optional[FrozenSet[int]]:
        return None if self.known is None else frozenset(self.known)

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        return {**self.counts, "threads_known": len(self.tasks), "processes_known": self.known is not None}


def _put(table: OrderedDict[int, Any], key: int, value: Any, counts: Dict[str, int]) -> None:
    """table[key] = value as the newest entry; the oldest one forgotten beyond MAX_KNOWN (counted)."""
    table.pop(key, None)
    table[key] = value
    if len(table) > MAX_KNOWN:
        table.popitem(last=False)
        counts["forgotten"] += 1
