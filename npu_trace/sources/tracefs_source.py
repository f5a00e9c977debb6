"""The tracefs source: a private instance, events chosen by glob, per-CPU trace_pipe_raw decoded in binary.

Never wakes up per event: `read_pass()` drains every CPU's pipe without blocking and the caller polls it on a
few-millisecond interval; the raw pages go to the timeline (`npu_trace.pipeline.blocktimeline`), which walks
them with this session's record `decoders` (its formats) and puts them in time order, and to a recorder
unchanged. Loss is counted three ways and kept in `ledger`: the missed-events flag of a page (where, in the
stream), the per-CPU `overrun`/`dropped events` counters (how many), and malformed records (the timeline's).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from npu_trace.device.switches import DRIVER_EVENTS
from npu_trace.errors import FormatError, KernelFeatureError, SourceError, UsageError
from npu_trace.events import LossLedger
from npu_trace.ftrace.decode import RecordDecoder, StructLayouts, build_decoders
from npu_trace.ftrace.filters import all_of, fits, int_in
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format, parse_header_page
from npu_trace.ftrace.framing import COMMIT_MASK, commit_reader
from npu_trace.ftrace.select import match_globs, resolve_globs
from npu_trace.ftrace.special import KernelText
from npu_trace.ftrace.tracefs import INSTANCE_PREFIX, Instance, Tracefs
from npu_trace.pipeline.scope import Applied, Scope
from npu_trace.sources.driver_switches import DriverSwitches, SwitchReport
from npu_trace.sources.kernel_tables import KernelTables, needs_symbols, read_tables
from npu_trace.sources.procs import TaskSnapshot, task_snapshot, tasks_of
from npu_trace.sources.scoping import Part, npu_irqs_in_scope, plan_filters

DEFAULT_BUFFER_KB = 8192
PARTIAL_SLACK = 256  # bytes: a page with less than (data size - this) committed was not full when read
# Written to the buffer without being enabled: always decoded, never enabled. trace_marker writes (print); trace_printk
# (bprint, bputs) where the instance is trace_printk's destination (its option trace_printk_dest, 6.12+).
IMPLICIT_EVENTS = ("ftrace:print", "ftrace:bprint", "ftrace:bputs")
STACK_EVENT = "ftrace:kernel_stack"  # with the stacktrace option: the kernel's stack after each event
# Traced beside every selection, where the kernel has them: the tasks started during the session (the parent's
# clone: which process each new thread belongs to, npu_trace.detectors.processes). A handful a second.
COMPANION_EVENTS = ("task:task_newtask",)
COPY_MARKERS = "copy_trace_marker"  # instance option (Linux 6.17+)
STACKTRACE = "stacktrace"  # instance option: ftrace:kernel_stack after each event
STAT_KINDS = (("overrun", "overrun"), ("commit_overrun", "commit_overrun"), ("dropped_events", "dropped"))
EVENT_FORK = "event-fork"  # instance option: set_event_pid follows the tasks its tasks create
MAX_TASK_ROUNDS = 1000  # re-reads of a process's threads while writing them (each round: the ones new since)


def cleanup_stale(fs: Tracefs) -> List[str]:
    """Remove instances left by crashed or killed runs; returns their names."""
    removed = []
    for name in fs.stale_instances():
        fs.remove_instance(name)
        removed.append(name)
    return removed


def driver_systems(patterns: Sequence[str]) -> Tuple[str, ...]:
    """The driver's systems (trs_chan, trs_core) whose tracepoints some of `patterns` selects: the switches a
    session tracing them must turn on (whether or not the tracepoints exist yet: the driver may load later)."""
    chosen, _ = match_globs(patterns, DRIVER_EVENTS)
    return tuple(dict.fromkeys(event.split(":", 1)[0] for event in chosen))


def _labels(switches: Sequence[Any]) -> str:
    shown = ", ".join(s.label for s in switches[:4])
    return shown + (f" and {len(switches) - 4} more" if len(switches) > 4 else "")


def load_formats(fs: Tracefs, events: Sequence[str], texts: Optional[Dict[str, str]] = None) -> List[EventFormat]:
    """Parse each event's format file; the texts are kept in `texts` (recordings carry them)."""
    formats = []
    for event in events:
        system, name = event.split(":", 1)
        text = fs.event_format(system, name)
        try:
            formats.append(parse_format(text, system))
        except FormatError as exc:  # said once: the event asked for
            why = str(exc).removeprefix(f"format {exc.event}: ")
            raise FormatError(f"format of {event}: {why}", exc.event, exc.field) from exc
        if texts is not None:
            texts[event] = text
    return formats


