"""`npu-trace export`: a recording replayed through `check`'s pipeline and `Analysis`, drawn as a timeline.

The replay source rebuilds the live batches, the block timeline orders them (the columnar path `check` takes),
`Analysis` normalizes and analyses each block, and the block is drawn as a timeline from its columns
(`BlockDrawing`, npu_trace.export.drawing): the normalized rows, the tasks the latency detector paired and the
memory detector's changes (told through their watches), the hot kinds as columns written at once by the writer,
the rare ones one by one through `TimelineMapper` (npu_trace.export.track_map), which also draws the findings and
the device-state transitions (`Drawer`, npu_trace.export.drawer: told what to draw, it reads nothing else). An
export draws in a process of its own while it analyses the next block (npu_trace.export.apart: each block
drawn with the process names known when it was read, its columns through shared memory, one block drawn while
the next is analysed and at most two more waiting). A recording with a scope takes the per-event path, as
`check` does. Memory stays bounded whatever the recording's size: a block of at most `EXPORT_ROWS` rows at a
time (and the one drawn, and those waiting, meanwhile), the writers stream. The tests
keep the reference: every row drawn one by one through the mapper, Perfetto written through protobuf messages
(tests/export_reference.py), and hold the bytes equal.

The window: `--from`/`--to` are seconds from the recording's first event (`12.5`, `500ms`), trace-clock
timestamps as `stream` and `replay` print them (`@1012.500000000`), or wall-clock times with a zone
(`2026-01-01T00:00:12Z`, through the recording's clock anchor). Everything before the window is analysed (the
state it carries in: live memory, device states, calls and handlers under way); reading stops at its end.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from typing import IO, Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from npu_trace import __version__
from npu_trace.ci.recording_analysis import Progress, blocks_of, profile_for
from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.memory import Ints
from npu_trace.errors import InputError, UsageError
from npu_trace.events import NpuEvent
from npu_trace.export.apart import DrawingProcess
from npu_trace.export.beside import STDOUT, refuse_inputs, written_beside
from npu_trace.export.chrome_json import ChromeJsonWriter
from npu_trace.export.drawer import Drawer, Window
from npu_trace.export.drawing import prepare
from npu_trace.export.hostctx import context_names
from npu_trace.export.tracks import BlockWriter, TraceWriter
from npu_trace.pipeline.blocks import Block
from npu_trace.pipeline.vnormalize import NormBlock
from npu_trace.sources.replay_source import ReplaySource

EXPORT_ROWS = 1 << 16  # rows analysed at a time
# the first blocks grow to EXPORT_ROWS in this many steps: the drawing's process waits for the first block, then
# draws while the next is analysed (it is the slower side): the drawing begins sooner, the next block's analysis
# overlaps it from the start (1 M events: the drawing waited ~80 ms in all, ~55 ms with the steps)
EXPORT_RAMP = 4
FORMATS = ("perfetto", "chrome-json")
EXTENSIONS = {".pftrace": "perfetto", ".perfetto-trace": "perfetto", ".json": "chrome-json"}
NS = 1_000_000_000
_UNITS = {"": NS, "s": NS, "ms": 1_000_000, "us": 1_000, "ns": 1}
_OFFSET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|ms|us|ns)?\s*$")
_STAMP = re.compile(r"^\s*@\s*(\d+)(?:\.(\d{1,9}))?\s*$")


# ---- arguments --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeSpec:
    """A --from/--to value: `offset` (ns after the first event), `mono` (a trace-clock stamp, ns) or `wall`
    (ns since the epoch, converted through the recording's clock anchor)."""

    kind: str
    ns: int
    text: str

    def resolve(self, first_ns: int, anchor: Optional[Tuple[int, int]]) -> int:
        if self.kind == "offset":
            return first_ns + self.ns
        if self.kind == "mono":
            return self.ns
        if anchor is None:
            raise InputError(f"{self.text!r} is a wall-clock time, but the recording has no clock anchor: give "
                             "seconds from its start or a trace-clock timestamp (@SECONDS)")  # fmt: skip
        mono, real = anchor
        return mono + (self.ns - real)


def parse_time(text: str, option: str) -> TimeSpec:
    """`12.5`, `12.5s`, `500ms`, `250us`, `100ns`: from the first event; `@1012.5`: a trace-clock timestamp;
    an ISO 8601 time with its zone: wall clock. Anything else is a UsageError naming the option."""
    m = _OFFSET.match(text)
    if m:
        return TimeSpec("offset", _scaled(m.group(1), _UNITS[m.group(2) or ""]), text)
    m = _STAMP.match(text)
    if m:
        return TimeSpec("mono", int(m.group(1)) * NS + int((m.group(2) or "0").ljust(9, "0")), text)
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r}: give seconds from the recording's first event (12.5, 500ms), a "
                         "trace-clock timestamp (@1012.5) or a wall-clock time with its zone "
                         "(2026-01-01T00:00:12Z)") from None  # fmt: skip
    if when.tzinfo is None:
        raise UsageError(f"{option} {text!r}: a wall-clock time needs its zone (Z or +hh:mm)")
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return TimeSpec("wall", (delta.days * 86_400 + delta.seconds) * NS + delta.microseconds * 1000, text)


