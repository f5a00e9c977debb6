"""Helpers for the TUI tests (no tests here): synthesized simulator runs cut into batches, waiting helpers, and
sources for the worker's failure paths.

The sources are built in the TUI's worker process (spawned: it imports this module by name), so this module
imports no Textual at module level: the worker must be able to run without it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from npu_trace.device.profiles import PROFILES
from npu_trace.errors import SourceError
from npu_trace.events import TraceEvent
from npu_trace.process import StopFlag
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import synth_events
from tui.messages import ROWS_PER_UPDATE, SourceSpec
from tui.worker.feed import UpdateSink
from tui.worker.sources import IDLE_S, BaseSource, FakeSource

if TYPE_CHECKING:
    from tui.ui.app import NpuTraceApp

PROFILE = PROFILES["sim"]
BATCH_NS = 50_000_000


def mixed_events(seed: int = 1, duration_s: float = 2.0, rate: float = 400, devices: int = 2) -> List[TraceEvent]:
    return synth_events(plan("mixed", seed, duration_s, rate, devices))


def batches(events: List[TraceEvent], until_ns: Optional[int] = None, span_ns: int = BATCH_NS) -> List[List[Any]]:
    """Events (optionally up to `until_ns`) cut into batches of `span_ns` of event time."""
    out: List[List[Any]] = []
    for ev in events:
        if until_ns is not None and ev.ts_ns > until_ns:
            break
        if not out or ev.ts_ns - out[-1][0].ts_ns >= span_ns:
            out.append([])
        out[-1].append(ev)
    return out


def fake_spec(items: List[List[Any]], **kw: Any) -> SourceSpec:
    kw.setdefault("comms", {4242: "sim-executor"})
    return SourceSpec(FakeSource, (items,), kw)


def fake_app(items: List[List[Any]], **kw: Any) -> NpuTraceApp:
    from tui.ui.app import NpuTraceApp

    rows = kw.pop("rows", ROWS_PER_UPDATE)
    return NpuTraceApp(fake_spec(items, **kw), PROFILE, rows=rows)


def spec_app(spec: SourceSpec, **kw: Any) -> NpuTraceApp:
    from tui.ui.app import NpuTraceApp

    return NpuTraceApp(spec, PROFILE, **kw)


async def wait_for(pilot: Any, cond: Callable[[], Any], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)


def settled(app: NpuTraceApp, events: int) -> Callable[[], bool]:
    """All `events` seen by the UI and their spikes' context resolved."""
    c = lambda: app.counters  # noqa: E731 - the app replaces its counters with each update
    return lambda: c().events >= events and c().pending_spikes == 0 and c().rate == 0


# ---- sources for the failure paths (built in the worker) ---------------------------------------------------
class ResourceSource(BaseSource):
    """Stands for a live session: makes `root/instances/NAME` (a tracefs instance's place), announces it, feeds
    `batches`, then holds; removes the directory when it ends, however it ends. `fail` raises after the
    batches: "source" (an NpuTraceError), "bug" (any other exception), "exit" (the process dies at once,
    nothing cleaned up)."""

    label = "resource"

    def __init__(self, root: str, batches: List[List[Any]], fail: str = "") -> None:
        super().__init__()
        self.root = root
        self.items = batches
        self.fail = fail
        self.name = f"npu-trace-{os.getpid()}-test"

    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        path = os.path.join(self.root, "instances", self.name)
        os.makedirs(path)
        try:
            sink.announce({"tracefs": self.root, "instance": self.name})
            for batch in self.items:
                sink(batch)
            if self.fail == "source":
                raise SourceError("the trace pipe went away (test)")
            if self.fail == "bug":
                raise RuntimeError("a bug in the source (test)")
            if self.fail == "exit":
                os._exit(7)
            while not stop.stopped:
                sink([])
                time.sleep(IDLE_S)
        finally:
            os.rmdir(path)

    def detail(self) -> str:
        return f"instance {self.name}; textual loaded: {'textual' in sys.modules}"


def resource_spec(root: str, items: List[List[Any]], fail: str = "") -> SourceSpec:
    return SourceSpec(ResourceSource, (root, items, fail))


def instances(root: str) -> List[str]:
    try:
        return sorted(os.listdir(os.path.join(root, "instances")))
    except FileNotFoundError:
        return []


def orphan_main(root: str) -> None:
    """A UI process without a UI (`python -c`): starts a worker on a ResourceSource, prints the worker's pid
    once its instance exists, then waits to be killed (tests: the worker must clean up on its own)."""
    from tui.ui.client import FeedClient

    client = FeedClient(resource_spec(root, [[]]), PROFILE, lambda _msg: None)
    client.start()
    while not instances(root):
        time.sleep(0.02)
    print(client.pid, flush=True)
    time.sleep(600)


