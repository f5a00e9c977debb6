"""Pilot tests of the TUI against a fake source (synthesized simulator runs) and a recorded session.

The source runs in the app's worker process: what the tests see comes through the worker's updates and
answers, exactly as in use (requests such as a filter or a marker are answered asynchronously: wait_for).
"""

from __future__ import annotations

from typing import Any, List

import pytest

from npu_trace.events import TraceEvent
from npu_trace.ftrace.format import parse_format
from test_tui_support import PROFILE, batches, fake_app, fault_events, mixed_events, settled, wait_for
from tui.fmt import row_plain
from tui.messages import DEV, FIELDS, KIND, SourceSpec
from tui.ui.app import NpuTraceApp
from tui.ui.widgets.eventlog import EventLog
from tui.ui.widgets.screens import HelpScreen, PromptScreen
from tui.ui.widgets.spikes import SpikesPanel

pytestmark = pytest.mark.asyncio
SIZE = (120, 40)


async def test_updates_arrive_in_batches_and_show_findings() -> None:
    events = mixed_events()
    app = fake_app(batches(events), hold=False)  # the source ends: the detectors flush (a sequence closes)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        assert app.counters.ended
        assert app.updates < len(events) / 10  # batched: never one message per event
        assert len(app.query_one(SpikesPanel).spikes) == 4
        resets = app.query_one("#resets").resets  # type: ignore[attr-defined]
        assert [r.status for r in resets] == ["complete"]
        assert len(app.query_one(EventLog).rows) + app.skipped == len(events)  # skipped rows are counted


async def test_pause_buffers_and_resume_shows_everything() -> None:
    events = mixed_events()
    app = fake_app(batches(events), gap_s=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        assert app.paused
        await wait_for(pilot, settled(app, len(events)))
        log = app.query_one(EventLog)
        frozen = len(log.view)
        assert frozen < len(events) and len(log.pending) > 0
        assert "PAUSED" in str(app.query_one("#status").render())
        await pilot.press("p")
        assert not app.paused and len(log.view) + app.skipped == len(events) and not log.pending


async def test_filter_by_kind_device_and_text() -> None:
    events = mixed_events()
    app = fake_app(batches(events))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        await pilot.press("slash")
        for ch in "kind:timeout dev:1":
            await pilot.press("space" if ch == " " else ch)
        await pilot.press("enter")
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: log.view and all(row[KIND] == "timeout" and row[DEV] == 1 for row in log.view))
        await pilot.press("slash", "ctrl+u", *"heartbeat", "enter")
        await wait_for(pilot, lambda: log.view and all("heartbeat" in row_plain(row) for row in log.view))
        assert "filter: heartbeat" in str(app.query_one("#status").render())
        await pilot.press("slash", "ctrl+u", "enter")  # no filter: the worker's recent events again
        await wait_for(pilot, lambda: len(log.view) == len(events))


async def test_marker_is_written_by_the_source() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("m")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("ctrl+u", *"hello", "enter")
        await wait_for(pilot, lambda: app.marks_added == 1)
        # the fake source puts it in the trace, as trace_marker does; looked for through the filter, which sees the
        # worker's recent events: the rows on screen follow the stream, which may have carried it past them by now
        await pilot.press("slash", "ctrl+u", *"kind:marker", "enter")
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: any(row[KIND] == "marker" and row[FIELDS] == "text=hello" for row in log.view))


