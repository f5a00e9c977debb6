"""The drawing side of an export: everything that draws a recording's analysed blocks into the writer.

An export (npu_trace.export.run) reads and analyses a recording's blocks; a `Drawer` is told what to draw, in
the order it is to be drawn, one call each: `open` (the window, once its first event is known: the writer's
header, the mapping), `block` (an analysed block, with the tasks the latency detector paired in it, the memory
detector's changes and the process names known when it was read), `events` (a scoped recording's events, drawn
one by one as the reference path draws them), `findings` (a block's findings and device-state transitions) and
`finish` (the end: what the analysis completed then, the calls still open), which closes the writer and
returns the counts. Nothing it is given is changed by it, and it reads nothing of the analysis but what it is
given: so it runs in a process of its own beside the analysis (npu_trace.export.apart) as well as in the
caller's (the cluster's trace, whose writer is shared by many exports).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from npu_trace.events import NpuEvent
from npu_trace.export.drawing import BlockDrawing, Drawn, Rows
from npu_trace.export.emit import Capture, Emitter
from npu_trace.export.hostctx import ChromeContext, PerfettoContext
from npu_trace.export.pieces import Pieces, as_calls
from npu_trace.export.track_map import TimelineMapper
from npu_trace.export.tracks import BlockWriter, TraceWriter
from npu_trace.pipeline.blocks import Block
from npu_trace.pipeline.vnormalize import NormBlock

Tasks = Optional[Tuple[np.ndarray, np.ndarray]]  # the latency detector's paired completions: rows, submits' times
Changes = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # the memory detector's: ts, dev, pid, delta


class Window:
    """What `open` is told: the window [lo, hi) on the trace clock (hi None: to the end), the devices shown
    (None: all), the file's header `info`, the host's context formats the recording holds and the format."""

    def __init__(self, lo: int, hi: Optional[int], devices: Any, info: Dict[str, Any], context: List[str],
                 fmt: str) -> None:  # fmt: skip
        self.lo, self.hi, self.devices, self.info, self.context, self.fmt = lo, hi, devices, info, context, fmt


class Drawer:
    """See the module docstring."""

    def __init__(self, writer: Union[BlockWriter, TraceWriter]) -> None:
        self.writer = writer
        self.emitter = Emitter(writer, {})  # describes each track before its first event
        self.drawn = Drawn(self.emitter)
        self.comms = _Comms({})  # the process names the block being drawn sees
        self.mapper: Optional[TimelineMapper] = None
        self.drawing: Optional[BlockDrawing] = None
        self.host: Any = None  # the host's context (npu_trace.export.hostctx), when the recording holds it
        self.lo, self.hi = 0, (1 << 63) - 1

    # ---- what it is told ----------------------------------------------------------------------------------
    def open(self, window: Window) -> None:
        self.lo, self.hi = window.lo, window.hi if window.hi is not None else (1 << 63) - 1
        self.writer.header(window.info)
        self.mapper = self._mapper(window)
        self._host(self.mapper, window)

    def block(self, nb: NormBlock, rows: Rows, tasks: Tasks, changes: Changes, names: Dict[int, str]) -> None:
        """Draw a block (`rows`: npu_trace.export.drawing.prepare's of it), the process names as the source
        knew them when it was read."""
        assert self.drawing is not None
        self.comms.names = names
        after = None
        if isinstance(self.host, ChromeContext):
            host, block = self.host, nb.block
            after = lambda pieces, base: host.draw(block, pieces, base)  # noqa: E731
        self.drawing.draw(nb, rows, tasks, changes, after)
        if isinstance(self.host, PerfettoContext):
            self._draw_context(nb.block)

    def events(self, events: List[NpuEvent], tasks: List[Tuple[NpuEvent, int]], changes: List[Any],
               block: Optional[Block], names: Dict[int, str]) -> None:  # fmt: skip
        """A scoped recording's block (the reference path: a scope's stage is per event), drawn alike: its
        events, the tasks the latency detector paired (each completion with its submit's time), the memory
        detector's changes (ts, dev, pid, delta), the host's context of its raw rows (`block`)."""
        mapper = self.mapper
        assert mapper is not None
        self.comms.names = names
        matched = {id(ev) for ev, _ in tasks}
        for ev in events:
            if ev.kind != "complete":
                mapper.event(ev)
            elif id(ev) not in matched:
                mapper.unmatched_complete(ev)
        for ev, submitted in tasks:
            mapper.task(ev, submitted)
        for ts, dev, pid, delta in changes:
            mapper.memory(_ints(ts), _ints(dev), _ints(pid), _ints(delta))
        if self.host is not None and block is not None:
            self._draw_context(block)

    def findings(self, found: List[Any], transitions: List[Any]) -> None:
        assert self.mapper is not None
        self.mapper.findings(found)
        self.mapper.transitions(transitions)

    def finish(self, found: Optional[List[Any]], transitions: List[Any], end: int, pending: Any,
               open_resets: List[Any], names: Dict[int, str]) -> Dict[str, Any]:  # fmt: skip
        """The end: the findings and transitions the analysis made at it (None: the window ended first, nothing
        was flushed), where the drawing ends, the calls still open, the resets under way, the process names
        known at the end; the counts of what was drawn and written."""
        mapper = self.mapper
        assert mapper is not None
        self.comms.names = names
        if found is not None:
            self.findings(found, transitions)
        if isinstance(self.host, ChromeContext):
            pieces = Pieces()
            self.host.finish(end, pieces, 0)
            self._render_all(pieces.done())
        out: Dict[str, Any] = {"mapped": mapper.finish(end, pending, open_resets), "written": self.writer.close()}
        if self.host is not None:
            out["host_context"] = dict(self.host.counts)
        return out

    # ---- the mapping -------------------------------------------------------------------------------------
    def _mapper(self, window: Window) -> TimelineMapper:
        """The mapping, its calls kept while a block is drawn (see npu_trace.export.drawing)."""
        capture = Capture(self.emitter)
        mapper = TimelineMapper(capture, self.comms, window.lo, window.hi, window.devices, window.info)
        self.emitter.tracks = mapper.by_uuid
        self.drawing = BlockDrawing(mapper, capture, self.drawn, self._render)
        return mapper

    def _render(self, pieces: Pieces, lo: int, hi: int) -> None:
        """Pieces to the writer: at once, or one by one to a writer that takes no pieces (the cluster's)."""
        render = getattr(self.writer, "pieces", None)
        if render is not None:
            render(pieces, lo, hi, self.drawn)
        else:
            as_calls(pieces, lo, hi, self.drawn)

    def _host(self, mapper: TimelineMapper, window: Window) -> None:
        """The drawing of the host's context, when the recording holds it (and the writer takes packets made
        elsewhere: not the cluster's, which moves each host's times)."""
        if not window.context or not hasattr(self.writer, "put"):
            return
        if window.fmt == "perfetto":
            self.host = PerfettoContext(window.info.get("clock"))
        else:
            self.host = ChromeContext(mapper, self.drawn, self._open_at)

    def _open_at(self, ts: int) -> None:
        """The window opens before the host's context shown first (unless it has)."""
        if self.drawing is not None:
            self.drawing.open_at(ts)
        elif self.mapper is not None and not self.mapper.opened:
            self.mapper._open(ts)

    def _draw_context(self, block: Block) -> None:
        """The block's host context, after everything else of the block (see npu_trace.export.hostctx)."""
        if isinstance(self.host, PerfettoContext):
            put = self.writer.put  # type: ignore[union-attr]  # a writer without put gets no host context
            put(self.host.bundles(block, self.lo, self.hi))
        elif isinstance(self.host, ChromeContext):
            pieces = Pieces()
            self.host.draw(block, pieces, 0)
            self._render_all(pieces.done())

    def _render_all(self, pieces: Pieces) -> None:
        if len(pieces):
            self._render(pieces, 0, len(pieces))


class _Comms:
    """The process names the drawing sees (the mapper's comm_of, ReplaySource.comm's rule): those the source knew
    when the block being drawn was read (`names`, set for each block)."""

    def __init__(self, names: Dict[int, str]) -> None:
        self.names = names

    def __call__(self, pid: int) -> str:
        return "<idle>" if pid == 0 else self.names.get(pid, "<...>")


def _ints(values: Any) -> List[int]:
    return values.tolist() if isinstance(values, np.ndarray) else [int(v) for v in values]