def test_a_reset_in_progress_shows_each_step_once_however_many_channels_tell_it() -> None:
    from npu_trace.device.profiles import get_profile
    from npu_trace.events import NpuEvent
    from tui.worker.collector import Collector

    col = Collector(get_profile("sim"), lambda pid: "x")
    steps = ("ready_for_hotreset", "unbind", "remove")
    kmsg = [NpuEvent(1000 + i, "reset_step", 0, "reset", -1, -1, {"step": s, "source": "kmsg"})
            for i, s in enumerate(steps)]  # fmt: skip
    uevent = [NpuEvent(1500 + i, "reset_step", 0, "reset", -1, -1, {"step": s, "source": "uevent"})
              for i, s in enumerate(steps[1:])]  # fmt: skip
    col.add(kmsg)
    col.add(uevent)
    col.add([NpuEvent(1000 + 2_000_000_000, "irq", 1, "irq", -1, -1, {"source": "bpf"})])  # time moves on
    (view,) = col._resets()  # still open (its next step is not overdue), each step told by two channels once
    assert view.status == "in progress" and [s[0] for s in view.steps] == list(steps)


def test_the_collector_applies_the_sources_scope_and_takes_a_batch_all_out_of_it() -> None:
    """The worker's analysis applies the pipeline's part of the source's scope; a batch wholly out of scope is
    counted as dropped, not shown, and breaks nothing."""
    from npu_trace.device.profiles import get_profile
    from npu_trace.events import NpuEvent
    from npu_trace.pipeline.scope import Scope, ScopeFilter
    from tui.worker.collector import Collector

    scope = ScopeFilter(Scope(devices=(1,)))
    col = Collector(get_profile("sim"), lambda pid: "x", scope=scope)
    col.add([NpuEvent(10, "timeout", 0, "cq_wait", 5, 0, {"source": "kmsg"})], now=20)
    col.add([NpuEvent(30, "timeout", 1, "cq_wait", 5, 0, {"source": "kmsg"})], now=40)
    assert col.total == 1 and [row.dev for row in col.rows] == [1]
    assert scope.dropped == {"device": 1}


def test_the_collectors_total_counts_events_not_losses() -> None:
    """The status's total counted a loss record as an event (a damaged recording: 3,227 total where replay said
    3,225 events); losses are said apart, as replay's summary says them."""
    from npu_trace.device.profiles import get_profile
    from npu_trace.events import Loss, NpuEvent
    from tui.worker.collector import Collector

    col = Collector(get_profile("sim"), lambda pid: "x")
    col.add([Loss("recording", 0, "damaged", 0, 5), NpuEvent(10, "timeout", 0, "cq_wait", 5, 0, {"source": "kmsg"}),
             Loss("tracefs", 1, "overrun", 3, 15)], now=20)  # fmt: skip
    assert col.total == 1


S = 1_000_000_000


def fault_events() -> List[Any]:
    """An application's heartbeat error on NPU 1, a kernel soft lockup just after it, and the driver's heartbeat
    timeout on NPU 1 two seconds later (it explains the application's error best: npu_trace.detectors.links)."""
    from npu_trace.events import NpuEvent

    said = {"source": "app_log", "results": [507010], "text": "EL0001", "time_resolution_ns": 1000}
    app = NpuEvent(S, "app_error", 1, "heartbeat_lost", 389, -1, said)
    block = {"fault": "soft_lockup", "cpu": 1, "comm": "kworker/1:0", "driver_functions": ["trs_chan_irq_proc"],
             "functions": ["trs_chan_irq_proc [asdrv_trsbase]"], "text": "BUG", "lines": 2, "end_ts_ns": S + 10,
             "source": "kmsg"}  # fmt: skip
    lockup = NpuEvent(S + 5, "fault", None, "kernel_fault", 0, 1, block)
    timeout = NpuEvent(3 * S, "timeout", 1, "heartbeat", -1, -1, {"source": "kmsg"})
    return [app, lockup, timeout]


def test_faults_are_shown_and_an_app_error_is_explained_by_what_follows_it_within_the_link_window() -> None:
    from npu_trace.device.profiles import get_profile
    from npu_trace.events import NpuEvent
    from tui.messages import Counters
    from tui.worker.collector import Collector

    col = Collector(get_profile("sim"), lambda pid: "x")
    app, lockup, timeout = fault_events()
    col.add([app, lockup], now=S + 10)
    first = col.update(1, 0.1, Counters()).faults
    assert [(v.finding.kind, v.finding.op) for v in first] == [("app_error", "heartbeat_lost"),
                                                               ("kernel_fault", "soft_lockup")]
    assert "kernel" in first[0].explanation  # the lockup noted after it in the same batch: explained again
    col.add([timeout], now=5 * S)  # a timeout is a finding once its copies' merge window has passed
    second = col.update(2, 0.1, Counters()).faults
    assert second[0].explanation.startswith("a heartbeat timeout on device 1")  # preferred to the lockup
    col.add([NpuEvent(9 * S, "irq", 1, "irq", -1, -1, {"source": "bpf"})], now=9 * S)
    col.update(3, 0.1, Counters())
    assert not col.unsettled  # past its settle time: what it says no longer changes
