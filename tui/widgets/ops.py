"""Operations: per (device, op) count, rate, p50/p99/max and spikes; a row that just spiked is highlighted."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from rich.text import Text
from textual.widgets import DataTable

from tui.fmt import dev_name, dur, safe
from tui.model import OpRow

HOT_UPDATES = 20  # a new spike stays highlighted this many updates (~2 s)
COLUMNS = ("dev", "op", "count", "rate/s", "p50", "p99", "max", "spikes")


class OpsTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in COLUMNS:
            self.add_column(col, key=col)
        self._seen: Dict[Tuple[Optional[int], str], int] = {}
        self._hot: Dict[Tuple[Optional[int], str], int] = {}

    def show(self, rows: List[OpRow]) -> None:
        for r in rows:
            key = (r.dev, r.op)
            if r.spikes > self._seen.get(key, 0):
                self._hot[key] = HOT_UPDATES
            self._seen[key] = r.spikes
        self._hot = {k: n - 1 for k, n in self._hot.items() if n > 1}
        self._fill(rows)

    def _fill(self, rows: List[OpRow]) -> None:
        cursor = self.cursor_row
        self.clear()
        for r in rows:
            hot = (r.dev, r.op) in self._hot
            style = "bold white on dark_red" if hot else ""
            cells = (dev_name(r.dev), safe(r.op), f"{r.count:,}", f"{r.rate:,.0f}", dur(r.p50_ns), dur(r.p99_ns),
                     dur(r.max_ns), f"{r.spikes}")  # fmt: skip
            spike_style = "bold red" if r.spikes else "dim"
            self.add_row(*(Text(c, style) for c in cells[:-1]), Text(cells[-1], style or spike_style))
        if rows and cursor < len(rows):
            self.move_cursor(row=cursor, animate=False)

    def reset(self) -> None:
        self._seen.clear()
        self._hot.clear()
        self.clear()
