"""The flight recorder: a live session's last minutes in memory (`FlightRing`), dumped to a directory around
incidents (`IncidentPolicy`), each dump an ordinary `.npt` recording of its window.

It is a pump sink (`__call__(batch)`: every batch goes into the ring, and into the dump being written) and the
detectors' listener (`judge(findings, now, open_resets)`: what the live analysis found, by event time). When an
incident opens, its dump is created at once and the ring's batches from the window's start are written to it
as `record` would have written them (`npu_trace.sinks.batch_writer`); the live batches follow until the incident
closes; then the trailer (what the dump holds, why it ended), the rename from `.partial` to its final name and
the directory's retention bound. Memory stays at the ring's bound whatever the incident's length: the dump
streams to disk, and a crash leaves a readable (truncated) `.partial`.

A dump carries what a replay needs: the session's header (formats, header_page, scope, channels), a `window`
entry saying it is a window and what triggered it, the process names known at its start (and notes of those
seen later), which process each thread known at its start belongs to (`tasks`: the live analysis's map, over
the tasks alive then; the threads started later have their newtask events in the window), every read's mark,
the channel events of its window and the loss counters' growth over it.

Using it from a long-running service (the agent's `--spool DIR`):

    settings = FlightSettings(seconds=300, directory=spool, max_bytes=256 << 20,   # the ring's bounds
                              keep=20, keep_bytes=4 << 30,                        # the spool's retention
                              dump_on=("reset", "timeout", "heartbeat", "alloc_fail"))
    flight = FlightRecorder(session, settings, profile_name, extra={"channels": channels.header()},
                            on_note=log)                 # a started TracefsSession; notes: one line each
    # the pump's sink, for every Batch the live source hands over (raw pages, channel events, the mark):
    flight(batch)
    blocks.add(batch); found = analysis.feed_block(blocks.take(), blocks.now)   # the service's own analysis
    judge_analysis(flight, analysis, found, blocks.now)  # npu_trace.sinks.flight.live_flight: findings + open resets
    ...
    flight.close()                                        # at the end: the dump being written is finished

or, without an analysis of its own, `LiveFlight(flight, source.block_timeline(), Analysis(profile, scope))` as
the pump's sink (what `record --flight` runs). Nothing raises once constructed (a bad setting or an unwritable
directory raises UsageError / RecordingError at construction): a dump that cannot be written is dropped,
counted by cause in `errors` (`disk_full`: ENOSPC/EDQUOT, `write_failed`, `retention_failed`) and said once
through `on_note`; its unfinished file is removed. `stats()` gives plain counters for metrics: dumps written
and removed by retention, errors, triggers suppressed by the rate limit (`gap_s`), incidents, and the ring's
holding and evictions (`early_*`: taken by the byte bound before `seconds` were over, the ring holding less
than asked). `written` lists the finished dumps; `dump_now()` writes the last `seconds` at once (a manual
dump); `stale` names the `.partial` files an earlier run left in the directory.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.errors import RecordingError, UsageError
from npu_trace.pipeline.batch import Batch
from npu_trace.recording.writer import DEFAULT_MODE, RecordingWriter, clock_anchor
from npu_trace.sinks.batch_writer import BatchWriter
from npu_trace.sinks.flight.dumps import PARTIAL, dump_name, is_dump, shipped_mark, to_remove
from npu_trace.sinks.flight.incident_policy import (
    DEFAULT_DUMP_ON,
    Close,
    Decision,
    Incident,
    IncidentPolicy,
    Open,
    OpenReset,
)
from npu_trace.sinks.flight.ring import FlightRing, Segment, window_batches
from npu_trace.sinks.npt_sink import new_losses, proc_comms, session_header
from npu_trace.sources.comm import saved_comms
from npu_trace.sources.procs import TaskSnapshot, task_snapshot
from npu_trace.sources.tracefs_source import TracefsSession

S = 1_000_000_000
LAG_SLACK_NS = 10 * S  # the ring keeps this much beyond `seconds`: a finding is reported after it happened
MAX_KNOWN_COMMS = 32768
DEFAULT_FLIGHT_BYTES = 256 << 20
DEFAULT_AFTER_S = 10.0
DEFAULT_GAP_S = 60.0
DEFAULT_KEEP = 20
DEFAULT_KEEP_BYTES = 4 << 30

Note = Callable[[str], None]


@dataclass(frozen=True)
class FlightSettings:
    """What `record --flight` (and the TUI's live source) was asked for; picklable."""

    seconds: float
    directory: str
    max_bytes: int = DEFAULT_FLIGHT_BYTES
    after_s: float = DEFAULT_AFTER_S
    dump_on: Tuple[str, ...] = DEFAULT_DUMP_ON
    gap_s: float = DEFAULT_GAP_S
    keep: int = DEFAULT_KEEP
    keep_bytes: int = DEFAULT_KEEP_BYTES
    mode: int = DEFAULT_MODE

    def check(self) -> None:
        """A UsageError naming the first bad setting."""
        if not 0 < self.seconds < math.inf:  # NaN too: false to every bound
            raise UsageError("--flight must be a positive number of seconds")
        if self.max_bytes < 1 << 20:
            raise UsageError("--flight-bytes must be at least 1M")
        for name, value in (("--after", self.after_s), ("--dump-gap", self.gap_s)):
            if not 0 <= value < math.inf:
                raise UsageError(f"{name} must not be negative" if value < 0 else f"{name} must be a number of seconds")
        if self.keep < 1:
            raise UsageError("--keep must be at least 1")


def prepare_directory(path: str) -> List[str]:
    """Create the dump directory (0700) when missing; a RecordingError when it cannot be written. Returns the
    unfinished dumps (`.partial`) an earlier run left there."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        names = os.listdir(path)
    except OSError as exc:
        raise RecordingError(f"flight dump directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RecordingError(f"flight dump directory {path} is not writable")
    return sorted(n for n in names if n.endswith(PARTIAL) and is_dump(n[: -len(PARTIAL)]))


class _Dump:
    """One dump being written: its writer, the batches written, the loss counters at its start."""

    def __init__(self, path: str, writer: RecordingWriter, incident: Incident, ledger: Optional[List[List[Any]]]):
        self.path = path
        self.writer = writer
        self.write = BatchWriter(writer)
        self.incident = incident
        self.reported: Dict[Tuple[str, str, int], int] = {}
        for source, kind, cpu, total in ledger or ():
            self.reported[(source, kind, cpu)] = total


class FlightRecorder:
    def __init__(
        self,
        session: TracefsSession,
        settings: FlightSettings,
        profile: str,
        *,
        extra: Optional[Dict[str, Any]] = None,
        on_note: Optional[Note] = None,
    ) -> None:
        settings.check()
        self.session = session
        self.settings = settings
        self.profile = profile
        self.extra = dict(extra or {})  # more for the dumps' header "extra" (e.g. {"channels": ...})
        self.on_note = on_note or (lambda _text: None)
        self.stale = prepare_directory(settings.directory)
        seconds_ns = int(settings.seconds * S)
        self.ring = FlightRing(seconds_ns + LAG_SLACK_NS, settings.max_bytes)
        self.policy = IncidentPolicy(seconds_ns, int(settings.after_s * S), settings.dump_on, int(settings.gap_s * S))
        self.anchor = clock_anchor()
        self.dump: Optional[_Dump] = None
        self.written: List[str] = []  # the dumps finished, in order
        self.removed: List[str] = []  # by the retention bound
        self.errors: Counter[str] = Counter()  # ERRORS: dumps lost, by cause (each said once)
        self._known: OrderedDict[str, str] = OrderedDict(proc_comms())  # names told so far (bounded)
        while len(self._known) > MAX_KNOWN_COMMS:
            self._known.popitem(last=False)
        self.ring.base_comms.update(self._known)
        # the thread -> process map the live analysis holds now (set by whoever runs it: `analysis_tasks`);
        # without one, the session's map at the start: a dump's header has it over the tasks alive then
        self.tasks: Callable[[], TaskSnapshot] = lambda: session.task_snapshot
        # which finished dumps retention may remove (an agent that ships them: only those shipped), and who is
        # told of each dump written (its shipper)
        self.removable: Callable[[str], bool] = lambda _name: True
        self.on_written: Callable[[str], None] = lambda _path: None

    # ---- the pump's side --------------------------------------------------------------------------------
    def __call__(self, batch: Batch) -> None:
        if self.ring.add(batch):
            comms = self._new_comms()
            self.ring.annotate(comms, self._ledger_rows())
            if self.dump is not None:
                self._guard(self._segment_done, comms)
        if self.dump is not None:
            self._guard(self.dump.write, batch)

    def _segment_done(self, comms: Dict[str, str]) -> None:
        """About a second of reads went into the dump: its chunk goes to disk, the names seen since with it."""
        assert self.dump is not None
        if comms:
            self.dump.writer.add_note({"comms": comms})
        self.dump.writer.flush()

    def _new_comms(self) -> Dict[str, str]:
        """The process names the kernel saved that are new or changed since the last time asked."""
        saved = saved_comms(getattr(self.session, "fs", None))
        new = {str(pid): comm for pid, comm in saved.items() if self._known.get(str(pid)) != comm}
        for pid, comm in new.items():
            self._known[pid] = comm
            self._known.move_to_end(pid)
        while len(self._known) > MAX_KNOWN_COMMS:
            self._known.popitem(last=False)
        return new

    def _ledger_rows(self) -> List[List[Any]]:
        self.session.update_loss()
        return [list(r) for r in self.session.ledger.rows()]

    # ---- the detectors' side ----------------------------------------------------------------------------
    def judge(self, findings: Iterable[Finding], now: Optional[int], open_resets: Sequence[OpenReset] = ()) -> None:
        """What the live analysis found by `now` (its clock: the timeline's watermark) and the reset sequences
        open then: dumps open and close by these alone."""
        for decision in self.policy.observe(findings, now, open_resets):
            self._apply(decision)
        for t in self.policy.just_suppressed:
            self.on_note(f"flight: {_what(t.kind, t.device)} within {self.settings.gap_s:g} s of the last dump: not "
                         "dumped (rate limit; counted)")  # fmt: skip

    def dump_now(self) -> Optional[str]:
        """Write the last `seconds` now (the TUI's key); the path, or None while an incident's dump is being
        written (it holds them already: `writing()` names it)."""
        now = self.policy.now or self.ring.newest_ns
        if now is None:
            return None
        done = self.policy.manual(now)
        for decision in done:
            self._apply(decision)
        return self.written[-1] if done and self.written and not self.dump else None

    def set_directory(self, path: str) -> None:
        """Dump into `path` from now on (created when missing; a RecordingError when it cannot be written);
        a dump being written finishes where it is."""
        if os.path.abspath(path) == os.path.abspath(self.settings.directory):
            return
        self.stale = prepare_directory(path)
        self.settings = replace(self.settings, directory=path)

    def writing(self) -> Optional[str]:
        return None if self.dump is None else self.dump.path

    def close(self) -> None:
        """The session ended (after the source's final batch): the dump being written is finished as it is."""
        for decision in self.policy.finish():
            self._apply(decision)

    # ---- dumps ------------------------------------------------------------------------------------------
    def _apply(self, decision: Decision) -> None:
        if isinstance(decision, Open):
            self._guard(self._open, decision.incident)
        elif isinstance(decision, Close) and self.dump is not None:
            self._guard(self._close, decision)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        """A dump that cannot be written (disk full, directory removed) is dropped, counted by cause and said;
        its unfinished file is removed (it could only be cut evidence, and it would hold the disk full); the
        session and the ring go on, and the next incident tries again."""
        try:
            fn(*args)
        except (RecordingError, OSError) as exc:
            dump, self.dump = self.dump, None
            cause = "disk_full" if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) else "write_failed"
            self.errors[cause] += 1
            where = f" {dump.path}" if dump is not None else ""
            self.on_note(f"flight: dump{where} failed ({cause.replace('_', ' ')}): {exc}; not kept")
            if dump is not None:
                _quietly_close(dump.writer)
                with contextlib.suppress(OSError):
                    os.unlink(dump.path)

    def _open(self, incident: Incident) -> None:
        first = incident.first
        taken = os.listdir(self.settings.directory)
        name = dump_name(first.ts_ns, first.device, first.kind, self.anchor, taken)
        path = os.path.join(self.settings.directory, name + PARTIAL)
        segments, comms, ledger = self.ring.since(incident.from_ns)
        for seg in segments:
            comms.update(seg.comms)  # every name known now: the dump's header has them all
        tasks = task_snapshot().merged(self.tasks())  # threads started before the window, ended or not
        header = session_header(self.session, self.profile, {**self.extra, "comms": comms}, tasks)
        header["window"] = self._window(incident, segments)
        try:
            writer = RecordingWriter(path, header, mode=self.settings.mode)
        except (RecordingError, OSError):  # its header did not fit (a full disk): not even begun
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self.dump = _Dump(path, writer, incident, ledger)
        self._write_held(segments, incident.from_ns)
        what = "dumping the last minutes" if first.kind == "manual" else f"{_what(first.kind, first.device)}: dumping"
        self.on_note(f"flight: {what} to {path}")

    def _write_held(self, segments: List[Segment], from_ns: int) -> None:
        """The ring's batches of the window, segment by segment (one chunk each, as live)."""
        dump = self.dump
        assert dump is not None
        last: Optional[Segment] = None
        for seg, batch in window_batches(segments, from_ns):
            if last is not None and seg is not last:
                dump.writer.flush()
            last = seg
            dump.write(batch)
        dump.writer.flush()

    def _window(self, incident: Incident, segments: List[Segment]) -> Dict[str, Any]:
        held = self.ring.held()
        starts = [s.first_ns for s in segments if s.first_ns is not None]
        oldest = min(starts) if starts else None
        return {
            "flight": True, "trigger": incident.first.to_dict(), "from_ns": incident.from_ns,
            "requested_from_ns": incident.requested_from_ns, "held_from_ns": max(oldest, incident.from_ns)
            if oldest is not None else None, "seconds": self.settings.seconds, "after_s": self.settings.after_s,
            "dump_on": list(self.settings.dump_on), "suppressed_before": dict(self.policy.suppressed), "ring": held,
        }  # fmt: skip

    def _close(self, decision: Close) -> None:
        dump = self.dump
        assert dump is not None
        self.session.update_loss()
        for loss in new_losses(self.session.ledger.rows(), dump.reported):
            dump.writer.add_loss(loss)
        incident = decision.incident
        totals = {"window": {
            "to_ns": dump.write.last_ns if dump.write.last_ns >= 0 else None,
            "first_mark_ns": dump.write.first_ns if dump.write.first_ns >= 0 else None,
            "closed": decision.reason, "closed_at_ns": decision.at_ns, "incident": incident.to_dict(),
            "batches": dump.write.batches, "pages": dump.write.pages, "events": dump.write.events,
            "ring": self.ring.held(),
        }}  # fmt: skip
        dump.writer.close(totals=totals)
        principal = incident.principal
        directory = os.path.dirname(dump.path)  # where it was opened (set_directory may have moved on since)
        name = dump_name(incident.first.ts_ns, principal.device, principal.kind, self.anchor,
                         [n for n in os.listdir(directory) if n != os.path.basename(dump.path)])
        final = os.path.join(directory, name)
        os.replace(dump.path, final)  # until it is renamed, a failure removes the .partial (_guard)
        self.dump = None
        self.written.append(final)
        self.on_written(final)
        size = os.path.getsize(final)
        self.on_note(f"flight: wrote {final} ({size} bytes, {dump.write.pages} pages, {dump.write.events} channel "
                     f"events; {decision.reason}){self._retain(directory, name)}")  # fmt: skip

    def _retain(self, directory: str, protect: str) -> str:
        """Apply the retention bound to `directory`; what it removed, for the note."""
        dumps = []
        for name in os.listdir(directory):
            if is_dump(name):
                try:
                    dumps.append((name, os.path.getsize(os.path.join(directory, name))))
                except OSError:  # removed meanwhile
                    continue
        gone = to_remove(dumps, self.settings.keep, self.settings.keep_bytes, protect, self.removable)
        for name in gone:
            try:
                os.unlink(os.path.join(directory, name))
                with contextlib.suppress(FileNotFoundError):  # its shipped mark goes with it
                    os.unlink(os.path.join(directory, shipped_mark(name)))
                self.removed.append(name)
            except OSError as exc:
                self.errors["retention_failed"] += 1
                self.on_note(f"flight: cannot remove {name} (retention): {exc.strerror}")
        return f"; retention removed {len(gone)} older dump(s)" if gone else ""

    # ---- figures ----------------------------------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """Plain counters (an agent's metrics): dumps written and removed, errors by cause, triggers suppressed
        by the rate limit, incidents, the ring's holding and what it let go (`early_*`: by the byte bound)."""
        return {
            "dumps_written": len(self.written), "dumps_removed": len(self.removed), "writing": self.writing(),
            "errors": dict(self.errors), "suppressed": dict(self.policy.suppressed),
            "incidents": self.policy.incidents, "ring": self.ring.held(),
        }  # fmt: skip

    def summary(self) -> str:
        """One line: the ring's bounds and holding, what it let go, the dumps."""
        held, ev = self.ring.held(), self.ring.stats
        span = (held["newest_ns"] - held["oldest_ns"]) / S if held["oldest_ns"] is not None else 0.0
        early = f", {ev.early_segments} of them by the byte bound before {self.settings.seconds:g} s" if \
            ev.early_segments else ""  # fmt: skip
        dumps = f"{len(self.written)} dump(s)" + (f" ({', '.join(self.written)})" if self.written else "")
        suppressed = sum(self.policy.suppressed.values())
        failed = "".join(f", {n} {k.replace('_', ' ')}" for k, n in sorted(self.errors.items()))
        failed += f", {suppressed} trigger(s) suppressed by the rate limit" if suppressed else ""
        removed = f", {len(self.removed)} removed by retention" if self.removed else ""
        return (f"flight: ring held {_mib(held['bytes'])} over {span:.1f} s (bounds {self.settings.seconds:g} s, "
                f"{_mib(self.settings.max_bytes)}); let go {ev.segments} segments ({ev.pages} pages, {ev.events} "
                f"channel events, {_mib(ev.bytes)}){early}; {dumps}{failed}{removed}")  # fmt: skip


def _what(kind: str, device: Optional[int]) -> str:
    names = {"reset": "reset sequence", "heartbeat": "heartbeat lost", "timeout": "timeout",
             "alloc_fail": "allocation failure", "link": "PCIe link degraded", "health": "health", "spike": "spike"}
    on = "" if device is None else f" on device {device}"
    return f"{names.get(kind, kind)}{on}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _quietly_close(writer: RecordingWriter) -> None:
    """Close a dump whose writing failed (already said): its fd is closed whatever happens; a trailer it can no
    longer take leaves it cut, and a cut recording reads to its last whole chunk."""
    with contextlib.suppress(RecordingError, OSError):
        writer.close()
