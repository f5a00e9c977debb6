"""The event log: bounded, filtered, virtualised (only the visible lines are rendered), pausable.

Paused, the view is frozen; new rows wait in a bounded buffer and what overflows it is counted (`dropped`),
never silently lost from the count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional

from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.fmt import row_plain, row_text
from tui.model import LogRow

LOG_MAX = 10_000


@dataclass(frozen=True)
class LogFilter:
    dev: Optional[int] = None
    kinds: tuple = ()
    pid: Optional[int] = None
    comm: str = ""
    text: str = ""

    @classmethod
    def parse(cls, query: str) -> LogFilter:
        """`dev:0 kind:timeout pid:12 comm:name words...` (words: a substring of the line)."""
        dev, pid, comm, kinds, words = None, None, "", [], []
        for tok in query.split():
            key, _, value = tok.partition(":")
            if key == "dev" and value.lstrip("npu").isdigit():
                dev = int(value.lstrip("npu"))
            elif key == "pid" and value.isdigit():
                pid = int(value)
            elif key == "kind" and value:
                kinds.append(value)
            elif key == "comm" and value:
                comm = value
            else:
                words.append(tok)
        return cls(dev, tuple(kinds), pid, comm, " ".join(words).lower())

    def empty(self) -> bool:
        return self == LogFilter()

    def match(self, row: LogRow) -> bool:
        ev, comm = row
        if self.dev is not None and ev.dev != self.dev:
            return False
        if self.kinds and ev.kind not in self.kinds:
            return False
        if self.pid is not None and ev.pid != self.pid:
            return False
        if self.comm and self.comm not in comm:
            return False
        return not self.text or self.text in row_plain(row).lower()


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
        self.view: Deque[LogRow] = deque(maxlen=LOG_MAX)
        self.pending: Deque[LogRow] = deque(maxlen=LOG_MAX)
        self.filter = LogFilter()
        self.paused = False
        self.dropped = 0  # rows that overflowed the buffer while paused
        self.cursor: Optional[int] = None  # None: follow the newest row

    # ---- data ----------------------------------------------------------------------------------
    def add_rows(self, rows: List[LogRow]) -> None:
        if self.paused:
            self.dropped += max(0, len(self.pending) + len(rows) - LOG_MAX)
            self.pending.extend(rows)
            return
        self._append(rows)

    def _append(self, rows: List[LogRow]) -> None:
        self.rows.extend(rows)
        flt = self.filter
        before = len(self.view)
        self.view.extend(rows if flt.empty() else (r for r in rows if flt.match(r)))
        if self.cursor is not None:
            self.cursor = max(0, self.cursor - max(0, before + len(rows) - LOG_MAX))
        self._changed()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            rows, self.pending = list(self.pending), deque(maxlen=LOG_MAX)
            self._append(rows)

    def set_filter(self, flt: LogFilter) -> None:
        self.filter = flt
        self.view = deque((r for r in self.rows if flt.match(r)), maxlen=LOG_MAX)
        self.cursor = None
        self._changed()

    def clear(self) -> None:
        self.rows.clear()
        self.view.clear()
        self.pending.clear()
        self.dropped, self.cursor = 0, None
        self._changed()

    def _changed(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.view))
        if self.cursor is None:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    # ---- keys ----------------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        if not self.view:
            return
        cur = len(self.view) - 1 if self.cursor is None else self.cursor
        self.cursor = min(len(self.view) - 1, max(0, cur + delta))
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
