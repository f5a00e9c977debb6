"""pid -> command name, for display: /proc first, then the kernel's saved_cmdlines (for exited processes)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Dict, Optional

from npu_trace.errors import SourceError
from npu_trace.ftrace.tracefs import Tracefs

MAX_ENTRIES = 8192
REFRESH_S = 0.5


def saved_comms(fs: Optional[Tracefs]) -> Dict[int, str]:
    """The kernel's saved_cmdlines of a Tracefs (pid -> comm), or {} without one: names are a display aid, an
    unreadable file only means "<...>" names."""
    if fs is None:
        return {}
    try:
        return fs.saved_cmdlines()
    except SourceError:
        return {}


class CommCache:
    """Bounded LRU of pid -> comm. `read_saved` returns the kernel's saved names (e.g. `saved_comms(fs)`)."""

    def __init__(self, read_saved: Optional[Callable[[], Dict[int, str]]] = None, proc_root: str = "/proc") -> None:
        self.read_saved = read_saved
        self.proc_root = proc_root
        self.cache: OrderedDict[int, str] = OrderedDict()
        self._saved: Dict[int, str] = {}
        self._saved_at = 0.0

    def __call__(self, pid: int) -> str:
        comm = self.cache.get(pid)
        if comm is not None:
            self.cache.move_to_end(pid)
            return comm
        comm = self._lookup(pid)
        self.cache[pid] = comm
        if len(self.cache) > MAX_ENTRIES:
            self.cache.popitem(last=False)
        return comm

    def _lookup(self, pid: int) -> str:
        if pid == 0:
            return "<idle>"
        try:
            with open(f"{self.proc_root}/{pid}/comm") as f:
                return f.read().strip()
        except OSError:
            pass
        now = time.monotonic()
        if self.read_saved is not None and now - self._saved_at > REFRESH_S:
            self._saved_at = now
            self._saved = self.read_saved()
        return self._saved.get(pid, "<...>")
