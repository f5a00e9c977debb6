"""The kmsg source: new `/dev/kmsg` records, parsed by the driver's rules, as NpuEvents on the trace clock.

Output choice: NpuEvents, fed with `Analysis.feed_events` (the rules already give kind, op and device; a
synthetic ftrace format would only be mapped back to the same thing). Losses are NpuEvents of kind "lost" in the
stream and `Loss` records in `losses` (for a LossLedger): "overwritten" (records gone before they were read: a
sequence gap, the read failing with EPIPE) and "ratelimited" (the driver's `log_to_printk_and_ringbuf: N callbacks
suppressed`).

Kernel fault blocks (a `BUG:`, an Oops, a lockup, a register dump and call trace: many records) are read by
npu_trace.device.kfault into one "fault" event stamped at the block's first line, once the block ended (another
line, or the log quiet for its QUIET_NS); `held_ns` says where a block still being read will be stamped.

Clock: kmsg timestamps are the kernel's local clock in µs, close to CLOCK_MONOTONIC but not equal. At open the
source writes a marker record and compares its kmsg timestamp with clock_gettime(CLOCK_MONOTONIC) taken around the
write: `offset_ns = mono - ts_us * 1000` (error: the write's duration, `offset_error_ns`). Events carry
`ts_us * 1000 + offset_ns`. Without write access the offset is 0 and `offset_measured` False.

The file is opened non-blocking and positioned at the end (SEEK_END): only records newer than the open are read.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any, Dict, List, Optional

from npu_trace.device.kfault import FaultAssembler, fault_event
from npu_trace.device.kmsg import (
    KMSG,
    MAX_RECORD,
    KmsgMatcher,
    KmsgRecord,
    SeqTracker,
    driver_suppressed,
    parse_record,
    to_event,
    write_kmsg,
)
from npu_trace.events import Loss, NpuEvent, lost_event

SOURCE = "kmsg"
MARKER = "npu-trace: clock marker"
MAX_READS = 10_000  # records per read() call, so one call never runs unbounded
# a draining read (the session's last): MAX_READS at a time until the log is read to its end, at most this many
# times: more than any kernel's log buffer holds (a log still flooding after the stop is not the session's)
DRAIN_READS = 100


class KmsgSource:
    """open() -> read() -> [NpuEvent, ...] (non-blocking) -> close(). Also a context manager."""

    def __init__(self, path: str = KMSG, matcher: Optional[KmsgMatcher] = None) -> None:
        self.path = path
        self.matcher = matcher or KmsgMatcher()
        self.fd = -1
        self.seq = SeqTracker()
        self.offset_ns = 0
        self.offset_error_ns = 0
        self.offset_measured = False
        self.losses: List[Loss] = []
        self.stats: Dict[str, int] = {"records": 0, "events": 0, "malformed": 0, "other": 0, "epipe": 0}
        self._pending: List[KmsgRecord] = []
        self._epipe = False
        self.caught_up = False  # the last read() reached the end of the log (not stopped by MAX_READS)
        self.faults = FaultAssembler()  # kernel fault blocks (BUG, Oops, lockups, register dumps): one event each

    def __enter__(self) -> KmsgSource:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self, measure: bool = True) -> None:
        self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        opened = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        os.lseek(self.fd, 0, os.SEEK_END)
        if measure and self.measure_offset():
            # SEEK_END can land before the last record (not yet finalized): drop what predates the open
            slack = self.offset_error_ns
            self._pending = [r for r in self._pending if r.ts_us * 1000 + self.offset_ns >= opened - slack]

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def clock_note(self) -> Dict[str, Any]:
        """The measured offset, as a recording's note record carries it."""
        return {"t": "note", "kind": "clock_offset", "source": SOURCE, "clock": "mono",
                "offset_ns": self.offset_ns, "error_ns": self.offset_error_ns,
                "measured": self.offset_measured}  # fmt: skip

    # ---- clock ------------------------------------------------------------------------------------
    def measure_offset(self, timeout_s: float = 1.0) -> bool:
        token = f"{MARKER} {os.getpid()}-{time.monotonic_ns()}"
        try:
            before, after = write_kmsg(f"<7>{token}")
        except OSError:
            return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for rec in self._records():
                if rec.msg == token:
                    self._set_offset(rec.ts_us, before, after)
                    return True
                self._pending.append(rec)
            time.sleep(0.001)
        return False

    def _set_offset(self, ts_us: int, before: int, after: int) -> None:
        self.offset_ns = (before + after) // 2 - ts_us * 1000
        self.offset_error_ns = (after - before) // 2 + 1000
        self.offset_measured = True

    # ---- reading ----------------------------------------------------------------------------------
    def read(self, drain: bool = False) -> List[NpuEvent]:
        """The records available now (at most MAX_READS; `drain`: up to the end of the log, the session's last
        read), as NpuEvents (losses included as kind "lost")."""
        out: List[NpuEvent] = []
        pending, self._pending = self._pending, []
        records = self._records()
        for _ in range(DRAIN_READS - 1 if drain else 0):
            if self.caught_up:
                break
            records += self._records()
        for rec in pending + records:
            self._record(rec, out)
        if self.caught_up and self.faults.block is not None:  # a block the log has been quiet after is over
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            out += [fault_event(f) for f in self.faults.expire(now - self.offset_error_ns)]
        return out

    @property
    def held_ns(self) -> Optional[int]:
        """The time of a kernel fault block still being read (its event will be stamped there), or None."""
        return self.faults.held_ns

    def finish(self) -> List[NpuEvent]:
        """The last events: a kernel fault block still open."""
        return [fault_event(f) for f in self.faults.flush()]

    def _records(self) -> List[KmsgRecord]:
        out: List[KmsgRecord] = []
        self.caught_up = False
        while len(out) < MAX_READS:
            try:
                data = os.read(self.fd, MAX_RECORD)
            except BlockingIOError:
                self.caught_up = True
                break
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                self.stats["epipe"] += 1  # overwritten: the next read resumes at the oldest record
                self._epipe = True
                continue
            if not data:
                self.caught_up = True
                break
            rec = parse_record(data)
            if rec is None:
                self.stats["malformed"] += 1
                continue
            out.append(rec)
        return out

    def _record(self, rec: KmsgRecord, out: List[NpuEvent]) -> None:
        self.stats["records"] += 1
        ts = rec.ts_us * 1000 + self.offset_ns
        gap = self.seq.see(rec.seq)
        if gap or self._epipe:
            self._loss(Loss(SOURCE, -1, "overwritten", gap, ts), out)
            self._epipe = False
        dropped = driver_suppressed(rec.msg)
        if dropped:
            self._loss(Loss(SOURCE, -1, "ratelimited", dropped, ts), out)
            return
        if rec.msg.startswith(MARKER):
            return
        used, done = self.faults.feed(ts, rec.msg)
        out.extend(fault_event(f, seq=rec.seq) for f in done)
        if used:
            self.stats["fault_lines"] = self.stats.get("fault_lines", 0) + 1
            return
        parsed = self.matcher.parse(rec.msg)
        if parsed is None:
            self.stats["other"] += 1
            return
        self.stats["events"] += 1
        out.append(to_event(rec, parsed, self.offset_ns))

    def _loss(self, loss: Loss, out: List[NpuEvent]) -> None:
        self.losses.append(loss)
        out.append(lost_event(loss))

    def drain_losses(self) -> List[Loss]:
        losses, self.losses = self.losses, []
        return losses
