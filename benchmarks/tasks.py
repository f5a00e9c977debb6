"""The live task workload (benchmarks/gen_tasks.c) and the benchmark profile that turns its syscalls into the
kinds the detectors work on: calls (an entry and its return), task submits and their completions.

The workload runs two threads on two CPUs (see gen_tasks.c): thread A makes a call (sched_get_priority_max)
and submits a task (tee on fd -1: it fails at once, after its tracepoint recorded the arguments); thread B
completes each task once its submit returned (sync_file_range on fd -1, likewise) and makes a call. Syscalls
nothing else here makes, so the workload's truth is the trace's. Each task
carries (dev, stream, task) in the syscall's integer arguments, so the latency detector matches a completion
on one CPU to its submit on the other, as on a real host. Its result line is its ground truth: how many calls,
submits and completions it made.

`PROFILE` is a benchmark profile (not in the product's registry, npu_trace.device.profiles): the four
tracepoints and their mapping rules (npu_trace.pipeline.normalize documents the keys).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from benchmarks.common import BenchError, gcc
from npu_trace.device.profiles import Profile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "gen_tasks.c")
CALL, SUBMIT, COMPLETE = "sched_get_priority_max", "tee", "sync_file_range"
EVENTS: Tuple[str, ...] = (
    f"syscalls:sys_enter_{CALL}",
    f"syscalls:sys_exit_{CALL}",
    f"syscalls:sys_enter_{SUBMIT}",
    f"syscalls:sys_enter_{COMPLETE}",
)
_TASK = {"stream": "len", "task": "flags"}  # tee(fdin, fdout = dev, len = stream, flags = task)
_DONE = {"stream": "nbytes", "task": "flags"}  # sync_file_range(fd, offset = dev, nbytes = stream, flags = task)
PROFILE = Profile(
    "bench-tasks",
    "benchmarks: the task workload's syscalls as calls, task submits and completions (benchmarks/gen_tasks.c)",
    EVENTS,
    mapping={
        EVENTS[0]: {"kind": "call", "op": CALL, "dev": "", "pair": "entry"},
        EVENTS[1]: {"kind": "call", "op": CALL, "dev": "", "pair": "return"},
        EVENTS[2]: {"kind": "submit", "op": "task", "dev": "fdout", "args": _TASK},
        EVENTS[3]: {"kind": "complete", "op": "task", "dev": "offset", "args": _DONE},
    },
    # a syscall preempted on a busy VM takes milliseconds: only above 10 ms is a call a spike (as for the sim)
    latency={"floor_ns": 10_000_000, "ops": {"task": {"adaptive": False, "absolute_ns": None}}},
)
_LINE = re.compile(r"pid=(\d+) n=(\d+) elapsed_ns=(\d+) cpu_ns=(\d+) tids=(\d+),(\d+) calls=(\d+) submits=(\d+) "
                   r"completes=(\d+) waits=(\d+)")  # fmt: skip


@dataclass(frozen=True)
class Truth:
    """The workload's result line: what it made."""

    pid: int
    events: int
    elapsed_ns: int
    cpu_ns: int
    tids: Tuple[int, int]
    calls: int  # calls made: an entry and a return event each
    submits: int
    completes: int
    waits: int  # times thread A found the hand-over ring full

    @property
    def rate(self) -> float:
        return self.events / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0

    def by_kind(self) -> Dict[str, int]:
        """The events of each kind the analysis must count."""
        return {"call": 2 * self.calls, "submit": self.submits, "complete": self.completes}


def parse(output: bytes) -> Truth:
    m = _LINE.search(output.decode(errors="replace"))
    if not m:
        raise BenchError(f"no result line from gen_tasks in: {output[-300:]!r}")
    v = [int(x) for x in m.groups()]
    return Truth(v[0], v[1], v[2], v[3], (v[4], v[5]), v[6], v[7], v[8], v[9])


def build(workdir: str) -> str:
    exe = os.path.join(workdir, "gen_tasks")
    gcc(SOURCE, exe, ["-Wall", "-pthread"])
    return exe


def argv(exe: str, events: int, rate: float, cpus: Sequence[int] = (0, 1)) -> List[str]:
    return [exe, str(events), f"{rate:.0f}", str(cpus[0]), str(cpus[1])]
