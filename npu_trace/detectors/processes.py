"""Which process each thread belongs to: the `pid` of trace events is a thread id.

ftrace's `common_pid` is the thread id of the task an event fired in, and so is the pid of the simulator's
uprobe events and of the BPF channel's HAL calls (npu_trace.bpf.decode keeps the thread id); npu-smi's process
table, the driver's per-process accounting and a user asking "which process holds the memory" mean the process
(the thread group, tgid). The map is part of what a recording keeps: the threads alive when tracing began
(thread id -> thread-group id, read from /proc by the recorder: the header's `extra.tasks`), so replay and
`check` group exactly as the live session would. A thread the map does not know (one started after the
header was written) stands for itself: its id is taken as its process's.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional


class Processes:
    def __init__(self, tasks: Optional[Mapping[int, int]] = None) -> None:
        self.tasks: Dict[int, int] = {t: g for t, g in (tasks or {}).items() if t != g}  # threads only

    def of(self, tid: int) -> int:
        """The process (thread-group id) thread `tid` belongs to; `tid` itself when unknown."""
        return self.tasks.get(tid, tid)
