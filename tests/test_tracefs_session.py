"""The tracefs session on the real kernel: nothing read is lost, nothing unread is left behind."""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from npu_trace.events import TraceEvent
from npu_trace.pipeline import Batch
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.tracefs_source import TracefsSession
from reference.pages import CpuDecoders


def mine(items: List[Any]) -> int:
    pid = os.getpid()
    return sum(1 for x in items if isinstance(x, TraceEvent) and x.pid == pid)


@pytest.mark.privileged
@pytest.mark.parametrize("timeline", [False, True])
def test_stop_drains_full_pages_behind_a_partly_read_page(timeline: bool) -> None:
    """A page read while the writer was on it leaves a short remainder; full pages written after it must
    still be read when the session stops (a short page is not the end of the buffer). Through the session's
    own decoders, and through the live source and its timeline (what every consumer reads)."""
    os.sched_setaffinity(0, {0})
    try:
        session = TracefsSession(["syscalls:sys_enter_getpid"], buffer_kb=4096, tag="drain")
        with LiveTrace(session) as source:
            for _ in range(1000):
                os.getpid()
            first = source.read() if timeline else Batch(session.read_pass()[0], [])  # a partial read
            for _ in range(50_000):
                os.getpid()
            if timeline:
                line = source.block_timeline()
                out = line.push(first).items() + line.push(source.finish()).items()
                assert [x.ts_ns for x in out] == sorted(x.ts_ns for x in out)
            else:  # the pages decoded one record at a time (the tests' reference decoder)
                out = []
                assert session.header is not None and session.decoders is not None
                CpuDecoders(session.header, session.decoders).decode(first.pages + session.stop(), out)
            assert mine(out) == 51_000
            assert not session.ledger.incomplete()
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