def _scaled(number: str, unit: int) -> int:
    whole, _, frac = number.partition(".")
    digits = len(str(unit)) - 1  # the unit's power of ten
    return int(whole or "0") * unit + int((frac[:digits] or "0").ljust(digits, "0")) if digits else int(whole or "0")


def parse_devices(values: Optional[Sequence[str]]) -> Optional[FrozenSet[int]]:
    """--devices 0,2 (repeatable) -> {0, 2}; None: every device."""
    if not values:
        return None
    out: Set[int] = set()
    for value in values:
        for part in value.split(","):
            if not part.strip().isdigit():
                raise UsageError(f"--devices {value!r}: device numbers separated by commas (0,2,5)")
            out.add(int(part))
    return frozenset(out)


def output_format(path: str, fmt: Optional[str], option: bool = True) -> str:
    """The trace format `fmt` names, else `path`'s extension (`option`: the command has --format)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UsageError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
        return fmt
    for ext, name in EXTENSIONS.items():
        if path.lower().endswith(ext):
            return name
    also = f", or give --format {'|'.join(FORMATS)}" if option else ""
    raise UsageError(f"cannot tell the format from {path!r}: name it .pftrace, .perfetto-trace or .json{also}")


# ---- the export ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    recording: str
    out: str
    fmt: str  # one of FORMATS
    start: Optional[TimeSpec] = None
    stop: Optional[TimeSpec] = None
    devices: Optional[FrozenSet[int]] = None
    profile: Optional[str] = None
    progress: bool = True


class _Watch:
    """What two detectors computed that the timeline draws, kept from one block's analysis to its drawing:
    the tasks the latency detector paired, the memory detector's changes (npu_trace.detectors.latency.TaskWatch,
    npu_trace.detectors.memory.MemoryWatch)."""

    def __init__(self) -> None:
        self.task_rows: List[Tuple[np.ndarray, np.ndarray]] = []
        self.task_events: List[Tuple[NpuEvent, int]] = []
        self.changes_seen: List[Tuple[Ints, Ints, Ints, Ints]] = []

    def tasks(self, nb: NormBlock, rows: np.ndarray, submitted: np.ndarray) -> None:
        self.task_rows.append((rows, submitted))

    def task(self, complete: NpuEvent, submitted: int) -> None:
        self.task_events.append((complete, submitted))

    def changes(self, ts: Ints, dev: Ints, pid: Ints, delta: Ints) -> None:
        self.changes_seen.append((ts, dev, pid, delta))

    def clear(self) -> None:
        self.task_rows, self.task_events, self.changes_seen = [], [], []

    def block_tasks(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The block's paired tasks (rows, submits' times), told in one call or none."""
        if not self.task_rows:
            return None
        rows, submitted = zip(*self.task_rows)
        return np.concatenate(rows).astype(np.int64), np.concatenate(submitted).astype(np.int64)

    def block_changes(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cols = [np.concatenate([_int64(c[k]) for c in self.changes_seen])
                if self.changes_seen else np.zeros(0, np.int64) for k in range(4)]  # fmt: skip
        return cols[0], cols[1], cols[2], cols[3]


def _int64(values: Ints) -> np.ndarray:
    """Values as int64; those past its range (a driver's u64 size of 2^64 - 57344: its detector's Python ints hold
    it) at its bounds."""
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        return np.array([min(max(int(v), -(1 << 63)), (1 << 63) - 1) for v in values], dtype=np.int64)


class Exporter:
    """One export (see the module docstring): run() -> its summary. `stream`: the file the writer writes, the
    export's own: the drawing runs in a process of its own (npu_trace.export.apart); without it (the cluster's
    trace, whose writer many exports share) in this one."""

    drawer = Drawer  # what draws (the tests' reference: one row at a time)

    def __init__(self, request: Request, writer: Union[BlockWriter, TraceWriter], stream: Optional[IO[Any]] = None):
        self.req = request
        self.stream = stream
        self.source = ReplaySource(request.recording)
        self.analysis = Analysis(profile_for(self.source, request.profile), self.source.scope_filter(),
                                 tasks=self.source.tasks, processes=self.source.processes)  # fmt: skip
        self.context = context_names([f.full_name for f in self.source.reader.formats])
        # unmapped events: counted, not decoded (as check); the host's context: decoded to be drawn
        self.source.only = self.analysis.mapped_events() | set(self.context)
        self.watch = _Watch()
        self.analysis.latency.task_watch = self.watch
        self.analysis.memory.watch = self.watch
        self.side: Any = self.drawer(writer)  # the Drawer, or the process it runs in once the window is known
        self.opened = False  # the window is known: the drawing has begun
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.stopped = False  # reading stopped at the window's end
        self.shown_last: Optional[int] = None  # the last event stamp inside the window

    # ---- the loop -----------------------------------------------------------------------------------------
    def run(self) -> Dict[str, Any]:
        bar = Progress(os.path.getsize(self.req.recording) if self.req.progress else 0)
        bar.enabled = bar.enabled and self.req.progress
        try:
            for block, now in blocks_of(self.source, self.analysis, EXPORT_ROWS, bar, EXPORT_RAMP):
                self._feed(block, now)
                if self.stopped:
                    break
            bar.done()
            return self._finish()
        finally:
            if isinstance(self.side, DrawingProcess):
                self.side.close()

    def reap(self) -> None:
        """Wait for the drawing's process to have exited, if it finished (run() ended it otherwise)."""
        if isinstance(self.side, DrawingProcess):
            self.side.reap()

    def _feed(self, block: Block, now: Optional[int]) -> None:
        if self.stopped:
            return
        self._reached(block)
        if self.analysis.scope is not None:
            self._feed_items(block, now)
        elif len(block):
            nb = self.analysis.normalize_block(block)
            found = self.analysis.feed_normalized(nb)
            if self.opened:
                self._draw_block(nb)
            self._after(found, None if self.stopped else now)
        else:
            self._after([], None if self.stopped else now)

    def _reached(self, block: Block) -> None:
        """The window is set by the first block; reading stops after the block that reaches its end (that
        block is analysed whole: what lies past the end is cut when drawn, as slices that cross it are)."""
        if not len(block):
            return
        self._window(block)
        if self.hi is not None and int(block.ts.max()) >= self.hi:
            self.stopped = True

    def _window(self, block: Block) -> None:
        """The window, once the recording's first event is known (the first block's first timed row)."""
        if self.opened:
            return
        timed = block.ts[block.ts > 0]
        if not len(timed):
            return
        first, anchor = int(timed.min()), _anchor(self.source.header)
        # a start before the first event (a wall-clock time before the boot: a negative trace time) is the first
        self.lo = max(self.req.start.resolve(first, anchor), first) if self.req.start else first
        self.hi = self.req.stop.resolve(first, anchor) if self.req.stop else None
        if self.hi is not None and self.hi <= self.lo:
            start = f"--from {self.req.start.text}" if self.req.start else "the recording's first event"
            stop = self.req.stop.text if self.req.stop else ""
            raise UsageError(f"the window ends before it begins: {start} is at {_secs(self.lo)}, --to {stop} at "
                             f"{_secs(self.hi)} (trace clock)")  # fmt: skip
        window = Window(self.lo, self.hi, self.req.devices, self._info(), self.context, self.req.fmt)
        self.opened = True
        if self.stream is None:
            self.side.open(window)
            return
        apart = DrawingProcess(self.side, self._shared(), self.stream, self.req.out,
                               self.source.block_timeline().holds)  # fmt: skip
        self.side = apart  # closed on every exit path (run's finally), from the moment it exists
        apart.start(window, self.analysis.block_normalizer.ops)

    def _shared(self) -> List[Any]:
        """What the drawing's process reads as its own copies (npu_trace.export.ship.Shared): the block
        normalizer, each format's column plan, its record type, format, fields and positional plan (all made
        by now)."""
        normalizer = self.analysis.normalizer
        out: List[Any] = [self.analysis.block_normalizer]
        for plan in self.source.block_timeline().plans.values():
            out += [plan, plan.dtype, plan.fmt, plan.fmt.fields, normalizer.format_info(plan.fmt)[2]]
        return [o for o in out if o is not None]

    def _draw_block(self, nb: NormBlock) -> None:
        """The block, with what the analysis told of it, what its drawing needs that no drawing state changes
        (made here, while the block before is drawn) and the process names known now, to the drawing."""
        tasks, changes, names = self.watch.block_tasks(), self.watch.block_changes(), dict(self.source.comms)
        self.watch.clear()
        self._note_shown(nb.block.ts)
        self.side.block(nb, prepare(nb, None if tasks is None else tasks[0]), tasks, changes, names)

    def _feed_items(self, block: Block, now: Optional[int]) -> None:
        """A scoped recording: the reference path (a scope's stage is per event), drawn alike."""
        events = self.analysis.normalize(block.items())
        found = self.analysis.feed_events(events) if events else []
        if self.opened:
            context = block if self.context else None
            self.side.events(events, self.watch.task_events, self.watch.changes_seen, context, dict(self.source.comms))
            self.watch.clear()
            self._note_shown(np.array([ev.ts_ns for ev in events if ev.ts_ns > 0], dtype=np.int64))
        self._after(found, None if self.stopped else now)

    def _after(self, found: List[Any], now: Optional[int]) -> None:
        """The block's findings, then what time alone completes, then the device-state changes."""
        self.watch.clear()
        analysis = self.analysis
        found = [*found, *analysis.advance(now)] if now is not None else list(found)
        if self.opened:  # drawn after the block
            self.side.findings(found, analysis.states.take_transitions())
        analysis.findings.clear()  # kept by Analysis for a report the export never asks for: bounded

    def _note_shown(self, ts: np.ndarray) -> None:
        if self.lo is None or not len(ts):
            return
        if self.hi is None and int(ts.min()) >= self.lo:  # the common case: every stamp is inside
            inside = ts
        else:
            inside = ts[(ts >= self.lo) & ((ts < self.hi) if self.hi is not None else True)]
        if len(inside):
            last = int(inside.max())
            self.shown_last = last if self.shown_last is None else max(self.shown_last, last)

    # ---- the end ------------------------------------------------------------------------------------------
    def _finish(self) -> Dict[str, Any]:
        analysis = self.analysis
        if not self.opened or self.shown_last is None:
            raise InputError(self._nothing_shown())
        open_resets: List[Any] = []
        found: Optional[List[Any]] = None
        transitions: List[Any] = []
        if self.stopped:  # the window ends before the recording: nothing is flushed as if the session ended
            open_resets = analysis.reset.open_sequences()
            end = int(self.hi) if self.hi is not None else self.shown_last
        else:
            if self.source.reader.truncated:
                analysis.truncated(self.source.reader.truncation)
            before = len(analysis.findings)
            analysis.finish()
            found, transitions = analysis.findings[before:], analysis.states.take_transitions()
            end = self.shown_last
        drawn = self.side.finish(found, transitions, end, analysis.normalizer.pending_entries(), open_resets,
                                 dict(self.source.comms))  # fmt: skip
        out = {"mapped": drawn["mapped"], "written": drawn["written"], "window": [self.lo, end],
               "stopped_at_window_end": self.stopped, "events_read": self.source.events_read,
               "loss": self.source.ledger.summary(), "truncated": self.source.reader.truncated,
               "notes": self.source.reader.notes()}  # fmt: skip
        if "host_context" in drawn:
            out["host_context"] = drawn["host_context"]
        return out

    def _nothing_shown(self) -> str:
        first, last = self.analysis.first_ts, self.analysis.last_ts
        if first is None:
            return f"{self.req.recording} holds no event to export"
        return (f"the window holds none of the recording's events: they span {_secs(first)} to {_secs(last or first)}"
                f" on the trace clock ({(int(last or first) - first) / NS:.3f} s)")  # fmt: skip

    def _info(self) -> Dict[str, Any]:
        header = self.source.header
        anchor = _anchor(header)
        info: Dict[str, Any] = {"recording": os.path.basename(self.req.recording), "clock": header.get("clock"),
                                "mono_ns": anchor[0] if anchor else None,
                                "realtime_ns": anchor[1] if anchor else None}  # fmt: skip
        for key in ("host", "kernel", "machine", "profile", "tool_version", "schema"):
            if header.get(key) is not None:
                info[key] = header[key]
        if not self.source.scope.empty:
            info["scope"] = self.source.scope.where()
        if self.context:
            info["host_context"] = list(self.context)
        info["exported_by"] = f"npu-trace {__version__}"
        if self.req.devices is not None:
            info["devices"] = sorted(self.req.devices)
        return info


def _anchor(header: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    anchor = header.get("clock_anchor")
    if isinstance(anchor, dict) and all(isinstance(anchor.get(k), int) for k in ("mono_ns", "realtime_ns")):
        return int(anchor["mono_ns"]), int(anchor["realtime_ns"])
    return None


def _secs(ns: int) -> str:
    secs, rest = divmod(int(ns), NS)
    return f"{secs}.{rest:09d}"


# ---- the file -----------------------------------------------------------------------------------------------
def _perfetto_writer(given: Any) -> Any:
    """The Perfetto writer's class: perfetto's protobuf classes are imported only when a Perfetto trace is
    written (~0.03 s of the start-up)."""
    if given is not None:
        return given
    from npu_trace.export.perfetto import PerfettoWriter

    return PerfettoWriter


def export(request: Request, exporter: Any = None, perfetto_writer: Any = None) -> Dict[str, Any]:
    """Export one recording (see the module docstring): the file is written beside its final name and moved
    there once whole, with the recording's permission bits (it holds what the recording holds). `exporter`
    and `perfetto_writer`: other classes than Exporter and PerfettoWriter (the tests' reference)."""
    rec = os.path.abspath(request.recording)
    out = request.out if request.out == STDOUT else os.path.abspath(request.out)
    if rec == out:
        raise UsageError(f"the output {request.out!r} is the recording itself")
    refuse_inputs([request.out], [request.recording])  # another name of it (a link)
    binary = request.fmt == "perfetto"
    made: Optional[Exporter] = None
    try:
        with written_beside(out, binary, like=request.recording) as stream:
            writer: Any = _perfetto_writer(perfetto_writer)(stream) if binary else ChromeJsonWriter(stream)  # type: ignore[arg-type]
            made = (exporter or Exporter)(request, writer, stream)
            summary = made.run()
    finally:
        if made is not None:
            made.reap()  # its drawing's process, which finished: reaped once the file is in place
    # what the writer wrote: the file's size, and what a device, a FIFO or /dev/stdout was given
    summary["out"], summary["format"], summary["bytes"] = request.out, request.fmt, int(summary["written"]["bytes"])
    return summary
