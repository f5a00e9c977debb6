"""The application-log channel: CANN and framework logs followed like `tail -F`, their driver-level errors as
`app_error` NpuEvents on the trace clock (npu_trace.device.applog reads the lines).

Following: each path is opened at its end (only what is written from now on is read; a path that does not
exist yet is opened when it appears, from its start). A read takes the new whole lines (a partial last line
waits for its end); a file replaced under its name (rotation: another inode) is read to its end, then the new
one from its start; a file cut shorter (truncation: `>` or copytruncate) is read again from its start. At most
`MAX_READ` bytes per file per read.

Clock: the lines carry the writer's wall-clock times. At open, CLOCK_MONOTONIC (the trace clock) and
CLOCK_REALTIME are read together (the realtime read between two monotonic ones) and every time is moved by
their difference: `ts = wall - realtime + mono`. How exact that is: the anchor's bracket (`clock_error_ns`), the
line's own resolution (`time_resolution_ns`: µs for CANN, a second for some frameworks), and any step of the
wall clock since the open (NTP) — the events carry the first two. A report without a time is stamped when it
is read (`time: "receipt"`).

A report ends at the next report's first line; one the application stopped after is ended when its file has
been quiet for `QUIET_S`, or by the session's last read (`read(final=True)`), which ends every open report.
The watermark (no event stamped earlier can still come) is the read's start less `LAG_NS`: CANN's logger and
the frameworks flush their files late; a line older than that arrives too late for the ordered merge and is
counted there as lost ("late").
"""

from __future__ import annotations

import os
import time
from datetime import tzinfo
from typing import Dict, List, Optional, Sequence

from npu_trace.device.applog import AppError, AppLogParser, app_event
from npu_trace.events import NpuEvent

SOURCE = "app_log"
MAX_READ = 1 << 20
QUIET_S = 0.5
LAG_NS = 2_000_000_000


def anchor_now() -> Dict[str, int]:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    real = time.time_ns()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return {"mono_ns": (before + after) // 2, "realtime_ns": real, "error_ns": (after - before) // 2 + 1}


class _Follow:
    def __init__(self, path: str, tz: Optional[tzinfo]) -> None:
        self.path = path
        self.parser = AppLogParser(tz)
        self.fd = -1
        self.ino: Optional[int] = None
        self.pos = 0
        self.tail = b""
        self.last_line = time.monotonic()
        self.reopened = 0

    def open(self, at_end: bool) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return  # not there (yet): tried again at the next read
        st = os.fstat(fd)
        self.fd, self.ino, self.pos, self.tail = fd, st.st_ino, st.st_size if at_end else 0, b""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lines(self) -> List[str]:
        """The new whole lines (following a rotation or a truncation)."""
        if self.fd < 0:
            self.open(at_end=False)
            if self.fd < 0:
                return []
        out = self._drain()
        try:
            st = os.stat(self.path)
        except OSError:
            return out  # moved away, not replaced yet: keep the old file
        if st.st_ino != self.ino:
            out += self._drain() + ([self.tail.decode("utf-8", "replace")] if self.tail else [])
            self.close()
            self.reopened += 1
            self.open(at_end=False)
            out += self._drain() if self.fd >= 0 else []
        elif st.st_size < self.pos:
            self.pos, self.tail = 0, b""
            self.reopened += 1
            out += self._drain()
        return out

    def _drain(self) -> List[str]:
        try:
            data = os.pread(self.fd, MAX_READ, self.pos)
        except OSError:
            return []
        self.pos += len(data)
        blob = self.tail + data
        *whole, self.tail = blob.split(b"\n")
        if whole:
            self.last_line = time.monotonic()
        return [line.decode("utf-8", "replace") for line in whole]


class AppLogSource:
    """open() -> read() -> [NpuEvent] (non-blocking) -> close(); `watermark_ns` after each read."""

    def __init__(self, paths: Sequence[str], tz: Optional[tzinfo] = None) -> None:
        self.follows = [_Follow(p, tz) for p in paths]
        self.anchor = anchor_now()
        self.watermark_ns = 0
        self.stats: Dict[str, int] = {"lines": 0, "errors": 0, "untimed": 0}

    def open(self) -> None:
        self.anchor = anchor_now()
        for f in self.follows:
            f.open(at_end=True)

    def close(self) -> None:
        for f in self.follows:
            f.close()

    def read(self, final: bool = False) -> List[NpuEvent]:
        """The errors of the new lines; `final`: the session's last read, every open report ended."""
        started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        out: List[NpuEvent] = []
        for f in self.follows:
            errors: List[AppError] = []
            lines = f.lines()
            self.stats["lines"] += len(lines)
            for line in lines:
                errors += f.parser.feed(line)
            quiet = not lines and time.monotonic() - f.last_line >= QUIET_S
            if f.parser.block is not None and (final or quiet):
                errors += f.parser.flush()
            out += [self.event(err, f.path, started) for err in errors]
        self.stats["errors"] += len(out)
        self.watermark_ns = started - LAG_NS
        out.sort(key=lambda ev: ev.ts_ns)
        return out

    def event(self, err: AppError, path: str, received_ns: int) -> NpuEvent:
        a = self.anchor
        extra = {"file": os.path.basename(path), "clock_error_ns": a["error_ns"], "anchor": "live"}
        if err.wall_ns is None:
            self.stats["untimed"] += 1
            return app_event(err, received_ns, time="receipt", **extra)
        return app_event(err, err.wall_ns - a["realtime_ns"] + a["mono_ns"], **extra)

    def header(self) -> Dict[str, object]:
        return {"paths": [f.path for f in self.follows], "anchor": dict(self.anchor), "lag_ns": LAG_NS}
