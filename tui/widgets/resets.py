"""The reset timeline: each sequence step by step (+time since its first step), in progress or closed, with
its trigger and precursor window (timeouts, ECC deltas, hottest temperature)."""

from __future__ import annotations

from typing import List, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.fmt import STATE_STYLE, dev_name, dur, safe, stamp
from tui.model import ResetView

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


class ResetsPanel(VerticalScroll):
    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.resets: List[ResetView] = []
        self.selected: Optional[int] = None
        self.body = Static(Text("no reset sequence yet", "dim"), id="reset-body")

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, resets: List[ResetView]) -> None:
        self.resets = resets
        self._redraw()

    def select(self, index: int) -> None:
        self.selected = index
        self._redraw()

    def _redraw(self) -> None:
        body = self.body
        if not self.resets:
            body.update(Text("no reset sequence yet", "dim"))
            return
        t = Text()
        for i, r in enumerate(self.resets):
            if i:
                t.append("\n")
            t.append_text(reset_text(r, i == self.selected))
        body.update(t)
        if self.selected is None:
            self.scroll_end(animate=False)
