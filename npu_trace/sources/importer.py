"""`npu-trace import`: logs saved before npu-trace ran (a kernel log, a trace-cmd `trace.dat`) and application logs,
turned into a recording that `check`, `replay`, `export` and the TUI read like any other.

A kernel log (`read_kernel_log`): each line's form and times by npu_trace.device.kernlog; fault blocks by
npu_trace.device.kfault; driver lines by the kmsg rules (every `[ascend]` line is an event: a rule's kind, else
"log"); the driver's rate-limiter lines are losses, as live. The recording's clock is the log's own: the kernel's
clock since boot where the lines carry it (`dmesg`, `journalctl -o short-monotonic`, syslog's `[uptime]`,
device slog), else their wall clock (`dmesg -T`, syslog without `[uptime]`), else line order (1 µs apart).
Lines without a time take the previous line's.

Application logs (`read_app_logs`) carry wall-clock times. They are put on the recording's clock through a clock
anchor (`Anchor`: a pair of the same instant on the wall clock and the kernel's clock): given (`--boot-time`:
the wall time of the kernel clock's zero), found in the log itself (a line carrying both: device slog, syslog
with `[uptime]`), this host's own (`--this-boot`: the log is of this boot; CLOCK_MONOTONIC against
CLOCK_REALTIME now, as a live recording's header anchors them), or the log's clock being the wall clock already.
Each event says how exact its place is: `clock_error_ns` (the anchor's error) beside `time_resolution_ns`.

A trace.dat (`npu_trace.ftrace.tracedat`): its raw pages, header_page and format files go into the recording
unchanged, each CPU's pages in time order and the CPUs interleaved by page time, as a live session reads them;
its kallsyms, printk formats and saved process names too (its trace_printk messages, trace markers and stacks
are shown as trace-cmd shows them). A format that fails the format check, of an event no record is of, is left
out and said (a real 4.x kernel names two fields of regmap:regcache_sync `type`).
"""

from __future__ import annotations

import bisect
import os
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import npu_trace
from npu_trace.device.applog import AppError, AppLogParser, app_event, rolls_over
from npu_trace.device.kernlog import KernelLine, read_line
from npu_trace.device.kfault import FaultAssembler, fault_event
from npu_trace.device.kmsg import KmsgMatcher, KmsgRecord, driver_suppressed, short_bdf, to_event
from npu_trace.errors import InputError, UsageError
from npu_trace.events import Loss, NpuEvent, lost_event
from npu_trace.recording.writer import RecordingWriter, clock_anchor

S, US = 1_000_000_000, 1_000
# a text log has no ring-buffer pages; its recording still carries a page header (the common 64-bit layout)
TEXT_HEADER_PAGE = (
    "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
    "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
    "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
    "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n"
)
MAX_INPUT_BYTES = 4 << 30  # a saved log larger than this is refused (the import holds its events in memory)


@dataclass(frozen=True)
class Anchor:
    mono_ns: int  # the kernel clock (or trace clock) ...
    realtime_ns: int  # ... and the wall clock at the same instant
    error_ns: int
    source: str  # "boot-time", "log", "this-boot", "wall" (the log's clock is the wall clock)

    def to_trace(self, wall_ns: int) -> int:
        return wall_ns - self.realtime_ns + self.mono_ns


@dataclass
class KernelImport:
    events: List[NpuEvent] = field(default_factory=list)
    clock: str = "order"  # uptime, wall, order
    anchor: Optional[Anchor] = None
    stats: Dict[str, int] = field(default_factory=dict)
    forms: Dict[str, int] = field(default_factory=dict)


def read_text(path: str) -> List[str]:
    """The file's lines (undecodable bytes replaced), or one clear InputError."""
    try:
        if os.path.getsize(path) > MAX_INPUT_BYTES:
            raise InputError(f"{path}: larger than {MAX_INPUT_BYTES >> 30} GiB: cut it first")
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            return f.read().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None


