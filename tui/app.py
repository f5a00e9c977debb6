"""The npu-trace Textual app: views over a feed of batched updates from one worker thread."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Iterable, List, Optional, Tuple

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from npu_trace.profiles import Profile
from tui.feed import Feed, Source
from tui.fmt import args_text, dev_name, safe, stamp
from tui.model import Counters, FeedUpdate
from tui.widgets.eventlog import EventLog, LogFilter
from tui.widgets.lanes import Lanes
from tui.widgets.memory import MemoryPanel
from tui.widgets.ops import OpsTable
from tui.widgets.resets import ResetsPanel
from tui.widgets.screens import HelpScreen, PromptScreen
from tui.widgets.spikes import SpikesPanel
from tui.widgets.status import StatusBar

CSS = """
#status { height: 1; background: $panel; }
#lanes { height: auto; max-height: 10; border: round $primary; }
#middle { height: 1fr; }
#left, #right { width: 1fr; }
#ops { height: 1fr; border: round $primary; }
#memory { height: 8; border: round $primary; }
#spikes { height: 1fr; border: round $primary; }
#spike-table { height: 1fr; }
#spike-context { height: 7; }
#resets { height: 1fr; border: round $primary; }
#log { height: 10; border: round $primary; }
#detail { height: 1; }
#filter { display: none; }
#filter.-shown { display: block; }
"""


SCREENSHOT_S = 8.0


class FeedMessage(Message):
    """One interval's update from the worker (posted with the thread-safe post_message)."""

    def __init__(self, update: FeedUpdate) -> None:
        super().__init__()
        self.update = update