class TracefsSession:
    """One tracing session on a private tracefs instance. Use as a context manager; cleanup is on every path."""

    def __init__(
        self,
        events: Sequence[str] = (),
        *,
        optional: Sequence[str] = (),
        missing_hint: str = "",
        fs: Optional[Tracefs] = None,
        buffer_kb: int = DEFAULT_BUFFER_KB,
        clock: str = "mono",
        layouts: Optional[StructLayouts] = None,
        tag: str = "",
        allow_none: bool = False,
        exclude: Sequence[str] = (),
        scope: Optional[Scope] = None,
        dev_fields: Optional[Mapping[str, str]] = None,
        irq_events: Sequence[str] = (),
        list_tasks: Callable[[Iterable[int]], List[int]] = tasks_of,
        switches: Optional[DriverSwitches] = None,
        switch_systems: Sequence[str] = (),
        companions: Sequence[str] = COMPANION_EVENTS,
        snapshot: Callable[[], TaskSnapshot] = task_snapshot,
        stacktrace: bool = False,
        context: Sequence[str] = (),
    ) -> None:
        """`scope`: what to trace (npu_trace.pipeline.scope): its processes go to the instance's set_event_pid,
        its task names, devices (`dev_fields`: event -> plain device field) and NPU interrupts (on `irq_events`)
        to per-event filters (npu_trace.sources.scoping); `self.scope` then says where each part was applied.
        `switches`: the driver's trace switches (default: this host's), turned on for the scope's devices when the
        session's events, or `switch_systems` (the BPF channel's driver tracepoints), include the driver's;
        restored by close(). `companions`: events traced beside the selection where they exist (not counted as
        the profile's); `snapshot` reads the tasks alive once tracing is on (`tasks`, `processes`). `stacktrace`:
        the instance's stacktrace option, a kernel stack (ftrace:kernel_stack) after each event. `context`: the
        host's context events (npu_trace.ftrace.context) traced beside the selection where they exist, host-wide
        (none of the scope's per-event filters: only --pid's processes, which the kernel applies to every event);
        those missing are said once."""
        if not events and not optional and not allow_none:
            raise SourceError("no events selected")
        self.scope = scope or Scope()
        self.dev_fields = dict(dev_fields or {})
        self.irq_events = tuple(irq_events)
        self.list_tasks = list_tasks
        self.notes: List[str] = []  # said once (announce): what the scope could not do as asked
        self.allow_none = allow_none  # none of the optional events exists: trace markers only (other channels run)
        self.exclude = list(exclude)  # globs of optional events left out (measured by another channel)
        self.patterns = list(events)  # each must match an event
        self.optional = list(optional)  # a profile's: those that match are used, the others are reported
        self.missing_hint = missing_hint
        self.unmatched: List[str] = []
        self.fs = fs
        self.buffer_kb = buffer_kb
        self.clock = clock
        self.layouts = layouts
        self.name = f"{INSTANCE_PREFIX}{os.getpid()}" + (f"-{tag}" if tag else "")
        self.ledger = LossLedger()
        self.selected: List[str] = []
        self._chosen_first: List[str] = []  # what the patterns and the profile chose
        self.formats: List[EventFormat] = []
        self.header: Optional[PageHeader] = None
        self.instance: Optional[Instance] = None
        self._fds: Dict[int, int] = {}
        self.decoders: Optional[Dict[int, RecordDecoder]] = None  # event id -> its record decoder, once started
        self._read_size = 4096
        self.pages_read = 0
        self.full_pages = 0
        self.caught_up: Tuple[int, ...] = ()
        self._read_events = 0
        self.switches = switches or DriverSwitches()
        self.switch_systems = tuple(dict.fromkeys([*driver_systems([*self.patterns, *self.optional]), *switch_systems]))
        self.switch_report = SwitchReport()
        self.companions = tuple(companions)
        self.context = tuple(context)
        self._snapshot = snapshot
        self.task_snapshot = TaskSnapshot({}, None)  # the tasks alive when tracing began (read by start())
        self.stacktrace = stacktrace
        self.copies_markers = False  # the top level's trace_marker writes are copied here (copy_trace_marker)
        self.tables = KernelTables()  # the kernel's symbols and trace_printk formats (read by start())

    # ---- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> TracefsSession:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        fs = self.fs = self.fs or Tracefs.find()
        cleanup_stale(fs)
        if self.switch_systems:
            restored, problems = self.switches.restore_stale()
            self.notes += restored + problems
        available = fs.available_events()
        self.selected = self._select(available)
        self._chosen_first = list(self.selected)
        self.selected += [e for e in self.companions if e in available and e not in self.selected]
        self.selected += self._context(available)
        self.format_texts: Dict[str, str] = {}
        self.formats = load_formats(fs, [*self.selected, *self._implicit(fs)], self.format_texts)
        self.header_page_text = fs.header_page()
        self.header = parse_header_page(self.header_page_text)
        self.tables = read_tables(fs, needs_symbols([f.full_name for f in self.formats], self.stacktrace))
        self.instance = fs.create_instance(self.name)
        try:
            self._configure(self.instance)
            self._turn_on_switches()
            self.task_snapshot = self._snapshot()  # after tracing_on: a task started later has its newtask event
        except BaseException as exc:
            try:
                self.close()
            except SourceError as cleanup:  # say both: why it failed, and what is left (removed at next start)
                raise SourceError(f"{exc}; and the instance could not be removed: {cleanup}") from exc
            raise

    # ---- the driver's trace switches ------------------------------------------------------------------
    def _turn_on_switches(self) -> None:
        """Turn on the driver's switches for the scope's devices (its tracepoints emit nothing without them)."""
        if not self.switch_systems:
            return
        report = self.switch_report = self.switches.turn_on(self.switch_systems, self.scope.devices)
        devices = f" of device {', '.join(map(str, self.scope.devices))}" if self.scope.devices else ""
        systems = "/".join(self.switch_systems)
        if not report.held and not report.failed:
            self.notes.append(f"no {systems} trace switch{devices} in {self.switches.root} (the driver's tracepoints "
                              "emit nothing without theirs; turned on when they appear)")  # fmt: skip
        if report.turned_on:
            self.notes.append(f"turned on {len(report.turned_on)} driver trace switches{devices} "
                              f"({_labels(report.turned_on)}; {len(report.already_on)} were on): put back at the end")
        for switch, why in report.failed:
            self.notes.append(f"cannot turn on the driver trace switch {switch.label}: {why} (its events stay silent)")

    def refresh_switches(self, now: Optional[float] = None) -> None:
        """Turn on the switches a hot reset re-created (at most once a second; cheap otherwise)."""
        if self.switch_systems and self.instance is not None:
            self.switches.refresh(now)

    def _select(self, available: List[str]) -> List[str]:
        chosen = resolve_globs(self.patterns, available)
        extra, self.unmatched = match_globs(self.optional, available)
        exclude = self.exclude + self._irq_events_out()
        if exclude:
            left_out, _ = match_globs(exclude, extra)
            extra = [ev for ev in extra if ev not in left_out]
        chosen += [ev for ev in extra if ev not in chosen]
        if not chosen and not self.allow_none:
            hint = f": {self.missing_hint}" if self.missing_hint else ""
            raise KernelFeatureError(f"none of the events {', '.join(self.optional)} exists on this host{hint}")
        return chosen

    def _context(self, available: List[str]) -> List[str]:
        """The host context events to add (those missing here said once)."""
        missing = [e for e in self.context if e not in available]
        if missing:
            self.notes.append(f"host context: not on this host: {', '.join(missing)}")
        return [e for e in self.context if e in available and e not in self.selected]

    def _irq_events_out(self) -> List[str]:
        """The profile's interrupt events when no NPU interrupt is in scope: none is traced, rather than every
        interrupt of the host (said once)."""
        if self.scope.irqs is None or not self.irq_events or npu_irqs_in_scope(self.scope):
            return []
        devices = ", ".join(map(str, self.scope.devices))
        which = f" of device {devices}" if self.scope.devices and self.scope.irqs else ""
        self.notes.append(f"no NPU interrupt{which} on this host (/proc/interrupts, the Ascend PCI functions' "
                          f"msi_irqs): {', '.join(self.irq_events)} not traced")  # fmt: skip
        return list(self.irq_events)

    def _implicit(self, fs: Tracefs) -> List[str]:
        events = [*IMPLICIT_EVENTS, STACK_EVENT] if self.stacktrace else IMPLICIT_EVENTS
        return [e for e in events if e not in self.selected and fs.has_event_format(*e.split(":", 1))]

    def _configure(self, inst: Instance) -> None:
        assert self.header is not None
        inst.tracing_on(False)
        inst.set_clock(self.clock)
        inst.set_buffer_size_kb(self.buffer_kb)
        if inst.has_option(COPY_MARKERS):  # trace_marker writes at the top level land in this instance too
            inst.set_option(COPY_MARKERS, True)
            self.copies_markers = True
        if self.stacktrace:
            if not inst.has_option(STACKTRACE):
                raise KernelFeatureError("--stacktrace: this kernel's tracefs instances have no stacktrace option")
            inst.set_option(STACKTRACE, True)  # the instance's own: gone with it
        self._apply_scope(inst)
        for event in self.selected:
            inst.enable_event(event)
        self._read_size = self._subbuf_size(inst, self.header)
        self.decoders = build_decoders(self.formats, sys.byteorder, self.layouts)
        for cpu in inst.cpus():
            self._fds[cpu] = inst.open_raw(cpu)
        inst.tracing_on(True)

    # ---- scope ---------------------------------------------------------------------------------
    def _apply_scope(self, inst: Instance) -> None:
        """Write the scope's filters and tasks into the instance (before any event is enabled)."""
        if self.scope.empty:
            return
        # the companions unfiltered: a process a task of another name starts is still known to be one; the host's
        # context host-wide (an interrupt event the profile scopes to the NPU's is then scoped in the pipeline)
        unfiltered = {*self.companions, *self.context}
        formats = [f for f in self.formats if f.full_name in self.selected and f.full_name not in unfiltered]
        filters = []
        comm_events: List[str] = []
        for event, parts in plan_filters(self.scope, formats, self.dev_fields, self.irq_events).items():
            accepted = self._write_filter(inst, event, parts, comm_events)
            if accepted:
                filters.append((event, all_of([expr for _, expr in accepted]), tuple(what for what, _ in accepted)))
        self._note_irq_filter(formats)
        tasks = self._trace_tasks(inst) if self.scope.pids else []
        applied = Applied(tuple(sorted(filters)), tuple(tasks), tuple(comm_events), tuple(self.notes))
        self.scope = replace(self.scope, applied=applied)

    def _note_irq_filter(self, formats: List[EventFormat]) -> None:
        """Say it when the NPU's interrupts make a filter too long for the kernel (the pipeline drops the host's
        other interrupts then)."""
        irqs = npu_irqs_in_scope(self.scope)
        if irqs and any(f.full_name in self.irq_events for f in formats) and not fits(int_in("irq", irqs)):
            self.notes.append(f"{len(irqs)} NPU interrupts make an irq filter longer than the kernel takes: the "
                              "host's other interrupts are left out after reading")  # fmt: skip

    def _write_filter(self, inst: Instance, event: str, parts: List[Part], comm_events: List[str]) -> List[Part]:
        """The parts of one event's filter the kernel takes, one at a time; a refused part is noted and left to
        the pipeline. Returns the parts in place."""
        accepted: List[Part] = []
        for what, expr in parts:
            reason = inst.set_event_filter(event, all_of([*(e for _, e in accepted), expr]))
            if not reason:
                accepted.append((what, expr))
                continue
            if accepted:  # a refused write leaves the event unfiltered: put back what was taken
                inst.set_event_filter(event, all_of([e for _, e in accepted]))
            if what == "comm":
                comm_events.append(event)
            self.notes.append(f"the kernel refused the filter {expr!r} on {event} ({reason}): "
                              f"its {what} is matched in the pipeline")  # fmt: skip
        return accepted

    def _trace_tasks(self, inst: Instance) -> List[int]:
        """Every thread of the scope's processes into set_event_pid, with event-fork on first: threads listed
        until a listing finds none not written yet, so a thread created meanwhile is either listed or created
        by one already written (and followed by the kernel)."""
        if not inst.has_file("set_event_pid"):
            raise KernelFeatureError("this kernel cannot trace chosen processes (no set_event_pid; Linux 4.4+)")
        if inst.has_option(EVENT_FORK):
            inst.set_option(EVENT_FORK, True)
        else:
            self.notes.append("this kernel has no event-fork option: threads a process starts later are not traced")
        written: List[int] = []
        for _ in range(MAX_TASK_ROUNDS):
            new = sorted(set(self.list_tasks(self.scope.pids)) - set(written))
            if not new:
                break
            inst.add_event_pids(new)
            written += new
        if not written:
            raise UsageError(f"--pid {', '.join(map(str, self.scope.pids))}: no such process (it has exited)")
        return sorted(written)

    @property
    def tasks(self) -> Dict[int, int]:
        """{tid: tgid} of the threads alive when tracing began (Analysis(..., tasks=, processes=))."""
        return self.task_snapshot.threads

    @property
    def processes(self) -> Optional[FrozenSet[int]]:
        """The processes alive when tracing began (None: not known whole)."""
        return self.task_snapshot.processes

    @property
    def marker_path(self) -> str:
        """The instance's own trace_marker: a line written to it is an ftrace:print event of this session."""
        assert self.fs is not None
        return self.fs.path(f"instances/{self.name}/trace_marker")

    def kernel_text(self) -> KernelText:
        """The kernel's tables this session's ftrace events are shown with (npu_trace.ftrace.special)."""
        return self.tables.kernel_text()

    def chosen(self) -> List[str]:
        """The events selected by the patterns and the profile (the companions and the context left out, unless
        the patterns or the profile chose them too)."""
        extra = {*self.companions, *self.context_traced()}
        return [e for e in self.selected if e not in extra]

    def context_traced(self) -> List[str]:
        """The host context events traced that the patterns or the profile did not choose."""
        chosen = set(self._chosen_first)
        return [e for e in self.context if e in self.selected and e not in chosen]

    def traces_new_tasks(self) -> bool:
        """The session traces the tasks started during it (task:task_newtask exists here)."""
        return "task:task_newtask" in self.selected

    def scope_header(self) -> Optional[Dict[str, Any]]:
        """The recording header's `scope` entry (None when nothing is scoped)."""
        return None if self.scope.empty else self.scope.header()

    def _subbuf_size(self, inst: Instance, header: PageHeader) -> int:
        try:
            return int(self.fs.read_text(f"{inst.rel}/buffer_subbuf_size_kb").split()[0]) * 1024  # type: ignore[union-attr]
        except (SourceError, ValueError, IndexError):
            return header.page_size

    def stop(self) -> List[Tuple[int, bytes]]:
        """Stop tracing and return the raw pages left in the buffers (every CPU read to the end); take the
        final loss counters."""
        if self.instance is None:
            return []
        self.instance.tracing_on(False)
        pages = list(self.raw_pages(drain=True))  # everything left: a short page is not the end here
        self.update_loss()
        return pages

    def close(self) -> None:
        """Close the pipes and remove the instance (idempotent; called on every exit path)."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):  # already closed: nothing left to release
                os.close(fd)
        self._fds.clear()
        try:
            if self.instance is not None and self.fs is not None:
                inst, self.instance = self.instance, None
                self.fs.remove_instance(inst.name)
        finally:
            problems = self.switches.restore()
            if problems:
                raise SourceError("; ".join(problems) + " (kept for npu-trace cleanup)")

    # ---- data ----------------------------------------------------------------------------------
    def read_pass(self) -> Tuple[List[Tuple[int, bytes]], Tuple[int, ...]]:
        """Drain every CPU's pipe once without blocking: the raw (cpu, page) pairs read, and the CPUs whose
        last read came back empty (caught up: nothing committed was left). `full_pages` counts the full
        pages, so a caller can tell a busy buffer from a caught-up one."""
        pages = list(self.raw_pages())
        return pages, self.caught_up

    def raw_pages(self, drain: bool = False) -> Iterator[Tuple[int, bytes]]:
        """(cpu, page bytes) for the pages readable now, without blocking (each one consumed from the kernel).

        A page far from full usually means the reader has caught up with the writer on that CPU: one more
        read tells (empty: caught up, listed in `caught_up`). A second short page in the same pass means the
        writer is still going: that CPU waits for the next poll instead of re-reading a few events at a time.
        `drain` reads every CPU until the kernel has nothing left (after tracing stopped)."""
        assert self.header is not None
        h = self.header
        partial = h.data_size - PARTIAL_SLACK
        commit = commit_reader(h.commit_offset, h.commit_size, sys.byteorder)
        caught: List[int] = []
        for cpu, fd in self._fds.items():
            short = 0
            while True:
                page = self._read_page(cpu, fd)
                if not page:
                    caught.append(cpu)
                    break
                self.pages_read += 1
                yield cpu, page
                if len(page) < h.data_offset or commit(page) & COMMIT_MASK < partial:
                    short += 1
                    if short > 1 and not drain:
                        break
                    continue
                self.full_pages += 1
        self.caught_up = tuple(caught)

    def _read_page(self, cpu: int, fd: int) -> bytes:
        """One read of a CPU's pipe; b"" when it has nothing (EAGAIN or end of data)."""
        while True:
            try:
                return os.read(fd, self._read_size)
            except BlockingIOError:
                return b""
            except InterruptedError:
                continue
            except OSError as exc:
                raise SourceError(f"reading cpu{cpu} trace_pipe_raw: {exc.strerror}") from exc

    def update_loss(self) -> None:
        """Copy the kernel's per-CPU loss counters into the ledger (they are totals for this instance)."""
        if self.instance is None:
            return
        read = 0
        for cpu in self._fds:
            stats = self.instance.cpu_stats(cpu)
            read += stats.get("read_events", 0)
            for stat, kind in STAT_KINDS:
                if stat in stats:
                    self.ledger.set_total("tracefs", kind, cpu, stats[stat])
        self._read_events = read

    def kernel_events_read(self) -> int:
        """Events the kernel handed to this reader (per_cpu stats "read events"; kept after stop())."""
        return self._read_events

    @property
    def cpus(self) -> Tuple[int, ...]:
        """The CPUs whose buffers this session reads (each one's pipe is open)."""
        return tuple(self._fds)

