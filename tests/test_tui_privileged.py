"""The TUI live on the simulator (real tracefs): runs, shows events, quits cleanly, leaves no instance.

The session (its tracefs instance) is created, read and removed in the TUI's worker process."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Iterator

import pytest

from npu_trace import sim
from npu_trace.device.profiles import PROFILES
from npu_trace.ftrace.tracefs import Tracefs
from replay_support import replayed_items
from test_tui_support import wait_for
from tui.messages import FIELDS, KIND, SourceSpec
from tui.ui.app import NpuTraceApp
from tui.ui.widgets.eventlog import EventLog
from tui.worker.live_feed import session_source


@contextlib.contextmanager
def simulator() -> Iterator[Tracefs]:
    """The simulator loaded; unloaded afterwards only if it was not loaded before (others load and unload it
    concurrently)."""
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    try:
        yield fs
    finally:
        if not was_loaded:
            sim.unload(fs)


@contextlib.asynccontextmanager
async def scenario_once_tracing(pilot: Any, app: NpuTraceApp, seed: int) -> AsyncIterator[None]:
    """The mixed scenario run once the worker has made its session (its instance announced), waited for at the
    end: started before, on a loaded host it could end before the worker traced any of it."""
    await wait_for(pilot, lambda: app.feed.resource.get("instance") or app.error, timeout=60)
    assert not app.error, app.error
    run = sim.start_scenario("mixed", seed, 2.0, 300, 2, ensure_loaded=False)
    try:
        yield
        run.wait()
    finally:
        run.terminate()


@pytest.mark.privileged
@pytest.mark.asyncio
async def test_live_on_the_simulator_then_quit_removes_the_instance(tmp_path: Any) -> None:
    with simulator() as fs:
        spec = SourceSpec(session_source, (["ascend:*"], fs.root, "sim", "tui"))
        app = NpuTraceApp(spec, PROFILES["sim"], record_dir=str(tmp_path))
        async with app.run_test(size=(120, 40)) as pilot, scenario_once_tracing(pilot, app, 3):
            await wait_for(pilot, lambda: app.counters.events > 100, timeout=20)
            instance = app.feed.resource["instance"]  # announced by the worker once it made it
            assert instance in fs.instance_names() and str(app.feed.pid) in instance
            await pilot.press("r")
            await wait_for(pilot, lambda: app.counters.recording is not None, timeout=10)
            await pilot.press("m", "ctrl+u", *"tui-mark", "enter")
            log = app.query_one(EventLog)  # written to the instance's trace_marker: back as an event
            await wait_for(
                pilot, lambda: any(row[KIND] == "marker" and row[FIELDS] == "text=tui-mark" for row in log.view)
            )
            await pilot.press("d")  # the flight ring's last minutes, now
            await wait_for(pilot, lambda: bool(app.dumps), timeout=10)
            await pilot.press("q")
    assert app.feed.done.is_set() and app.feed.said_bye and not app.error
    assert instance not in fs.instance_names()
    (dump,) = app.dumps
    assert dump.startswith(str(tmp_path)) and dump.endswith("-nodev-manual.npt")
    (recording,) = [p for p in tmp_path.glob("*.npt") if str(p) != dump]  # the recording started with r
    from npu_trace.events import TraceEvent
    from npu_trace.sources.replay_source import ReplaySource

    source = ReplaySource(str(recording))
    texts = [str(e.values[-1]) for e in replayed_items(source)
             if isinstance(e, TraceEvent) and e.fmt.full_name == "ftrace:print"]  # fmt: skip
    assert any("tui-mark" in t for t in texts), "the marker is in the recording too"
    assert source.events_read > 0
    manual = ReplaySource(dump)
    assert manual.header["window"]["trigger"]["kind"] == "manual" and len(replayed_items(manual)) > 100


@pytest.mark.privileged
@pytest.mark.asyncio
async def test_live_with_a_device_scope_gets_its_options_as_one_value(tmp_path: Any) -> None:
    """`live --device 1` as the UI starts it: the TraceOptions value crosses to the worker (pickled in the spec),
    whose session filters in the kernel and whose analysis leaves the other device out; a recording started
    with r says the scope in its header."""
    from npu_trace.pipeline.scope import KEEP_KINDS
    from npu_trace.sources.options import TraceOptions
    from npu_trace.sources.replay_source import ReplaySource
    from tui.messages import DEV

    with simulator() as fs:
        spec = SourceSpec("tui.worker.live_feed:live_source", (TraceOptions(devices=(1,), channels=()), fs.root))
        app = NpuTraceApp(spec, PROFILES["sim"], record_dir=str(tmp_path))
        async with app.run_test(size=(120, 40)) as pilot, scenario_once_tracing(pilot, app, 4):
            await pilot.press("r")
            log = app.query_one(EventLog)
            # the simulator's own rows, not only the threads the host starts meanwhile (a busy host starts
            # hundreds: a count of events alone was reached by them before the first device row)
            await wait_for(pilot, lambda: app.counters.error or any(row[KIND] not in KEEP_KINDS for row in log.view),
                           timeout=20)  # fmt: skip
            assert not app.counters.error
            rows = list(log.view)
            await pilot.press("q")
    assert not app.error
    # the trace's own records and the threads started on the host meanwhile (KEEP_KINDS) are in every device's
    # scope: whether a task row shows depends on what else the host ran
    assert rows and {row[DEV] for row in rows if row[KIND] not in KEEP_KINDS} == {1}
    (recording,) = tmp_path.glob("*.npt")
    scope = ReplaySource(str(recording)).header["scope"]
    assert scope["device"] == [1]
    assert scope["kernel"]["filters"]["ascend:ascend_irq_handler_entry"]["filter"] == "dev == 1"