def read_kernel_log(lines: Sequence[str], tz: Optional[tzinfo] = None, year: Optional[int] = None) -> KernelImport:
    parsed = _parsed(lines, tz, year)
    out = KernelImport()
    has_up = any(p.uptime_ns is not None for p in parsed)
    out.clock = "uptime" if has_up else ("wall" if any(p.wall_ns is not None for p in parsed) else "order")
    both = next((p for p in parsed if p.uptime_ns is not None and p.wall_ns is not None), None)
    if out.clock == "wall":
        out.anchor = Anchor(0, 0, max((p.wall_res_ns for p in parsed if p.wall_ns), default=S), "wall")
    elif both is not None:
        out.anchor = Anchor(both.uptime_ns or 0, both.wall_ns or 0, both.wall_res_ns, "log")
    _events(parsed, out)
    return out


def _parsed(lines: Sequence[str], tz: Optional[tzinfo], year: Optional[int]) -> List[KernelLine]:
    """Each line read. A syslog line, which has no year, is of `year` (default this one), then of the next year
    from the first one that falls half a year or more before the syslog line before it (Dec 31, then Jan 1)."""
    year = year if year is not None else datetime.now().year
    out, last = [], None
    for text in lines:
        p = read_line(text, tz, year)
        if p.form == "syslog" and p.wall_ns is not None:
            if rolls_over(p.wall_ns, last, year):
                year += 1
                p = read_line(text, tz, year)
            last = p.wall_ns if p.wall_ns is not None else last
        out.append(p)
    return out


def _events(parsed: Sequence[Any], out: KernelImport) -> None:
    matcher, faults = KmsgMatcher(), FaultAssembler()
    stats = {"lines": len(parsed), "kernel_lines": 0, "driver_events": 0, "faults": 0, "other": 0, "untimed": 0}
    last = 0
    for no, p in enumerate(parsed, 1):
        if p.form == "none":
            stats["other"] += 1
            continue
        stats["kernel_lines"] += 1
        out.forms[p.form] = out.forms.get(p.form, 0) + 1
        ts = _line_time(p, out, last, no)
        stats["untimed"] += ts is None
        ts = last if ts is None else ts
        last = ts
        used, done = faults.feed(ts, p.msg)
        out.events += [fault_event(f, line=no) for f in done]
        if not used:
            _driver_line(matcher, p.msg, ts, no, p.form, out, stats)
    out.events += [fault_event(f) for f in faults.flush()]
    stats["faults"] = faults.blocks
    stats["bdf_resolved"] = resolve_bdf(out.events)
    out.stats = stats


def resolve_bdf(events: List[NpuEvent]) -> int:
    """Give a device to the driver lines that name only a PCI address (`Pcie hotreset, unbind driver.
    (bdf=3b:00.0)`), from the nearest line of the log that names both (a later one too: live, the channels wait
    for it; a saved log has it already). In place; returns how many were resolved."""
    known: Dict[str, List[Tuple[int, int]]] = {}  # bdf -> (index, dev) of the lines naming both, in order
    for i, ev in enumerate(events):
        bdf = ev.args.get("bdf")
        if ev.dev is not None and isinstance(bdf, str) and bdf:
            known.setdefault(short_bdf(bdf), []).append((i, ev.dev))
    resolved = 0
    for i, ev in enumerate(events):
        bdf = ev.args.get("bdf")
        if ev.dev is None and isinstance(bdf, str) and short_bdf(bdf) in known:
            pairs = known[short_bdf(bdf)]
            at = bisect.bisect(pairs, (i, -1))
            near = [pairs[j] for j in (at - 1, at) if 0 <= j < len(pairs)]
            events[i] = ev._replace(dev=min(near, key=lambda p: abs(p[0] - i))[1])
            resolved += 1
    return resolved


def _line_time(p: Any, out: KernelImport, last: int, no: int) -> Optional[int]:
    if out.clock == "order":
        return no * US
    if out.clock == "uptime":
        if p.uptime_ns is not None:
            return int(p.uptime_ns)
        return out.anchor.to_trace(p.wall_ns) if out.anchor is not None and p.wall_ns is not None else None
    return int(p.wall_ns) if p.wall_ns is not None else None


