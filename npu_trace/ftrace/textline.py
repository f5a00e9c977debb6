"""One line of ftrace text, told apart: an event, a header, a lost-events note, a stack frame, or something else.

Pure. `read_line(text)` -> `Line`. The forms read (each as the kernel or trace-cmd prints it):

    event   `cat trace` / `trace_pipe`:   `<comm>-<pid> [(<tgid>|-----)] [<cpu>] [<flags>] <secs>.<frac>: <rest>`
            (the irq-flags/preempt columns of any width, `d.h2.`, `dNs..`, or none; the time in seconds with any
            number of decimals, or a raw count for the counter, x86-tsc and uptime clocks);
            `trace-cmd report`: the same, with an optional `<buffer>: ` before the task and its `-l` form (the
            CPU number glued to the flags: `0d..2`).
            <rest> is `<name>: <text>`, a function tracer's `<func> <-<parent>`, `<stack trace>`,
            `<user stack trace>`, a syscall as the kernel prints it (`sys_getpid()`, `sys_read -> 0x5`), or a
            trace_printk() from `<func+0x28/0x6c>: <text>` (named "bprint").
    header  `#` comments (the `# tracer:` header), blank lines, `cpus=N`, `version = N`, `CPU N is empty`,
            `##### CPU N buffer started ####`
    lost    `CPU:N [LOST M EVENTS]` (M may be absent: `[LOST EVENTS]`), trace-cmd's `CPU:N [M EVENTS DROPPED]`
            (`[EVENTS DROPPED]`), either after an instance's `<buffer>: `
    frame   a stack trace's frame (` => func+0x1/0x2`), part of the event before it
    other   anything else (a prompt, a pasted sentence, a line cut in two)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

S = 1_000_000_000
LATEST = (1 << 63) - 1  # the latest stamp a trace's columns hold (ns, or a raw count)
MAX_LINE = 1 << 16  # a line longer than this is not read as an event (it is counted as other)

_EVENT = re.compile(
    r"\s*(?:(?P<buffer>[^\s:]+):\s+)?"
    r"(?P<comm>\S.*?|)-(?P<pid>\d+)\s+"
    r"(?:\(\s*(?P<tgid>\d+|-+)\)\s+)?"
    r"(?:\[(?P<cpu>\d+)\](?:\s+(?P<flags>[.A-Za-z0-9]{2,8}))?|(?P<lcpu>\d+)(?P<lflags>[.A-Za-z][.A-Za-z0-9]{1,7}))"
    r"\s+(?P<secs>\d+)(?:\.(?P<frac>\d+))?:(?:\s(?P<rest>.*)|$)",
    re.S,
)
_NAMED = re.compile(r"(?P<name>[^\s:]+):(?:\s+(?P<text>.*)|$)", re.S)
_FUNCTION = re.compile(r"(?P<func>\S+)\s+<-(?P<parent>\S+)")
_SYSCALL = re.compile(r"sys_(?P<call>\w+)(?:\((?P<args>.*)\)| -> (?P<ret>\S+))")
_HEADER = re.compile(r"#.*|cpus=\d+|version\s*=\s*\d+|CPU \d+ is empty|#+ CPU \d+ buffer started #+")
# the kernel's `CPU:N [LOST M EVENTS]`, trace-cmd report's `CPU:N [M EVENTS DROPPED]`; either without its count, and
# after an instance's name (`<buffer>: `) as trace-cmd prints it for a trace of an instance
_LOST = re.compile(r"(?:\S+:\s+)?CPU:\s*(?P<cpu>\d+)\s+\[(?:LOST\s+(?:(?P<n>\d+)\s+)?EVENTS|"
                   r"(?:(?P<dropped>\d+)\s+)?EVENTS\s+DROPPED)\]")
_FRAME = re.compile(r"\s*=>\s.*")
_SYMBOL = re.compile(r"[\w.$]+\+0x[0-9a-fA-F]+/0x[0-9a-fA-F]+")


@dataclass(frozen=True)
class Line:
    kind: str  # event, header, lost, frame, other
    comm: str = ""
    pid: int = 0
    tgid: Optional[int] = None
    cpu: int = 0
    flags: str = ""
    ts: int = 0  # ns (seconds given) or the raw count
    counts: bool = False  # the time was a raw count, not seconds
    digits: int = 0  # the time's decimals (6: µs)
    name: str = ""
    text: str = ""
    lost: Optional[int] = None  # lost: how many (None: not said)


def read_line(text: str) -> Line:
    line = text.rstrip("\r\n")
    stripped = line.strip()
    if not stripped or _HEADER.fullmatch(stripped):
        return Line("header")
    lost = _LOST.fullmatch(stripped)
    if lost:
        n = lost.group("n") or lost.group("dropped")
        return Line("lost", cpu=int(lost.group("cpu")), lost=int(n) if n else None)
    if _FRAME.fullmatch(line):
        return Line("frame", text=stripped[2:].strip())
    m = _EVENT.fullmatch(line) if len(line) <= MAX_LINE else None
    return _event(m) if m else Line("other")


def _event(m: re.Match[str]) -> Line:
    cpu = m.group("cpu") if m.group("cpu") is not None else m.group("lcpu")
    flags = m.group("flags") or m.group("lflags") or ""
    tgid = m.group("tgid")
    name, body = _rest((m.group("rest") or "").strip())
    frac = m.group("frac")
    ts = int(m.group("secs")) * S + int((frac + "000000000")[:9]) if frac is not None else int(m.group("secs"))
    if ts > LATEST:
        return Line("other")  # no ring buffer counts that far (292 years of ns): not an event's time
    return Line("event", m.group("comm").strip(), int(m.group("pid")), int(tgid) if tgid and tgid.isdigit() else None,
                int(cpu), flags, ts, frac is None, len(frac or ""), name, body)  # fmt: skip


def _rest(rest: str) -> Tuple[str, str]:
    """The event's name and its text."""
    if rest in ("<stack trace>", "<user stack trace>"):
        return ("kernel_stack" if rest == "<stack trace>" else "user_stack"), ""
    function = _FUNCTION.fullmatch(rest)
    if function:
        return "function", rest
    call = _SYSCALL.fullmatch(rest)
    if call:
        return ("sys_enter_" if call.group("ret") is None else "sys_exit_") + call.group("call"), rest
    named = _NAMED.fullmatch(rest)
    if named and _SYMBOL.fullmatch(named.group("name")):
        return "bprint", rest  # trace_printk() from a function at an offset (the kernel's %pS of its ip)
    if named:
        return named.group("name"), (named.group("text") or "").strip()
    return "", rest


