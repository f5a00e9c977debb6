"""The feed, in the worker process: runs a source, analyses every batch, sends one `FeedUpdate` per interval.

A source (see `tui.worker.sources`) is injected: it calls `sink(items, now)` often (at least every ~50 ms, with an
empty list when nothing came) with the timeline's items in time order (a list, or a columnar `Block` from the
fast path: the live and replay sources hand those over) and its watermark (`now`: time has
reached it, events or not), `sink.restart()` when it starts over (seek back), `sink.end()` when it has nothing
more, and `sink.announce(resource)` once it holds a kernel resource (a tracefs instance) that the UI must
remove should this process die without cleaning up.

The feed talks to the UI only through its `Channel` (a pipe: see `tui.worker`): it sends updates, replies
and errors; it receives acknowledgements, requests (markers, recording, replay controls, the log filter)
and stop. Requests are served between batches, on this process's only analysing thread.

Backpressure: a new update is sent only once the UI acknowledged the previous one; until then the
interval's data keeps accumulating (the counts exactly, the log rows bounded to the newest, the summaries
superseded by the latest), so a slow UI sees fewer, larger updates, never a queue. Analysis never waits
for the UI.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, Union

from npu_trace.device.profiles import Profile
from npu_trace.errors import NpuTraceError
from npu_trace.events import LossLedger
from npu_trace.pipeline.blocks import Block
from npu_trace.process import StopFlag
from npu_trace.sources.procs import TaskSnapshot
from tui.messages import INTERVAL_S, ROWS_PER_UPDATE, one_line
from tui.worker.collector import Collector, fresh_counters

IDLE_S = 0.05  # after the source ended: how often requests are looked at


class UpdateSink(Protocol):
    def __call__(self, items: Union[List[Any], Block], now: Optional[int] = None) -> None: ...

    def restart(self) -> None: ...

    def end(self) -> None: ...

    def announce(self, resource: Dict[str, str]) -> None: ...

    def begin(self, tasks: TaskSnapshot) -> None: ...


class FeedSource(Protocol):
    """What the feed runs (in the worker process). Controls return False (or None) when the source cannot
    do them; they are called between batches, from the thread that runs the source."""

    label: str
    ledger: LossLedger

    def run(self, sink: UpdateSink, stop: StopFlag) -> None: ...

    def comm(self, pid: int) -> str: ...

    def detail(self) -> str: ...

    def mark(self, text: str) -> bool: ...

    def start_recording(self, path: str) -> bool: ...

    def stop_recording(self) -> bool: ...

    def recording(self) -> Optional[Tuple[str, int]]: ...

    def dump_now(self, directory: str) -> Optional[str]: ...

    def set_paused(self, paused: bool) -> bool: ...

    def set_speed(self, factor: float) -> Optional[float]: ...

    def seek(self, delta_s: float) -> bool: ...


class Channel(Protocol):
    def send(self, message: Tuple[Any, ...]) -> None: ...

    def receive(self, timeout: float = 0.0) -> Optional[Tuple[Any, ...]]:
        """One message from the UI, or None when there is none within `timeout`."""
        ...


# what a UI request may call: the source's controls, and the feed's own log filter
SOURCE_CALLS = frozenset(("mark", "start_recording", "stop_recording", "dump_now", "set_paused", "set_speed", "seek"))


class Feed:
    def __init__(
        self,
        source: FeedSource,
        profile: Profile,
        channel: Channel,
        stop: StopFlag,
        *,
        interval: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        rows_per_update: int = ROWS_PER_UPDATE,
    ) -> None:
        self.source = source
        self.profile = profile
        self.channel = channel
        self.stop = stop
        self.interval = interval
        self.clock = clock
        self.rows_per_update = rows_per_update
        self.collector = self._collector()
        self.query = ""
        self.seq = 0
        self.ack = 0
        self.restarted = False
        self.ended = False
        self.error = ""
        self._last = clock()

    def _collector(self) -> Collector:
        """A fresh collector; the source's scope filter (the pipeline's part of what it traces), if it has one."""
        scope = getattr(self.source, "scope_filter", None)
        return Collector(self.profile, self.source.comm, self.rows_per_update, scope)

    def run(self) -> None:
        """Run the source to its end (or stop), then keep answering the UI until it says stop. A source's
        failure is reported (one line, in the counters) and the UI keeps what it has."""
        try:
            if not self.stop.stopped:  # stopped before it began (SIGTERM while the worker started): not run
                self.source.run(self, self.stop)
        except NpuTraceError as exc:
            self.error = one_line(exc)
        except Exception as exc:  # a bug in a source: say it in the UI; the source cleaned up as it unwound
            self.error = f"worker: {type(exc).__name__}: {one_line(exc)}"
        self.end()
        while not self.stop.stopped:
            self.serve(IDLE_S)
            if self.ack >= self.seq and self.clock() - self._last >= 1.0:
                self._post()  # ended: a slow heartbeat keeps the source's detail (loss counters) current

    # ---- the UI's requests ---------------------------------------------------------------------
    def serve(self, timeout: float = 0.0) -> None:
        """Handle what the UI sent (non-blocking unless `timeout`)."""
        while not self.stop.stopped:
            msg = self.channel.receive(timeout)
            if msg is None:
                return
            timeout = 0.0
            what = msg[0]
            if what == "ack":
                self.ack = max(self.ack, int(msg[1]))
            elif what == "call":
                self._call(int(msg[1]), str(msg[2]), msg[3])
            elif what == "stop":
                self.stop.set()

    def _call(self, rid: int, name: str, args: Tuple[Any, ...]) -> None:
        try:
            if name == "filter":
                value: Any = self.collector.set_filter(str(args[0]))
                self.query = str(args[0])  # applied again after a seek: only a query that was taken
            elif name in SOURCE_CALLS:
                value = getattr(self.source, name)(*args)
            else:
                raise ValueError(f"unknown request {name!r}")
        except (NpuTraceError, OSError, ValueError, TypeError) as exc:
            self.channel.send(("reply", rid, None, one_line(exc)))
            return
        self.channel.send(("reply", rid, value, ""))

    # ---- the sink ------------------------------------------------------------------------------
    def __call__(self, items: Union[List[Any], Block], now: Optional[int] = None) -> None:
        self.serve()
        if isinstance(items, Block):
            self.collector.add_block(items, now)
        else:
            self.collector.add(items, now)
        if self.ack >= self.seq and self.clock() - self._last >= self.interval:
            self._post()

    def restart(self) -> None:
        self.collector = self._collector()
        if self.query:
            self.collector.set_filter(self.query)
        self.restarted = True
        self.ended = False

    def end(self) -> None:
        """The source has nothing more: flush the detectors (leaks, incomplete sequences) and say so, once."""
        if not self.ended:
            self.ended = True
            self.collector.finish()
            self._post()

    def announce(self, resource: Dict[str, str]) -> None:
        self.channel.send(("resource", dict(resource)))

    def begin(self, tasks: TaskSnapshot) -> None:
        """The tasks alive when the source began tracing (before its first items): the analysis's thread ->
        process map starts from them (npu_trace.detectors.processes)."""
        self.collector.analysis.begin_tasks(*tasks)

    def _post(self) -> None:
        now = self.clock()
        self.seq += 1
        counters = fresh_counters(self.source)
        counters.error = self.error
        update = self.collector.update(self.seq, now - self._last, counters, self.ended)
        update.restart, self.restarted = self.restarted, False
        self._last = now
        self.channel.send(("update", update))
