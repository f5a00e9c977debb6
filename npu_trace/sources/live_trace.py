"""The live source: a tracefs session and its channels (kmsg, uevents, npu-smi, BPF) as one pump source.

Each read takes the time first, then the channels' events (and their watermark), then every CPU's raw pages:
one `Batch` whose `Mark` says which CPUs were read empty. The pages stay raw: a recorder stores them as they
are, the timeline (`npu_trace.pipeline.blocktimeline.BlockTimeline`, made by `block_timeline()`) walks them
with the session's formats and puts everything in one time order.
"""

from __future__ import annotations

import contextlib
from typing import Any, List, Optional, Tuple

from npu_trace.events import LossLedger
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.pipeline.blocktimeline import BlockTimeline, block_timeline
from npu_trace.sources.host_channels import Channels
from npu_trace.sources.npusmi_source import mono_ns
from npu_trace.sources.tracefs_source import TracefsSession

BPF_BACKLOG = 256 << 10  # bytes of BPF ring buffer still unread after a read: poll again at once
PAGE_BYTES = 4096  # a ring-buffer page before the session knows its own


class LiveTrace:
    """A context manager (starts the session, opens the channels; closes both on every path) and a `Source`."""

    def __init__(self, session: TracefsSession, channels: Optional[Channels] = None) -> None:
        self.session = session
        self.channels = channels
        self._full = 0
        self._ended = False

    @property
    def ledger(self) -> LossLedger:
        return self.session.ledger

    def __enter__(self) -> LiveTrace:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.session)
            if self.channels is not None:
                stack.enter_context(self.channels)
            stack.pop_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.channels is not None:
                self.channels.close()
        finally:
            self.session.close()

    def block_timeline(self, keep_unknown: bool = False) -> BlockTimeline:
        """The timeline of this session's pages (its formats, its loss ledger): their records and the channels'
        items in one time order, as Blocks (`keep_unknown`: see BlockTimeline)."""
        session = self.session
        assert session.header is not None and session.decoders is not None, "the session has not started"
        return block_timeline(session.header, session.decoders, session.layouts, ledger=session.ledger,
                              cpus=session.cpus, channels=self.channels is not None,
                              keep_unknown=keep_unknown)  # fmt: skip

    # ---- the pump's side -------------------------------------------------------------------------------
    def read(self) -> Batch:
        started = mono_ns()
        self.session.refresh_switches()
        events, wm = self._channels()
        before = self.session.full_pages
        pages, caught = self.session.read_pass()
        self._full = self.session.full_pages - before
        return Batch(pages, events, Mark(started, caught, wm))

    def idle(self) -> bool:
        """Wait a poll interval before the next read: this one read less than a quarter of a CPU's ring buffer
        in full pages (every CPU caught up, or writing slower than the buffer fills in many polls), and no BPF
        backlog. Reading again at once while a CPU writes swaps its partial page out from under the writer at
        every read; waiting lets the pages fill (measured at 2.5 M events/s on one CPU: 118-147 ns of reader
        CPU per event waiting, 153-159 reading at once, the writer as fast)."""
        bpf = self.channels.bpf if self.channels is not None else None
        header = self.session.header
        page = header.page_size if header is not None else PAGE_BYTES
        busy = self._full * page > self.session.buffer_kb * 1024 // 4
        return not busy and (bpf is None or bpf.pending() < BPF_BACKLOG)

    def done(self) -> bool:
        return self._ended

    def finish(self) -> Batch:
        """Stop tracing; the pages left in the buffers and the channels' last events, as the final batch."""
        started = mono_ns()
        pages = self.session.stop()
        events, _ = self._channels(final=True)
        self._ended = True
        return Batch(pages, events, Mark(started, tuple(self.session.caught_up), None), final=True)

    def _channels(self, final: bool = False) -> Tuple[List[Any], Optional[int]]:
        if self.channels is None:
            return [], None
        events = self.channels.read(final)
        return events, self.channels.watermark_ns
