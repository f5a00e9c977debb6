"""The TUI live on the simulator (real tracefs): runs, shows events, quits cleanly, leaves no instance."""

from __future__ import annotations

from typing import Any

import pytest

from npu_trace import sim
from npu_trace.profiles import PROFILES
from npu_trace.sources.tracefs_source import TracefsSession
from npu_trace.tracefs import Tracefs
from test_tui_support import wait_for
from tui.app import NpuTraceApp
from tui.live import LiveSource


@pytest.mark.privileged
@pytest.mark.asyncio
async def test_live_on_the_simulator_then_quit_removes_the_instance(tmp_path: Any) -> None:
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)  # others load/unload concurrently: never unload what was there
    sim.load(fs)
    profile = PROFILES["sim"]
    session = TracefsSession(["ascend:*"], fs=fs, layouts=profile.layouts, tag="tui")
    source = LiveSource(session, profile)
    app = NpuTraceApp(source, profile, record_dir=str(tmp_path))
    run = sim.start_scenario("mixed", 3, 2.0, 300, 2, ensure_loaded=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.counters.events > 100, timeout=20)
            await pilot.press("r")
            await wait_for(pilot, lambda: app.counters.recording is not None, timeout=10)
            await pilot.press("m", "ctrl+u", *"tui-mark", "enter")
            await pilot.pause(1.0)
            await pilot.press("q")
        run.wait()
    finally:
        run.terminate()
        if not was_loaded:
            sim.unload(fs)
    assert app.feed.done.is_set() and session.instance is None
    assert session.name not in fs.instance_names()
    assert list(tmp_path.glob("*.npt")), "the recording started with r exists"
