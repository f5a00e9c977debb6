"""Kernel faults in the kernel log: a multi-line block (`BUG:`, `Oops`, a soft or hard lockup, a hung task, an RCU
stall, a `WARNING:`, a panic, or a bare register dump and call trace whose header was never printed or pasted)
read as one value. Pure: (time, line) in, `Fault`s out.

`FaultAssembler.feed(ts_ns, text)` says whether the line belongs to a block (then it is not parsed as anything
else) and returns the blocks it completed; `flush()` ends the open one (the end of a file; a live source calls
`expire(now)` when the log has been quiet for `QUIET_NS`). A block starts at a header line or, with no header,
at a line only a fault dump prints (`CPU: N PID: N Comm: ...`, `PC is at`, `pc : [<...>]`, `RIP:`, `Call trace:`),
takes every line of a dump's shape after it (registers, stack words, call-trace frames, `Modules linked in:`,
...), and ends at `---[ end trace ...]---`, at the first line of another shape, or at another header once it
has a kind. A `page allocation failure` dump is consumed the same way but is no fault (its first line is an
allocation failure, told by the kmsg rules).

A Fault carries its kind, the CPU and task the dump names, the functions of its call trace (`func+0x../0x..`,
with their `[module]`), those that are the NPU driver's (by module or function prefix, `DRIVER_MODULES`,
`DRIVER_FUNCS`), and its text (at most `MAX_LINES` lines of at most `MAX_LINE` characters; longer blocks keep
counting their lines). Every regex is anchored or bounded: linear time on hostile input.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from npu_trace.events import NpuEvent

MAX_LINES = 200
MAX_LINE = 512
MAX_FRAMES = 64
QUIET_NS = 1_000_000_000  # a live block with no new line for this long is over

# the reference's kernel modules (§1) and the prefixes of the driver's function names
DRIVER_MODULES: Tuple[str, ...] = ("asdrv_", "drv_", "ascend_", "davinci", "devdrv", "tsdrv", "hdcdrv", "dbl_",
                                   "ts_agent", "npu")  # fmt: skip
DRIVER_FUNCS: Tuple[str, ...] = (
    "devdrv_", "trs_", "devmm_", "hb_", "dms_", "uda_", "hdcdrv_", "tsdrv_", "esched_", "soft_fault", "ka_",
    "drv_pcie", "log_drv", "svm_", "dvpp_", "ascend_",
)  # fmt: skip

_HEADERS: Tuple[Tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx))
    for kind, rx in (
        ("soft_lockup", r"^(?:watchdog: )?BUG: soft lockup - CPU#(?P<cpu>\d{1,5}) stuck for \d{1,7}s! "
                        r"\[(?P<comm>[^\]]{0,64}):(?P<pid>\d{1,10})\]"),
        ("hard_lockup", r"^(?:NMI watchdog: )?Watchdog detected hard LOCKUP on cpu (?P<cpu>\d{1,5})"),
        ("hung_task", r"^INFO: task (?P<comm>.{0,64}):(?P<pid>\d{1,10}) blocked for more than \d{1,7} seconds"),
        ("rcu_stall", r"^(?:rcu: )?INFO: rcu_\w{1,16} (?:self-)?detected stalls? on CPU"),
        ("rcu_stall", r"^(?:rcu: )?INFO: rcu_\w{1,16} detected expedited stalls"),
        ("oops", r"^(?:BUG: )?[Uu]nable to handle (?:kernel )?(?:NULL pointer dereference|paging request|page fault)"),
        ("oops", r"^BUG: kernel NULL pointer dereference"),
        ("oops", r"^Internal error: Oops"),
        ("oops", r"^Oops(?:: | - )"),
        ("oops", r"^general protection fault"),
        ("panic", r"^Kernel panic - not syncing"),
        ("warning", r"^WARNING: CPU: (?P<cpu>\d{1,5}) PID: (?P<pid>\d{1,10}) at "),
        ("bug", r"^kernel BUG at "),
        ("bug", r"^BUG: "),
    )
)  # fmt: skip
_CUT = "------------[ cut here ]------------"
_ALLOC = re.compile(r"^\S{1,64}: page allocation failure: order:")
_TASK = re.compile(r"^CPU: (?P<cpu>\d{1,5}) (?:UID: \d{1,10} )?PID: (?P<pid>\d{1,10}) Comm: (?P<comm>\S{1,64})")
_BARE = re.compile(r"^(?:CPU: \d{1,5} (?:UID: \d{1,10} )?PID: \d{1,10} Comm: |PC is at |pc : |RIP: |Call [Tt]race:)")
_FRAME = re.compile(r"(?P<func>[A-Za-z_][\w.]{0,127})\+0x[0-9a-f]{1,16}/0x[0-9a-f]{1,16}(?: \[(?P<mod>[\w-]{1,64})\])?")
_CONT = re.compile(
    r"^(?:CPU: \d|Hardware name:|task: |task:\S|Modules linked in:|Tainted:|PC is at |LR is at |pc : |lr : |sp : |"
    r"x\d{1,2}\s{0,2}: |[0-9a-f]{4}: [0-9a-f]{8}|Call [Tt]race:|Exception stack\(|\s*\[<[0-9a-f]{4,16}>\]|"
    r"\s*(?:\? )?[A-Za-z_][\w.]{0,127}\+0x[0-9a-f]{1,16}/0x|\s*</?(?:TASK|IRQ|NMI|SOFTIRQ)>|RIP: |RSP: |R[A-D]X: |"
    r"R[SD]I: |RBP: |R\d{1,2}: |FS: |CS: |CR2: |DR\d: |Code: |Process \S|Stack:|irq event stamp|hardirqs last|"
    r"softirqs last|Workqueue: |Mem abort info:|  ESR = |  EC = |  SET = |  FnV = |  EA, |  EA = |  S1PTW|"
    r"Data abort info:|  ISV = |  CM = |  Access size|  FSC = |user pgtable:|\[[0-9a-f]{16}\] pgd=|"
    r"Internal error|pstate: |Kernel panic|SMP: stopping|Kernel Offset:|CPU features:|Memory Limit:|"
    r"---\[ end |Sending NMI|NMI backtrace|rcu: |\t|\(detected by|\"echo 0 > |Not tainted|      Tainted|"
    r"      Not tainted|  \S|Showing busy workqueues|in_atomic\(\)|preempt_count|INFO: lockdep|Preemption disabled|"
    r"CPU#\d{1,5} Utilization every|\s{0,8}#\d{1,3}: {0,3}\d{1,3}% system|\d{1,5}-\.{3}|\s{0,8}\d{1,5}-\.{3})"
)  # fmt: skip


class Fault(NamedTuple):
    ts_ns: int  # the block's first line
    kind: str  # soft_lockup, hard_lockup, hung_task, rcu_stall, oops, bug, warning, panic, register_dump
    cpu: int  # -1: the block does not say
    pid: int
    comm: str
    functions: List[str]  # call-trace frames, in order (func or func [module]), at most MAX_FRAMES
    driver_functions: List[str]  # those of the NPU driver
    driver_modules: List[str]  # the driver's modules named in the trace, sorted
    lines: List[str]  # the text, at most MAX_LINES
    line_count: int
    end_ns: int  # the block's last line


class _Block:
    def __init__(self, ts: int, kind: str, fault: bool) -> None:
        self.ts = self.last = ts
        self.kind, self.fault = kind, fault
        self.cpu, self.pid, self.comm = -1, -1, ""
        self.lines: List[str] = []
        self.count = 0
        self.frames: List[Tuple[str, str]] = []

    def add(self, ts: int, text: str) -> None:
        self.last = max(self.last, ts)
        self.count += 1
        if len(self.lines) < MAX_LINES:
            self.lines.append(text[:MAX_LINE])
        task = _TASK.match(text)
        if task and self.pid < 0:
            self.cpu, self.pid, self.comm = int(task["cpu"]), int(task["pid"]), task["comm"]
        for m in _FRAME.finditer(text[:MAX_LINE]):
            frame = (m["func"], m["mod"] or "")
            if len(self.frames) < MAX_FRAMES and not text.startswith(("LR is at", "lr : ")) and \
                    (not self.frames or self.frames[-1] != frame):  # fmt: skip
                self.frames.append(frame)

    def header(self, kind: str, m: re.Match[str]) -> None:
        self.kind = kind
        groups = m.groupdict()
        if groups.get("cpu"):
            self.cpu = int(groups["cpu"])
        if groups.get("pid"):
            self.pid = int(groups["pid"])
        if groups.get("comm"):
            self.comm = str(groups["comm"])

    def value(self) -> Fault:
        frames = [f"{func} [{mod}]" if mod else func for func, mod in self.frames]
        driver = [f for (func, mod), f in zip(self.frames, frames) if _is_driver(func, mod)]
        mods = sorted({mod for func, mod in self.frames if mod and mod.startswith(DRIVER_MODULES)})
        return Fault(self.ts, self.kind, self.cpu, self.pid, self.comm, frames, driver, mods, self.lines, self.count,
                     self.last)  # fmt: skip


def _is_driver(func: str, mod: str) -> bool:
    return bool(mod and mod.startswith(DRIVER_MODULES)) or func.startswith(DRIVER_FUNCS)


def header_of(text: str) -> Optional[Tuple[str, re.Match[str]]]:
    for kind, rx in _HEADERS:
        m = rx.match(text)
        if m:
            return kind, m
    return None


class FaultAssembler:
    """feed(ts, line) -> (consumed, completed faults); flush() -> the open block's fault."""

    def __init__(self) -> None:
        self.block: Optional[_Block] = None
        self.blocks = 0  # faults completed

    @property
    def held_ns(self) -> Optional[int]:
        """The first line's time of the open block (its fault will be stamped there), or None."""
        return self.block.ts if self.block is not None and self.block.fault else None

    def feed(self, ts_ns: int, text: str) -> Tuple[bool, List[Fault]]:
        line = text[: MAX_LINE * 4].rstrip("\r\n")
        out: List[Fault] = []
        block = self.block
        head = header_of(line.lstrip())
        if block is not None:
            if head is not None and block.kind not in ("register_dump", "cut"):
                out += self._close()
            elif head is not None or _CONT.match(line) or line.strip() == "":
                if head is not None:
                    block.header(*head)
                block.add(ts_ns, line)
                if line.lstrip().startswith("---[ end "):
                    out += self._close()
                return True, out
            else:
                out += self._close()
        started = self._start(ts_ns, line, head)
        return started, out

    def _start(self, ts: int, line: str, head: Optional[Tuple[str, re.Match[str]]]) -> bool:
        if head is not None:
            self.block = _Block(ts, head[0], True)
            self.block.header(*head)
        elif line.strip() == _CUT:
            self.block = _Block(ts, "cut", True)
        elif _ALLOC.match(line):
            self.block = _Block(ts, "alloc_failure", False)
            return False  # the line itself is an allocation failure for the kmsg rules
        elif _BARE.match(line):
            self.block = _Block(ts, "register_dump", True)
        else:
            return False
        self.block.add(ts, line)
        return True

    def _close(self) -> List[Fault]:
        block, self.block = self.block, None
        if block is None or not block.fault:
            return []
        if block.kind == "cut":
            block.kind = "warning"
        self.blocks += 1
        return [block.value()]

    def expire(self, now_ns: int) -> List[Fault]:
        """A live log quiet since the open block's last line for QUIET_NS: the block is over."""
        if self.block is not None and now_ns - self.block.last >= QUIET_NS:
            return self._close()
        return []

    def flush(self) -> List[Fault]:
        return self._close()


def fault_event(fault: Fault, offset_ns: int = 0, **extra: Any) -> NpuEvent:
    """The NpuEvent of a kernel fault (kind "fault", op "kernel_fault"); `offset_ns` moves its times onto the
    trace clock."""
    args: Dict[str, Any] = {
        "fault": fault.kind, "cpu": fault.cpu, "comm": fault.comm, "functions": list(fault.functions),
        "driver_functions": list(fault.driver_functions), "driver_modules": list(fault.driver_modules),
        "text": "\n".join(fault.lines), "lines": fault.line_count, "end_ts_ns": fault.end_ns + offset_ns,
        "source": "kmsg", **extra,
    }  # fmt: skip
    return NpuEvent(fault.ts_ns + offset_ns, "fault", None, "kernel_fault", fault.pid, fault.cpu, args)
