"""The event log: bounded, virtualised (only the visible lines are rendered), pausable.

The rows arrive already filtered: the worker applies the log filter to every event (`tui.logfilter`) and
answers a filter change with the newest matching events it holds (`replace`).
Paused, the view is frozen; new rows wait in a bounded buffer and what overflows it is counted (`dropped`),
never silently lost from the count.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional

from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.fmt import row_text
from tui.logfilter import LogFilter
from tui.messages import LogRow

__all__ = ["LOG_MAX", "EventLog", "LogFilter"]

LOG_MAX = 10_000


class EventLog(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("end", "follow", "Follow", show=False),
        Binding("enter", "select", "Fields", show=False),
    ]

    class Selected(Message):
        def __init__(self, row: LogRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.rows: Deque[LogRow] = deque(maxlen=LOG_MAX)
        self.pending: Deque[LogRow] = deque(maxlen=LOG_MAX)
        self.paused = False
        self.dropped = 0  # rows that overflowed the buffer while paused
        self.cursor: Optional[int] = None  # None: follow the newest row

    @property
    def view(self) -> Deque[LogRow]:
        """What is shown: the rows (filtered by the worker)."""
        return self.rows

    # ---- data ----------------------------------------------------------------------------------
    def add_rows(self, rows: List[LogRow]) -> None:
        if not rows:
            return
        if self.paused:
            self.dropped += max(0, len(self.pending) + len(rows) - LOG_MAX)
            self.pending.extend(rows)
            return
        self._append(rows)

    def _append(self, rows: List[LogRow]) -> None:
        before = len(self.rows)
        self.rows.extend(rows)
        if self.cursor is not None:
            self.cursor = max(0, self.cursor - max(0, before + len(rows) - LOG_MAX))
        self._changed()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            rows, self.pending = list(self.pending), deque(maxlen=LOG_MAX)
            self._append(rows)

    def replace(self, rows: List[LogRow]) -> None:
        """A new filter's first window: it supersedes what is shown and what waits (paused)."""
        self.rows = deque(rows, maxlen=LOG_MAX)
        self.pending.clear()
        self.dropped, self.cursor = 0, None
        self._changed()

    def clear(self) -> None:
        self.replace([])

    def _changed(self) -> None:
        size = Size(self.size.width, len(self.rows))
        if size != self.virtual_size:
            self.virtual_size = size
        if self.cursor is None:  # following: anchored to the end (kept there through layouts too)
            self.anchor()
        self.refresh()

    def on_mount(self) -> None:
        self.anchor()

    def on_resize(self) -> None:
        self._changed()

    # ---- keys ----------------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        if not self.view:
            return
        cur = len(self.view) - 1 if self.cursor is None else self.cursor
        self.cursor = min(len(self.view) - 1, max(0, cur + delta))
        self.anchor(False)  # the cursor's row stays in view, not the newest
        self.scroll_to_region_row(self.cursor)
        self.refresh()

    def scroll_to_region_row(self, index: int) -> None:
        top = int(self.scroll_offset.y)
        height = self.scrollable_content_region.height
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True)
        elif index >= top + height:
            self.scroll_to(y=index - height + 1, animate=False, immediate=True)

    def action_follow(self) -> None:
        self.cursor = None
        self._changed()

    def action_select(self) -> None:
        if self.view:
            index = len(self.view) - 1 if self.cursor is None else self.cursor
            self.post_message(self.Selected(self.view[index]))

    # ---- rendering (only visible lines) --------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        if index >= len(self.view):
            return Strip.blank(width, self.rich_style)
        text = row_text(self.view[index])
        if index == self.cursor:
            text.stylize("reverse")
        segments = list(text.render(self.app.console))
        strip = Strip(segments).crop(scroll_x, scroll_x + width).extend_cell_length(width)
        return strip.apply_style(self.rich_style)
