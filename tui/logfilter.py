"""The event log's filter: parsed in the UI, applied in the worker process to every event (not only to the
rows that reached the screen), so a filter shows the newest matching events whatever the event rate."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from npu_trace.events import NpuEvent
from tui.fmt import log_row, row_plain
from tui.messages import COMM, DEV, KIND, PID, LogRow


@dataclass(frozen=True)
class LogFilter:
    dev: Optional[int] = None
    kinds: Tuple[str, ...] = ()
    pid: Optional[int] = None
    comm: str = ""
    text: str = ""

    @classmethod
    def parse(cls, query: str) -> LogFilter:
        """`dev:0 kind:timeout pid:12 comm:name words...` (words: a substring of the line)."""
        dev, pid, comm, kinds, words = None, None, "", [], []
        for tok in query.split():
            key, _, value = tok.partition(":")
            number = _number(value[3:] if key == "dev" and value.startswith("npu") else value)  # dev:npu3, dev:3
            if key == "dev" and number is not None:
                dev = number
            elif key == "pid" and number is not None:
                pid = number
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
        if self.dev is not None and row[DEV] != self.dev:
            return False
        if self.kinds and row[KIND] not in self.kinds:
            return False
        if self.pid is not None and row[PID] != self.pid:
            return False
        if self.comm and self.comm not in row[COMM]:
            return False
        return not self.text or self.text in row_plain(row).lower()

    def select(self, events: Sequence[NpuEvent], comm_of: Callable[[int], str]) -> List[NpuEvent]:
        """The events that match, in order; the cheap conditions first, the line text only for survivors."""
        out: Sequence[NpuEvent] = events
        if self.dev is not None:
            out = [ev for ev in out if ev.dev == self.dev]
        if self.kinds:
            out = [ev for ev in out if ev.kind in self.kinds]
        if self.pid is not None:
            out = [ev for ev in out if ev.pid == self.pid]
        if self.comm:
            out = [ev for ev in out if self.comm in comm_of(ev.pid)]
        if self.text:
            out = [ev for ev in out if self.text in row_plain(log_row(ev, comm_of(ev.pid))).lower()]
        return list(out)


def _number(text: str) -> Optional[int]:
    """A device or process number: ASCII digits ("²" and "٣" are digits to str.isdigit, not to int)."""
    return int(text) if re.fullmatch(r"[0-9]{1,10}", text) else None
