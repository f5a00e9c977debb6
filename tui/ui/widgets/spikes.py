"""Spikes: every latency spike stays listed; the highlighted one shows what happened within a few ms."""

from __future__ import annotations

from typing import Any, List, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.fmt import dev_name, dur, row_text, safe, stamp
from tui.messages import CONTEXT_NS, SpikeView

MAX_SPIKES = 500


def context_text(view: SpikeView) -> Text:
    f = view.finding
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{safe(f.op)} on {dev_name(f.device)}: {dur(f.details.get('latency_ns'))} ", "bold red")
    t.append(f"(threshold {dur(f.details.get('threshold_ns'))}, {', '.join(f.details.get('rules', []))}); ")
    t.append(f"{len(view.context) + view.more} events within {CONTEXT_NS // 1_000_000} ms", "dim")
    for row in view.context:
        t.append("\n")
        t.append_text(row_text(row))
    if view.more:
        t.append(f"\n... {view.more} more", "dim")
    return t


class SpikesPanel(Vertical):
    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.spikes: List[SpikeView] = []
        self.table: DataTable[Any] = DataTable(id="spike-table", cursor_type="row", zebra_stripes=True)
        self.context = Static(Text("no spike yet", "dim"), id="spike-context")

    def compose(self) -> ComposeResult:
        yield self.table
        yield self.context

    def on_mount(self) -> None:
        table = self.table
        for col in ("time", "dev", "op", "latency", "threshold"):
            table.add_column(col)

    def add(self, views: List[SpikeView]) -> None:
        table = self.table
        for v in views:
            f = v.finding
            if len(self.spikes) >= MAX_SPIKES:
                return
            self.spikes.append(v)
            table.add_row(stamp(f.ts_ns), dev_name(f.device), Text(safe(f.op), "bold red"),
                          dur(f.details.get("latency_ns")), dur(f.details.get("threshold_ns")))  # fmt: skip
        if views and len(self.spikes) == len(views):
            self.select(0)

    def select(self, index: int) -> None:
        if 0 <= index < len(self.spikes):
            self.table.move_cursor(row=index, animate=False)
            self.context.update(context_text(self.spikes[index]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.select(event.cursor_row)

    def clear(self) -> None:
        self.spikes = []
        self.table.clear()
        self.context.update(Text("no spike yet", "dim"))
