"""The TUI's worker process and its command palette: every palette command, and every way the worker or the UI
can end (a source failing, a bug, the worker exiting or killed, the UI failing, the UI process killed), with
the source's resource (a stand-in for the tracefs instance) removed on each path and the error shown in one
line. Pilot tests (App.run_test) against fake sources run by the real worker process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List

import pytest
from textual.command import CommandInput, CommandList, CommandPalette

from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from test_tui_support import (
    PROFILE,
    batches,
    fake_app,
    instances,
    mixed_events,
    resource_spec,
    settled,
    spec_app,
    wait_for,
)
from tui.messages import KIND, TS
from tui.ui.widgets.eventlog import EventLog
from tui.ui.widgets.screens import HelpScreen, PromptScreen
from tui.ui.widgets.spikes import SpikesPanel

pytestmark = pytest.mark.asyncio
SIZE = (120, 40)
GATHER = CommandPalette._GATHER_COMMANDS_GROUP  # the palette's search worker
TESTS = os.path.dirname(os.path.abspath(__file__))


async def palette(pilot: Any, title: str) -> None:
    """Run a command from the command palette: its title typed at once (one search, not one per key), Enter
    once the palette has finished searching and highlights that command (the search is asynchronous: waited
    for, never slept through), then the palette closed."""
    app = pilot.app
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
    found = app.screen
    found.query_one(CommandInput).value = title
    commands = found.query_one(CommandList)

    def highlighted() -> bool:
        searching = any(w.group == GATHER and w.is_running for w in app.workers)
        at = commands.highlighted
        if searching or at is None:
            return False
        return bool(commands.get_option_at_index(at).prompt.plain.split("\n")[0] == title)

    await wait_for(pilot, highlighted)
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.screen is not found)


def status(app: Any) -> str:
    return str(app.query_one("#status").render())


# ---- the command palette ----------------------------------------------------------------------------------
async def test_palette_lists_the_apps_commands() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
    for title in ("Pause / resume the event log", "Filter the event log", "Start / stop recording",
                  "Add a marker", "Next spike or reset", "Previous spike or reset", "Replay: play / pause",
                  "Help: npu-trace keys"):  # fmt: skip
        assert title in titles


async def test_palette_pause_filter_help_and_marker() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE) as pilot:
        await palette(pilot, "Pause / resume the event log")
        assert app.paused and "PAUSED" in status(app)
        await palette(pilot, "Pause / resume the event log")
        assert not app.paused
        await palette(pilot, "Help: npu-trace keys")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await palette(pilot, "Filter the event log")
        box = app.query_one("#filter")
        assert box.has_class("-shown") and box.has_focus
        await pilot.press(*"kind:marker", "enter")
        await palette(pilot, "Add a marker")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("ctrl+u", *"from the palette", "enter")
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: len(log.view) == 1 and log.view[0][KIND] == "marker")  # filtered in the worker


async def test_palette_recording_and_replay_pause(tmp_path: Any) -> None:
    app = fake_app(batches(mixed_events()))
    app.record_dir = str(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await palette(pilot, "Start / stop recording")
        await wait_for(pilot, lambda: app.counters.recording is not None)
        assert str(app.counters.recording).startswith(str(tmp_path))
        await palette(pilot, "Start / stop recording")
        await wait_for(pilot, lambda: app.counters.recording is None)
        await palette(pilot, "Replay: play / pause")  # the fake source pauses like a replay
        await wait_for(pilot, lambda: app.source_paused)
        await palette(pilot, "Replay: play / pause")
        await wait_for(pilot, lambda: not app.source_paused)


async def test_palette_jumps_between_spikes_and_resets() -> None:
    events = mixed_events()
    app = fake_app(batches(events))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        marks = app.jump_marks()
        await palette(pilot, "Next spike or reset")
        assert app.jump_index == 0 and app.query_one(SpikesPanel).table.cursor_row == 0
        await palette(pilot, "Next spike or reset")
        assert app.jump_index == 1
        await palette(pilot, "Previous spike or reset")
        assert app.jump_index == 0
        await palette(pilot, "Previous spike or reset")
        assert app.jump_index == len(marks) - 1


# ---- the worker -------------------------------------------------------------------------------------------
async def test_the_worker_runs_without_textual(tmp_path: Any) -> None:
    app = spec_app(resource_spec(str(tmp_path), batches(mixed_events())[:3]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "textual loaded" in app.counters.detail)
        assert "textual loaded: False" in app.counters.detail
        assert app.feed.pid != os.getpid()
        await pilot.press("q")
    assert app.feed.said_bye and not instances(str(tmp_path))


async def test_the_filter_sees_every_event_not_only_the_rows_carried() -> None:
    events = mixed_events()
    timeouts = [ev for ev in BlockNormalizer(Normalizer(PROFILE.mapping)).events(events) if ev.kind == "timeout"]
    assert len(timeouts) > 5
    app = fake_app(batches(events), rows=5)  # at most 5 rows an update reach the UI
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        assert app.skipped > 0 and len(app.query_one(EventLog).view) + app.skipped == len(events)
        await pilot.press("slash", *"kind:timeout", "enter")
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: len(log.view) == len(timeouts))  # all of them: the worker filters its events
        assert [row[TS] for row in log.view] == [ev.ts_ns for ev in timeouts]


async def test_a_source_failure_is_one_line_and_the_source_is_closed(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5], fail="source"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.error)
        assert app.error == "the trace pipe went away (test)"
        assert "error: the trace pipe went away (test)" in status(app)
        assert "\n" not in status(app)
        assert not instances(root)  # the source cleaned up as the error unwound it
        assert app.counters.events > 0  # what was analysed stays shown
        await pilot.press("slash", *"kind:call", "enter")  # the worker still answers
        await wait_for(pilot, lambda: len(app.query_one(EventLog).view) > 0)
        await pilot.press("q")
    assert app.feed.said_bye


async def test_a_bug_in_the_worker_is_shown_with_its_type(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5], fail="bug"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.error)
        assert app.error == "worker: RuntimeError: a bug in the source (test)"
        assert "error: worker: RuntimeError" in status(app)
        assert not instances(root)


async def test_the_worker_exiting_is_shown_and_its_instance_removed(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5], fail="exit"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.error)
        assert app.error == "worker exited unexpectedly (exit status 7)"
        assert "error: worker exited unexpectedly" in status(app)
        assert "worker exited unexpectedly (exit status 7)" in str(app.query_one("#detail").render())
        assert not instances(root)  # os._exit skipped the source's cleanup: the UI removed what it announced
        await pilot.press("m", "ctrl+u", *"late", "enter")  # a request with no worker: said, not hung
        await pilot.pause(0.2)
        await pilot.press("q")
    assert app.feed.done.is_set() and not app.feed.said_bye


async def test_a_quit_asked_before_the_app_runs_ends_it_before_its_worker_starts(tmp_path: Any) -> None:
    """The terminal lost while the UI starts (its driver says so before the event loop runs; under nohup the
    SIGHUP itself is not delivered): the app quits as it mounts and starts no worker (it was forgotten: the UI
    and its worker stayed, their terminal gone)."""
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5]))
    app.quit_soon()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.5)
    assert app.feed.pid is None and not instances(root)


async def test_the_worker_killed_is_shown_and_its_instance_removed(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: instances(root))
        assert app.feed.pid is not None
        os.kill(app.feed.pid, signal.SIGKILL)
        await wait_for(pilot, lambda: app.error)
        assert app.error == "worker exited unexpectedly (killed by SIGKILL)"
        assert not instances(root)


async def test_a_failing_ui_stops_the_worker_which_closes_its_source(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5]))

    def broken() -> None:
        raise RuntimeError("a bug in the UI (test)")

    app.action_help = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a bug in the UI"):
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: instances(root))
            await pilot.press("question_mark")
            await pilot.pause(0.5)
    assert app.feed.done.wait(10) and app.feed.said_bye  # stopped in order: the source closed first
    assert not instances(root)


async def test_quit_waits_for_the_source_to_close(tmp_path: Any) -> None:
    root = str(tmp_path)
    app = spec_app(resource_spec(root, batches(mixed_events())[:5]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: instances(root))
        await pilot.press("q")
    assert app.feed.done.is_set() and app.feed.said_bye and not app.error
    assert not instances(root)


async def test_the_worker_cleans_up_when_the_ui_process_is_killed(tmp_path: Any) -> None:
    """SIGKILL of the UI process: the worker reads end-of-file on its pipe, stops and closes its source."""
    root = str(tmp_path)
    path = json.dumps([TESTS, os.path.dirname(TESTS)])
    code = f"import json, sys; sys.path[:0] = json.loads({path!r}); from test_tui_support import orphan_main; " \
           f"orphan_main({root!r})"  # fmt: skip
    ui = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert ui.stdout is not None
        worker = int(ui.stdout.readline())
        assert instances(root)
        ui.kill()
        ui.wait(10)
        deadline = time.monotonic() + 15
        while instances(root) or _alive(worker):
            assert time.monotonic() < deadline, "the orphaned worker did not stop and clean up"
            time.sleep(0.05)
    finally:
        ui.kill()
        ui.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


async def test_requests_made_before_the_worker_started_are_kept() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")  # at once: the worker is still starting
        await wait_for(pilot, lambda: app.source_paused)


async def test_replies_come_back_on_the_ui_thread_in_order() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE) as pilot:
        answers: List[Any] = []
        for factor in (2.0, 0.5):
            app.feed.call("set_speed", factor, then=lambda value, error: answers.append((value, error)))
        app.feed.call("no_such_request", then=lambda value, error: answers.append((value, error)))
        await wait_for(pilot, lambda: len(answers) == 3)
        assert answers[:2] == [(None, ""), (None, "")]  # the fake source has no speed
        assert answers[2][0] is None and "unknown request" in answers[2][1]


async def test_a_speed_key_on_a_source_without_a_pace_is_said_so() -> None:
    """The fake source, as the live one, has no pace: '+' is told it, not a TypeError of formatting None."""
    app = fake_app(batches(mixed_events()))
    shown: List[str] = []
    app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus")
        await wait_for(pilot, lambda: bool(shown))
        assert shown == ["speed: replay only"] and not app.error
