"""The tracefs session on the real kernel: nothing read is lost, nothing unread is left behind."""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from npu_trace.events import TraceEvent
from npu_trace.sources.tracefs_source import TracefsSession


def mine(items: List[Any]) -> int:
    pid = os.getpid()
    return sum(1 for x in items if isinstance(x, TraceEvent) and x.pid == pid)


@pytest.mark.privileged
@pytest.mark.parametrize("raw", [False, True])
def test_stop_drains_full_pages_behind_a_partly_read_page(raw: bool) -> None:
    """A page read while the writer was on it leaves a short remainder; full pages written after it must
    still be read when the session stops (a short page is not the end of the buffer)."""
    os.sched_setaffinity(0, {0})
    try:
        with TracefsSession(["syscalls:sys_enter_getpid"], buffer_kb=4096, tag="drain") as session:
            out: List[Any] = []
            for _ in range(1000):
                os.getpid()
            (session.read_raw if raw else session.read)(out)  # a partial read of the current page
            for _ in range(50_000):
                os.getpid()
            session.stop(out, raw=raw)
            if raw:
                pages, out = out, []
                session.decode_pages(pages, out)
            assert mine(out) == 51_000
            assert not session.ledger.incomplete()
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
