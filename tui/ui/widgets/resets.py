"""The reset timeline: each sequence step by step (+time since its first step), in progress or closed, with
its trigger and precursor window (timeouts, ECC deltas, hottest temperature); then the faults: kernel fault
blocks, devices the driver no longer reaches, and applications' errors with the driver finding that explains
them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from rich.console import Console
from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.fmt import STATE_STYLE, dev_name, dur, safe, stamp
from tui.messages import FaultView, ResetView

STATUS_STYLE = {"in progress": "bold magenta", "complete": "green", "failed": "bold red", "incomplete": "bold red"}


def reset_text(r: ResetView, selected: bool) -> Text:
    t = Text(no_wrap=False)
    head = f"{'▶' if selected else ' '} {dev_name(r.dev)} reset at {stamp(r.ts_ns)} "
    t.append(head, "reverse" if selected else "bold")
    t.append(f" {r.status} ", f"reverse {STATUS_STYLE.get(r.status, '')}")
    if r.waiting_for:
        t.append(f" waiting for {safe(r.waiting_for)}", "red")
    first = r.steps[0][1] if r.steps else r.ts_ns
    for name, ts, ret in r.steps:
        style = "red" if ret else STATE_STYLE["ok"]
        t.append(f"\n    +{dur(ts - first):>9} {safe(name)}", style)
        if ret:
            t.append(f" ret={ret}", "bold red")
    t.append_text(_precursor(r))
    return t


def _precursor(r: ResetView) -> Text:
    p, t = r.precursor, Text()
    ecc = p.get("ecc") or {}
    trig = r.trigger
    what = f"{safe(trig.get('kind'))} {safe(trig.get('op'))} at {stamp(int(trig.get('ts_ns', 0)))}" if trig else "none"
    t.append(f"\n    trigger: {what}", "yellow")
    t.append(f"\n    precursors ({dur(p.get('window_ns'))}): {p.get('timeouts', 0)} timeouts, "
             f"ECC ce +{ecc.get('ce_delta', 0)} uce +{ecc.get('uce_delta', 0)}, "
             f"max temp {p.get('max_temp_c') if p.get('max_temp_c') is not None else '-'} C", "yellow")  # fmt: skip
    return t


def fault_text(v: FaultView) -> Text:
    f, d = v.finding, v.finding.details
    t = Text(no_wrap=False)
    where = dev_name(f.device) if f.device is not None else "host"
    if f.kind == "kernel_fault":
        t.append(f"  {stamp(f.ts_ns)} {where} kernel {safe(f.op)}", "bold red")
        task = f" on CPU {d['cpu']}" if d.get("cpu") is not None else ""
        task += f" ({safe(d['comm'])})" if d.get("comm") else ""
        t.append(task)
        drivers = d.get("driver_functions") or []
        if drivers:
            t.append(f"; driver: {safe(', '.join(str(x) for x in drivers[:3]))}", "yellow")
    elif f.kind == "device_fault":
        t.append(f"  {stamp(f.ts_ns)} {where} {safe(f.op)}", "bold red")
        if int(d.get("count") or 1) > 1:
            t.append(f" x{d['count']}")
        if d.get("unreachable"):
            t.append(f": {safe(d['unreachable'])}", "yellow")
    else:
        t.append(f"  {stamp(f.ts_ns)} {where} app error {safe(f.op)}", "bold yellow")
        if d.get("pid") is not None:
            t.append(f" (pid {d['pid']})")
        if v.explanation:
            t.append(f"\n    {safe(v.explanation)}", "dim" if v.explanation.startswith("no ") else "yellow")
    return t


def text_segments(text: Text, console: Console) -> List[Segment]:
    """A one-line Text's segments, its own style included (Text.render applies it only along with spans)."""
    if text.spans or not text.style:
        return list(text.render(console))
    return [Segment(text.plain, console.get_style(text.style))]


class ResetsPanel(ScrollView):
    """Virtualised: each sequence is wrapped to the panel's width once (a closed one never changes: its lines
    are kept), and only the visible lines are rendered."""

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.resets: List[ResetView] = []
        self.faults: List[FaultView] = []
        self.selected: Optional[int] = None
        self.lines: List[Text] = [Text("no reset sequence yet", "dim", end="")]
        self.starts: List[int] = []  # each sequence's first line
        self._wrapped: Dict[Tuple[Any, ...], List[Text]] = {}

    def show(self, resets: List[ResetView], faults: Optional[List[FaultView]] = None) -> None:
        faults = self.faults if faults is None else faults
        if resets == self.resets and faults == self.faults:  # unchanged: nothing to wrap or render again
            return
        self.resets, self.faults = resets, faults
        self._relayout()

    def select(self, index: int) -> None:
        self.selected = index
        self.anchor(False)
        self._relayout()
        if 0 <= index < len(self.starts):
            self.scroll_to(y=self.starts[index], animate=False, immediate=True, force=True)

    def on_resize(self) -> None:
        self._relayout()

    def _relayout(self) -> None:
        width = self.size.width
        if width <= 0:
            return  # not laid out yet: on_resize comes
        kept: Dict[Tuple[Any, ...], List[Text]] = {}
        lines, starts = self._wrap(width, kept)
        if len(lines) > self.size.height:  # a vertical scrollbar takes its columns: wrap to what is left
            lines, starts = self._wrap(max(1, width - self.styles.scrollbar_size_vertical), kept)
        self._wrapped = kept  # only the sequences still shown: bounded like the list
        self.lines, self.starts = lines, starts
        size = Size(width, len(lines))
        if size != self.virtual_size:
            self.virtual_size = size
        if self.selected is None:  # the newest at the bottom, in view (anchored through layouts too)
            self.anchor()
        self.refresh()

    def on_mount(self) -> None:
        self.anchor()

    def _wrap(self, width: int, kept: Dict[Tuple[Any, ...], List[Text]]) -> Tuple[List[Text], List[int]]:
        lines, starts = self._wrap_resets(width, kept)
        if self.faults:
            lines.append(Text(f"faults ({len(self.faults)} newest)", "bold", end=""))
            for v in self.faults:
                f = v.finding
                key = ("fault", f.kind, f.device, f.op, f.ts_ns, v.explanation, int(f.details.get("count") or 1), width)
                wrapped = self._wrapped.get(key)
                if wrapped is None:
                    wrapped = list(fault_text(v).wrap(self.app.console, width))
                    for line in wrapped:
                        line.end = ""
                kept[key] = wrapped
                lines.extend(wrapped)
        return lines, starts

    def _wrap_resets(self, width: int, kept: Dict[Tuple[Any, ...], List[Text]]) -> Tuple[List[Text], List[int]]:
        if not self.resets:
            return [Text("no reset sequence yet", "dim", end="")], []
        lines: List[Text] = []
        starts: List[int] = []
        console = self.app.console
        for i, r in enumerate(self.resets):
            selected = i == self.selected
            key = None if r.status == "in progress" else (r.dev, r.ts_ns, r.status, len(r.steps), selected, width)
            wrapped = None if key is None else self._wrapped.get(key)
            if wrapped is None:
                wrapped = list(reset_text(r, selected).wrap(console, width))
                for line in wrapped:
                    line.end = ""
            if key is not None:
                kept[key] = wrapped
            starts.append(len(lines))
            lines.extend(wrapped)
        return lines, starts

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        strip = Strip(text_segments(self.lines[index], self.app.console))
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width).apply_style(self.rich_style)
