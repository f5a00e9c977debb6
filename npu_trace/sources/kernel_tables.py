"""The kernel's tables a session's own ftrace events are shown with (`npu_trace.ftrace.special`), read when the
session starts: trace_printk's format strings (tracefs `printk_formats`) and the kernel's symbols
(`/proc/kallsyms`). A recording keeps both in its header (`npu_trace.recording.writer.build_header`).

The symbols are kept whole only where the session traces stacks or function calls (`--stacktrace`, or one of
`SYMBOL_EVENTS` selected): a stack is shown frame by frame by name. Otherwise the table is cut to the functions
that write trace markers (`MARKER_FUNCTIONS`, each with the symbol after it, which bounds its size), so that a
trace_marker write still shows as `tracing_mark_write: text` (a few lines instead of megabytes in every
recording; the table is readable by root only, as every recording is).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from npu_trace.errors import SourceError
from npu_trace.ftrace.printk import MAX_PRINTK_BYTES, parse_formats
from npu_trace.ftrace.special import KernelText
from npu_trace.ftrace.symbols import MAX_KALLSYMS_BYTES, Symbols, parse_lines
from npu_trace.ftrace.tracefs import Tracefs

KALLSYMS = "/proc/kallsyms"
SYMBOL_EVENTS = ("ftrace:kernel_stack", "ftrace:user_stack", "ftrace:function", "ftrace:funcgraph_entry",
                 "ftrace:funcgraph_exit")  # fmt: skip
MARKER_FUNCTIONS = ("tracing_mark_write", "tracing_mark_raw_write")


@dataclass(frozen=True)
class KernelTables:
    """`printk_formats` and `kallsyms` texts ("": not read); `only`: the functions the kallsyms text is cut to
    (None: whole)."""

    printk_formats: str = ""
    kallsyms: str = ""
    only: Optional[Tuple[str, ...]] = None

    def kernel_text(self, byteorder: str = sys.byteorder) -> KernelText:
        symbols = Symbols.parse(self.kallsyms, self.only) if self.kallsyms else None
        return KernelText(symbols, parse_formats(self.printk_formats), byteorder)


def needs_symbols(events: Iterable[str], stacktrace: bool) -> bool:
    """Whether a session tracing `events` (and stacks, with `stacktrace`) keeps the whole symbol table."""
    return stacktrace or any(event in SYMBOL_EVENTS for event in events)


def read_tables(fs: Tracefs, whole: bool, kallsyms: str = KALLSYMS) -> KernelTables:
    """The tables of this kernel: the symbols whole, or cut to the trace marker's writers."""
    text = read_kallsyms(kallsyms)
    only = None if whole else MARKER_FUNCTIONS
    return KernelTables(read_printk_formats(fs), text if whole else cut(text, MARKER_FUNCTIONS), only)


def read_printk_formats(fs: Tracefs) -> str:
    """tracefs `printk_formats` ("" where the kernel has none, or when it is larger than any kernel's)."""
    try:
        text = fs.printk_formats()
    except SourceError:
        return ""
    return text if len(text) <= MAX_PRINTK_BYTES else ""


def read_kallsyms(path: str = KALLSYMS) -> str:
    """/proc/kallsyms ("" when unreadable, larger than MAX_KALLSYMS_BYTES, or showing no address: a process
    without CAP_SYSLOG under kptr_restrict reads zeros)."""
    try:
        with open(path, "rb") as f:
            blob = f.read(MAX_KALLSYMS_BYTES + 1)
    except OSError:
        return ""
    if len(blob) > MAX_KALLSYMS_BYTES:
        return ""
    text = blob.decode("utf-8", "replace")
    return text if any(addr for addr, _, _ in parse_lines(text[:65536])) else ""


def cut(text: str, names: Sequence[str]) -> str:
    """The lines of `names` in a kallsyms text, each followed by the next line at a higher address (its end:
    the kernel's own symbols are listed in address order); "" when none is there."""
    out: List[str] = []
    for name in names:
        m = re.search(rf"^([0-9a-fA-F]+) [tT] {re.escape(name)}$", text, re.M)
        if m is None:
            continue
        addr, pos = int(m.group(1), 16), m.end() + 1
        for line in text[pos : pos + 4096].splitlines():
            head = line.split(" ", 1)[0]
            if _is_hex(head) and int(head, 16) > addr:
                out += [m.group(0), line]
                break
    return "\n".join(out) + "\n" if out else ""


def _is_hex(word: str) -> bool:
    return bool(word) and all(c in "0123456789abcdefABCDEF" for c in word)