class NpuTraceApp(App[None]):
    TITLE = "npu-trace"
    CSS = CSS
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("p", "pause", "Pause"),
        Binding("slash", "filter", "Filter"),
        Binding("m", "marker", "Mark"),
        Binding("r", "record", "Record"),
        Binding("n", "jump(1)", "Next"),
        Binding("N", "jump(-1)", "Prev", key_display="N"),
        Binding("space", "play", "Play", show=False),
        Binding("plus,equals_sign", "speed(2)", "Faster", show=False),
        Binding("minus", "speed(0.5)", "Slower", show=False),
        Binding("right_square_bracket", "seek(10)", "+10s", show=False),
        Binding("left_square_bracket", "seek(-10)", "-10s", show=False),
        Binding("escape", "close_filter", "Close filter", show=False),
        Binding("q", "quit", "Quit"),
    ]
    HELP_KEYS = (
        ("?", "this help"), ("p", "pause/resume the event log (events keep buffering)"),
        ("/", "filter the event log"), ("m", "add a marker (written to the trace and the recording)"),
        ("r", "start/stop recording to a file"), ("n / N", "next / previous spike or reset"),
        ("up/down enter", "event log: move, show an event's fields"), ("space", "replay: play/pause"),
        ("+ / -", "replay: faster / slower"), ("] / [", "replay: seek +10 s / -10 s"),
        ("ctrl+p", "command palette"), ("q", "quit (stops tracing, removes the instance)"),
    )  # fmt: skip

    def __init__(
        self, source: Source, profile: Profile, *, record_dir: str = ".", interval: float = 0.1, rows: int = 1000
    ) -> None:
        super().__init__()
        self.source = source
        self.feed = Feed(source, profile, self._post_update, interval=interval, rows_per_update=rows)
        self.record_dir = record_dir
        self.counters = Counters(source=source.label)
        self.paused = False
        self.query_text = ""
        self.updates = 0
        self.jump_index = -1
        self.marks_added = 0
        self.restarts = 0
        self.screenshot_path: Optional[str] = None  # saved after SCREENSHOT_S (the README's picture)
        self.skipped = 0  # events the feed did not carry to the log (beyond its per-update bound)

    def _post_update(self, update: FeedUpdate) -> None:
        self.post_message(FeedMessage(update))

    # ---- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Lanes(id="lanes")
        with Horizontal(id="middle"):
            with Vertical(id="left"):
                yield OpsTable(id="ops")
                yield MemoryPanel(id="memory")
            with Vertical(id="right"):
                yield SpikesPanel(id="spikes")
                yield ResetsPanel(id="resets")
        yield EventLog(id="log")
        yield Static(id="detail")
        yield Input(placeholder="filter: dev:0 kind:timeout pid:123 comm:name text (Enter applies)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        titles = {"lanes": "devices", "ops": "operations", "memory": "memory", "spikes": "spikes",
                  "resets": "reset sequences", "log": "events"}  # fmt: skip
        for wid, title in titles.items():
            self.query_one(f"#{wid}").border_title = title
        main = self.screen
        self.log_view = main.query_one(EventLog)
        self.spikes_view = main.query_one(SpikesPanel)
        self.resets_view = main.query_one(ResetsPanel)
        self.ops_view = main.query_one(OpsTable)
        self.views = (main.query_one(Lanes), main.query_one(MemoryPanel), main.query_one(StatusBar))
        self._show_status()
        self.call_after_refresh(self.feed.start)  # every view is mounted before the first update
        if self.screenshot_path:
            self.set_timer(SCREENSHOT_S, self._save_demo_screenshot)

    def _save_demo_screenshot(self) -> None:
        path = self.screenshot_path or "npu-trace.svg"
        self.save_screenshot(os.path.basename(path), os.path.dirname(path) or ".")

    async def on_unmount(self) -> None:
        await asyncio.to_thread(self.feed.close)

    # ---- updates -------------------------------------------------------------------------------
    def on_feed_message(self, message: FeedMessage) -> None:
        up = message.update
        self.feed.ack = up.seq
        self.updates += 1
        if up.restart:
            self._clear()
            self.skipped = 0
            self.restarts += 1
        self.counters = up.counters
        self.skipped += up.skipped
        self.log_view.add_rows(up.rows)
        self.views[0].show(up.devices)
        self.ops_view.show(up.ops)
        self.spikes_view.add(up.spikes)
        self.resets_view.show(up.resets)
        self.views[1].show(up.memory)
        self._show_status()

    def _clear(self) -> None:
        self.log_view.clear()
        self.spikes_view.clear()
        self.ops_view.reset()
        self.jump_index = -1

    def _show_status(self) -> None:
        log = self.log_view
        bar = self.views[2]
        bar.show(self.counters, self.paused, len(log.pending), log.dropped, self.query_text, self.skipped)

    # ---- actions -------------------------------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP_KEYS))

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.log_view.set_paused(self.paused)
        self._show_status()

    def action_play(self) -> None:
        paused = not getattr(self, "_source_paused", False)
        if self.source.set_paused(paused):
            self._source_paused = paused
            self.notify("replay paused" if paused else "replay playing")
        else:
            self.notify("this source cannot be paused (p pauses the event log)")

    def action_speed(self, factor: float) -> None:
        speed = self.source.set_speed(factor)
        self.notify(f"speed {speed:g}x" if speed else "speed: replay only")

    def action_seek(self, seconds: float) -> None:
        ok = self.source.seek(seconds)
        self.notify(f"seek {seconds:+g} s" if ok else "seek: replay only")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.value = self.query_text
        box.focus()

    def action_close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("-shown"):
            box.remove_class("-shown")
            self.log_view.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        self.query_text = event.value.strip()
        self.log_view.set_filter(LogFilter.parse(self.query_text))
        self.action_close_filter()
        self._show_status()

    def action_marker(self) -> None:
        default = f"npu-trace mark {self.marks_added + 1} {time.strftime('%H:%M:%S')}"
        self.push_screen(PromptScreen("Marker text (Enter writes it to the trace):", default), self._write_marker)

    def _write_marker(self, text: Optional[str]) -> None:
        if not text:
            return
        if self.source.mark(text):
            self.marks_added += 1
            self.notify(Text(f"marker written: {safe(text)}").plain, markup=False)
        else:
            self.notify("markers need a live session", severity="warning")

    def action_record(self) -> None:
        if self.counters.recording or getattr(self, "_recording", False):
            self._recording = False
            self.source.stop_recording()
            self.notify("recording stopped")
            return
        path = os.path.join(self.record_dir, time.strftime("npu-trace-%Y%m%d-%H%M%S.npt"))
        if self.source.start_recording(path):
            self._recording = True
            self.notify(f"recording to {path}", markup=False)
        else:
            self.notify("recording needs a live session", severity="warning")

    def action_jump(self, step: int) -> None:
        marks = self.jump_marks()
        if not marks:
            self.notify("no spike or reset yet")
            return
        self.jump_index = (self.jump_index + step) % len(marks) if self.jump_index >= 0 or step > 0 else len(marks) - 1
        ts, what, index = marks[self.jump_index]
        if what == "spike":
            self.spikes_view.select(index)
            self.spikes_view.query_one("#spike-table").focus()
        else:
            self.resets_view.select(index)
        self.notify(f"{what} {self.jump_index + 1}/{len(marks)} at {stamp(ts)}")

    def jump_marks(self) -> List[Tuple[int, str, int]]:
        spikes = [(v.finding.ts_ns, "spike", i) for i, v in enumerate(self.spikes_view.spikes)]
        resets = [(r.ts_ns, "reset", i) for i, r in enumerate(self.resets_view.resets)]
        return sorted(spikes + resets)

    def on_event_log_selected(self, message: EventLog.Selected) -> None:
        ev, comm = message.row
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{stamp(ev.ts_ns)} {dev_name(ev.dev)} {ev.kind} {safe(ev.op)} {safe(comm)}-{ev.pid} cpu{ev.cpu}: ",
                 "bold")  # fmt: skip
        t.append(args_text(ev.args))
        self.screen_stack[0].query_one("#detail", Static).update(t)

    async def action_quit(self) -> None:
        await asyncio.to_thread(self.feed.close)
        self.exit()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume the event log", "freeze the log; events keep buffering", self.action_pause)
        yield SystemCommand("Start / stop recording", "record the live session to a file", self.action_record)
        yield SystemCommand("Add a marker", "write a marker into the trace", self.action_marker)
        yield SystemCommand("Next spike or reset", "jump to the next finding", lambda: self.action_jump(1))
        yield SystemCommand("Keys", "show the help screen", self.action_help)
