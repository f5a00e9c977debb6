"""Operations: per (device, op) count, rate, p50/p99/max and spikes; a row that just spiked is highlighted.

A light table drawn line by line (a ScrollView): it looks like a DataTable (the same component classes and
CSS: header, zebra stripes, a row cursor), but a change costs one line per visible row, where a DataTable
renders every cell again through Rich (~20-40 ms for this table, measured: a key pressed behind it waited
that long). Lines are rendered only when visible and kept until the data, the cursor or the focus change.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.fmt import dev_name, dur, safe
from tui.messages import OpRow

HOT_S = 2.0  # a new spike stays highlighted this long
COLUMNS = ("dev", "op", "count", "rate/s", "p50", "p99", "max", "spikes")
PAD = 1  # spaces on each side of a cell, as a DataTable's cell_padding
HOT_STYLE = Style.parse("bold white on dark_red")
SPIKE_STYLE = Style.parse("bold red")
DIM = Style.parse("dim")
NO_STYLE = Style()

Key = Tuple[Optional[int], str]
Cell = Tuple[str, Style]  # a cell's (safe) text and its own style


class OpsTable(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"datatable--header", "datatable--cursor", "datatable--even-row", "datatable--odd-row"}
    DEFAULT_CSS = """
    OpsTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .datatable--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .datatable--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("home", "cursor(-1000000)", "First", show=False),
        Binding("end", "cursor(1000000)", "Last", show=False),
    ]

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.rows: List[OpRow] = []
        self.cursor_row = 0
        self._cells: List[Tuple[Cell, ...]] = []
        self._widths: List[int] = [len(c) + 2 * PAD for c in COLUMNS]
        self._seen: Dict[Key, int] = {}
        self._hot: Dict[Key, float] = {}  # key -> highlighted until (monotonic)
        self._shown_hot: Set[Key] = set()
        self._lines: Dict[Tuple[int, int, bool], Strip] = {}  # (row, width, focused) -> line; -1: the header

    # ---- data ----------------------------------------------------------------------------------
    def show(self, rows: List[OpRow]) -> None:
        now = time.monotonic()
        for r in rows:
            key = (r.dev, r.op)
            if r.spikes > self._seen.get(key, 0):
                self._hot[key] = now + HOT_S
            self._seen[key] = r.spikes
        self._hot = {k: until for k, until in self._hot.items() if until > now}
        hot = set(self._hot)
        if rows == self.rows and hot == self._shown_hot:  # unchanged: nothing drawn again
            return
        self.rows, self._shown_hot = rows, hot
        self._cells = [_cells(r, (r.dev, r.op) in hot) for r in rows]
        header = [len(c) for c in COLUMNS]
        self._widths = [max([w, *(cell_len(t) for t, _ in col)]) + 2 * PAD for w, col in zip(header, zip(*self._cells))]
        if not self._cells:
            self._widths = [w + 2 * PAD for w in header]
        self.cursor_row = min(self.cursor_row, max(0, len(rows) - 1))
        self._changed()

    def reset(self) -> None:
        self._seen.clear()
        self._hot.clear()
        self.rows, self._cells, self._shown_hot, self.cursor_row = [], [], set(), 0
        self._changed()

    def _changed(self) -> None:
        self._lines.clear()
        size = Size(sum(self._widths), len(self.rows) + 1)
        if size != self.virtual_size:
            self.virtual_size = size
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        if not self.rows:
            return
        self.cursor_row = min(len(self.rows) - 1, max(0, self.cursor_row + delta))
        self._lines.clear()
        top, height = int(self.scroll_offset.y), self.scrollable_content_region.height - 1
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + height:
            self.scroll_to(y=self.cursor_row - height + 1, animate=False, immediate=True)
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # ---- rendering (only visible lines; the header stays on top) ---------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        row = -1 if y == 0 else scroll_y + y - 1
        if row >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        key = (row, width, self.has_focus)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = self._line(row, width)
        return line.crop(scroll_x, scroll_x + width) if scroll_x else line

    def _line(self, row: int, width: int) -> Strip:
        component = self.get_component_styles
        if row < 0:
            row_style = component("datatable--header").rich_style
            cells: Sequence[Cell] = [(c, NO_STYLE) for c in COLUMNS]
            cursor = Style()
        else:
            row_style = component("datatable--odd-row" if row % 2 else "datatable--even-row").rich_style
            cells = self._cells[row]
            cursor = self.get_component_rich_style("datatable--cursor") if row == self.cursor_row else Style()
        pre = row_style + cursor
        post = Style.from_color(color=cursor.color) if cursor.color else Style()  # css foreground over the cell's
        segments: List[Segment] = []
        for (text, style), cell_width in zip(cells, self._widths):
            segments.append(Segment(" " * PAD, pre + post))
            segments.append(Segment(text, pre + style + post))
            segments.append(Segment(" " * (cell_width - PAD - cell_len(text)), pre + post))
        remaining = width - sum(self._widths)
        if remaining > 0:
            segments.append(Segment(" " * remaining, pre))
        return Strip(segments).adjust_cell_length(max(width, sum(self._widths)), self.rich_style).simplify()


def _cells(r: OpRow, hot: bool) -> Tuple[Cell, ...]:
    style = HOT_STYLE if hot else NO_STYLE
    texts = (dev_name(r.dev), safe(r.op), f"{r.count:,}", f"{r.rate:,.0f}", dur(r.p50_ns), dur(r.p99_ns),
             dur(r.max_ns))  # fmt: skip
    spikes = (f"{r.spikes}", style if hot else SPIKE_STYLE if r.spikes else DIM)
    return (*((t, style) for t in texts), spikes)