def _driver_line(matcher: KmsgMatcher, msg: str, ts: int, no: int, form: str, out: KernelImport,
                 stats: Dict[str, int]) -> None:  # fmt: skip
    dropped = driver_suppressed(msg)
    if dropped:
        out.events.append(lost_event(Loss("kmsg", -1, "ratelimited", dropped, ts)))
        return
    parsed = matcher.parse(msg)
    if parsed is None:
        stats["other"] += 1
        return
    rec = KmsgRecord(5, 0, no, ts // US, "-", msg, {})
    ev = to_event(rec, parsed, 0)
    ev.args.update(line=no, form=form)
    out.events.append(ev._replace(ts_ns=ts))
    stats["driver_events"] += 1


def read_app_logs(paths: Sequence[str], tz: Optional[tzinfo] = None, year: Optional[int] = None,
                  ) -> List[Tuple[str, List[AppError], Dict[str, int]]]:  # fmt: skip
    out = []
    for path in paths:
        parser = AppLogParser(tz, year)
        errors: List[AppError] = []
        for line in read_text(path):
            errors += parser.feed(line)
        errors += parser.flush()
        out.append((path, errors, dict(parser.stats)))
    return out


def app_events(path: str, errors: Iterable[AppError], anchor: Anchor) -> Tuple[List[NpuEvent], int]:
    """The errors on the recording's clock, an untimed one at the time of the error before it (those before the
    first timed one: at its time), marked `time_inferred`; and how many could not be placed (a file whose errors
    all lack a time)."""
    listed = list(errors)
    first = next((err.wall_ns for err in listed if err.wall_ns is not None), None)
    if first is None:
        return [], len(listed)
    events: List[NpuEvent] = []
    last = first
    for err in listed:
        wall = err.wall_ns if err.wall_ns is not None else last
        extra = {"file": os.path.basename(path), "clock_error_ns": anchor.error_ns, "anchor": anchor.source}
        if err.wall_ns is None:
            extra["time_inferred"] = 1
        events.append(app_event(err, anchor.to_trace(wall), **extra))
        last = wall
    return events, 0


def resolve_anchor(kernel: KernelImport, boot_time_ns: Optional[int], this_boot: bool) -> Optional[Anchor]:
    """The anchor that maps wall-clock times onto the kernel log's clock (see the module docstring)."""
    if kernel.clock == "wall":
        return kernel.anchor
    if boot_time_ns is not None:
        return Anchor(0, boot_time_ns, 0, "boot-time")
    if this_boot:
        now = clock_anchor()
        return Anchor(now["mono_ns"], now["realtime_ns"], 1_000_000, "this-boot")
    return kernel.anchor


def need_anchor(anchor: Optional[Anchor], app_logs: Sequence[str]) -> Anchor:
    if anchor is None:
        raise UsageError(
            "the application logs' wall-clock times cannot be placed on the kernel log's clock (it has no line "
            "with both): give --boot-time (the wall time the kernel clock counts from), or --this-boot if the "
            f"log is of this host's current boot ({', '.join(os.path.basename(p) for p in app_logs)})"
        )
    return anchor


def import_header(profile: str, clock: str, anchor: Optional[Anchor], extra: Dict[str, Any],
                  **fields: Any) -> Dict[str, Any]:  # fmt: skip
    """The header of an imported recording (what is unknown of the source host is left empty)."""
    header: Dict[str, Any] = {
        "tool_version": npu_trace.__version__, "host": "", "kernel": "", "machine": "", "cpus": 0,
        "byteorder": sys.byteorder, "clock": clock,
        "clock_anchor": {"mono_ns": anchor.mono_ns if anchor else 0,
                         "realtime_ns": anchor.realtime_ns if anchor else 0},
        "profile": profile, "events": [], "formats": [], "header_page": TEXT_HEADER_PAGE, "page_size": 4096,
        "created_by": f"npu-trace {npu_trace.__version__} import on {socket.gethostname()}", "extra": extra,
    }  # fmt: skip
    header.update(fields)
    return header


def write_events(writer: RecordingWriter, events: List[NpuEvent]) -> None:
    """The events in one time order (stable: a file's own order among equal times)."""
    events.sort(key=lambda ev: ev.ts_ns)
    writer.add_events(events)