# ---- the irq-flags and preempt columns -> common_flags, common_preempt_count (kernel/trace/trace_output.c) ------
# trace_flag_type: IRQS_OFF 0x01, NEED_RESCHED_LAZY 0x02 (IRQS_NOSUPPORT before 6.12), NEED_RESCHED 0x04,
# HARDIRQ 0x08, SOFTIRQ 0x10, PREEMPT_RESCHED 0x20, NMI 0x40, BH_OFF 0x80
_IRQS = {"d": 0x01, "D": 0x81, "b": 0x80, "X": 0x02, ".": 0}
_RESCHED = {"N": 0x24, "n": 0x04, "p": 0x20, "B": 0x26, "L": 0x22, "l": 0x02, "b": 0x06, ".": 0}
_CONTEXT = {"Z": 0x48, "z": 0x40, "H": 0x18, "h": 0x08, "s": 0x10, ".": 0}


def flag_bits(flags: str) -> Tuple[int, int]:
    """(common_flags, common_preempt_count) of a line's latency columns: irqs off, need-resched, hard/soft irq,
    then the preempt depth (a hex digit or '.') and, on 5.x+ kernels, the migrate-disable depth; (0, 0) for
    columns it cannot read."""
    if len(flags) < 4 or flags[0] not in _IRQS or flags[1] not in _RESCHED or flags[2] not in _CONTEXT:
        return 0, 0
    depth = [0 if c == "." else int(c, 16) if c in "0123456789abcdefABCDEF" else -1 for c in flags[3:5]]
    if -1 in depth:
        return 0, 0
    preempt = depth[0] | (depth[1] << 4 if len(depth) > 1 else 0)
    return _IRQS[flags[0]] | _RESCHED[flags[1]] | _CONTEXT[flags[2]], preempt & 0xFF