async def test_record_start_and_stop(tmp_path: Any) -> None:
    app = fake_app(batches(mixed_events()))
    app.record_dir = str(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await wait_for(pilot, lambda: app.counters.recording is not None)
        assert str(app.counters.recording).startswith(str(tmp_path))
        assert "REC" in str(app.query_one("#status").render())
        await pilot.press("r")
        await wait_for(pilot, lambda: app.counters.recording is None)
        assert "rec off" in str(app.query_one("#status").render())


async def test_d_dumps_the_last_minutes_through_the_source(tmp_path: Any) -> None:
    app = fake_app(batches(mixed_events()))
    app.record_dir = str(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await wait_for(pilot, lambda: bool(app.dumps))  # the worker's answer: the dump's path
        assert app.dumps == [f"{tmp_path}/flight-fake-manual.npt"]


async def test_jump_between_spikes_and_resets() -> None:
    events = mixed_events()
    app = fake_app(batches(events))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        marks = app.jump_marks()
        assert [m[1] for m in marks] == ["spike", "spike", "reset", "spike", "spike"]
        await pilot.press("n", "n", "n")
        assert app.query_one("#resets").selected == 0  # type: ignore[attr-defined]
        await pilot.press("n")
        assert app.query_one("#spike-table").cursor_row == 2  # type: ignore[attr-defined]
        await pilot.press("N", "N")
        assert app.query_one("#spike-table").cursor_row == 1  # type: ignore[attr-defined]
        assert "halSqTaskSend on npu0" in str(app.query_one("#spike-context").render())


async def test_help_screen_and_quit() -> None:
    app = fake_app(batches(mixed_events()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await pilot.pause(0.2)
    assert app.feed.done.is_set() and app.feed.said_bye and not app.error


async def test_event_fields_on_select() -> None:
    events = mixed_events()
    app = fake_app(batches(events))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, len(events)))
        app.query_one(EventLog).focus()
        await pilot.press("up", "enter")
        assert "cpu0" in str(app.query_one("#detail").render())


HOSTILE = "[b]x[/b] [link=http://evil]y[/link] \x1b[31mred\x1b[0m"
FORMAT = """name: ascend_dms_event_report
ID: 4000
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] msg;\toffset:8;\tsize:4;\tsigned:1;

print fmt: "%s", __get_str(msg)
"""


async def test_untrusted_text_is_shown_literally() -> None:
    fmt = parse_format(FORMAT.replace("ascend_dms_event_report", "kmsg_line"), "kmsg")
    ev = TraceEvent(1_000, 0, 777, fmt, (HOSTILE,))
    marker = parse_format(FORMAT.replace("ascend_dms_event_report", "print"), "ftrace")
    items: List[Any] = [[ev, TraceEvent(2_000, 0, 777, marker, (HOSTILE,))]]
    app = fake_app(items, comms={777: HOSTILE})
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.counters.events >= 2)
        await pilot.pause(0.1)
        lines = [app.query_one(EventLog).render_line(y).text for y in range(8)]
        shown = "\n".join(lines)
        assert "[b]x[/b]" in shown and "[link=http://evil]y[/link]" in shown
        assert "\\x1b[31mred\\x1b[0m" in shown and "\x1b" not in shown
        svg = app.export_screenshot()
        assert "[b]x[/b]" in svg and "\x1b" not in svg


async def test_recorded_session_replays_in_the_tui(demo_recording: str) -> None:
    from tui.worker.replay_feed import ReplayFeedSource

    app = NpuTraceApp(SourceSpec(ReplayFeedSource, (demo_recording, None)), PROFILE)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.counters.ended, timeout=30)
        assert app.counters.events > 0 and app.query_one(SpikesPanel).spikes
        await pilot.press("p", "p", "question_mark", "escape", "n")
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.restarts == 1, timeout=10)  # seek back: read again from the start
        await wait_for(pilot, lambda: app.counters.ended, timeout=30)
        await pilot.press("q")


@pytest.fixture
def demo_recording() -> str:
    import os

    import npu_trace

    path = os.path.join(os.path.dirname(npu_trace.__file__), "data", "demo.npt")
    if not os.path.exists(path):
        pytest.skip("no demo recording")
    return path


async def test_faults_and_app_errors_are_listed_under_the_reset_sequences() -> None:
    app = fake_app([fault_events()], hold=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, settled(app, 3))
        panel = app.query_one("#resets")
        await wait_for(pilot, lambda: len(panel.faults) == 2)  # type: ignore[attr-defined]
        text = " ".join(" ".join(line.plain for line in panel.lines).split())  # type: ignore[attr-defined]
        assert "no reset sequence yet" in text and "faults (2 newest)" in text
        assert "host kernel soft_lockup on CPU 1 (kworker/1:0); driver: trs_chan_irq_proc" in text
        assert "npu1 app error heartbeat_lost (pid 389)" in text
        assert "a heartbeat timeout on device 1" in text


async def test_a_device_not_ok_is_shown_whatever_its_number() -> None:
    """The devices panel holds 8 lines: with 16 NPUs, a reset on npu15 was clipped away unsaid. The devices not
    ok come first, and a last line says how many are left out and their states."""
    from tui.messages import DeviceState
    from tui.ui.widgets.lanes import ROOM, lanes_text

    devices = [DeviceState(i) for i in range(16)]
    devices[15] = DeviceState(15, "resetting", last_error="heartbeat lost")
    lines = lanes_text(devices).plain.splitlines()
    assert len(lines) == ROOM and lines[-1] == "+9 more devices: 9 ok"
    assert [line.split()[0] for line in lines[:-1]] == [f"npu{i}" for i in (0, 1, 2, 3, 4, 5, 15)]
    assert "resetting" in lines[-2] and "heartbeat lost" in lines[-2]
    assert len(lanes_text(devices[:ROOM]).plain.splitlines()) == ROOM  # all, when they fit
