"""The host's context beside the NPU's events: which CPU ran which thread, its wakeups, hard and soft interrupts.

A spike is often a preempted submitter. These kernel tracepoints (`record`/`stream`/`live --host-context`)
let an exported timeline show each CPU's running thread, the threads' states and the interrupts that took
the CPU (npu_trace.export.hostctx): they are traced beside the profile's events, host-wide (no scope filter
of the session's applies to them but the processes of --pid, which the kernel applies to every event).
"""

from __future__ import annotations

from typing import Dict, Tuple

SCHED_SWITCH, SCHED_WAKING = "sched:sched_switch", "sched:sched_waking"
IRQ_ENTRY, IRQ_EXIT = "irq:irq_handler_entry", "irq:irq_handler_exit"
SOFTIRQ_ENTRY, SOFTIRQ_EXIT = "irq:softirq_entry", "irq:softirq_exit"
HOST_CONTEXT: Tuple[str, ...] = (SCHED_SWITCH, SCHED_WAKING, IRQ_ENTRY, IRQ_EXIT, SOFTIRQ_ENTRY, SOFTIRQ_EXIT)

# the kernel's softirq vectors (include/linux/interrupt.h), as its softirq events print them
SOFTIRQ_NAMES: Dict[int, str] = {0: "HI", 1: "TIMER", 2: "NET_TX", 3: "NET_RX", 4: "BLOCK", 5: "IRQ_POLL",
                                 6: "TASKLET", 7: "SCHED", 8: "HRTIMER", 9: "RCU"}  # fmt: skip
# sched_switch's prev_state bits (TASK_REPORT) as the kernel prints them; none set: running ("R")
TASK_STATES: Tuple[Tuple[int, str], ...] = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"),
                                           (0x20, "Z"), (0x40, "P"), (0x80, "I"))  # fmt: skip


def task_state(prev_state: int) -> str:
    """sched_switch's prev_state as its print format shows it: "R", "S", "D", ..., "+" when preempted."""
    mask = prev_state & 0xFF
    letters = "|".join(letter for bit, letter in TASK_STATES if mask & bit) or "R"
    return letters + ("+" if prev_state & 0x100 else "")


def softirq_name(vec: int) -> str:
    return SOFTIRQ_NAMES.get(vec, f"softirq {vec}")
