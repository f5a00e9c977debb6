"""The npu-trace Textual app: views over the batched, summarised updates of a worker process.

The UI thread never reads, decodes or analyses events: the worker process (`tui.worker`, started by
`tui.ui.client`) does, and sends a `FeedUpdate` at most every interval and only once the previous one was
shown (the app acknowledges it after the screen refreshed). What needs the worker's data or its source (the
log filter, markers, recording, replay controls) is a request answered asynchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from typing import Any, Iterable, List, Optional, Tuple, Type

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.driver import Driver
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from npu_trace.device.profiles import Profile
from tui.fmt import row_detail, safe, stamp
from tui.messages import ROWS_PER_UPDATE, Counters, FeedUpdate, LogWindow, SourceSpec
from tui.ui.client import FeedClient
from tui.ui.terminal import QUIT_GRACE_S, QuitSignals, TerminalDriver
from tui.ui.widgets.eventlog import EventLog
from tui.ui.widgets.lanes import Lanes
from tui.ui.widgets.memory_panel import MemoryPanel
from tui.ui.widgets.ops import OpsTable
from tui.ui.widgets.resets import ResetsPanel
from tui.ui.widgets.screens import HelpScreen, PromptScreen
from tui.ui.widgets.spikes import SpikesPanel
from tui.ui.widgets.status import StatusBar

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
    """One message from the worker (posted by the feed client's reader thread with post_message)."""

    def __init__(self, payload: Tuple[Any, ...]) -> None:
        super().__init__()
        self.payload = payload


class NpuTraceApp(App[None]):
    TITLE = "npu-trace"
    CSS = CSS
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("p", "pause", "Pause"),
        Binding("slash", "filter", "Filter"),
        Binding("m", "marker", "Mark"),
        Binding("r", "record", "Record"),
        Binding("d", "dump", "Dump", show=False),
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
        ("r", "start/stop recording to a file"), ("d", "dump the last minutes to a file now (flight recorder)"),
        ("n / N", "next / previous spike or reset"),
        ("up/down enter", "event log: move, show an event's fields"), ("space", "replay: play/pause"),
        ("+ / -", "replay: faster / slower"), ("] / [", "replay: seek +10 s / -10 s"),
        ("ctrl+p", "command palette"), ("q", "quit (stops tracing, removes the instance)"),
    )  # fmt: skip

    def __init__(
        self,
        source: SourceSpec,
        profile: Profile,
        *,
        record_dir: str = ".",
        interval: float = 0.1,
        rows: int = ROWS_PER_UPDATE,
        quiet: bool = False,
        signals: Optional[QuitSignals] = None,
    ) -> None:
        """`quiet`: the worker writes nothing to the terminal. `signals` (installed by the caller): SIGINT,
        SIGTERM and SIGHUP quit at once (the worker is told to stop and closes its source; the terminal is
        restored if it is still there); both for the CLI. A terminal that is gone quits the same way."""
        super().__init__()
        self.signals = signals
        self.source = source
        self.feed = FeedClient(source, profile, self._deliver, interval=interval, rows=rows, quiet=quiet)
        self.record_dir = record_dir
        self.counters = Counters(source=source.title())
        self.paused = False
        self.query_text = ""
        self.updates = 0
        self.jump_index = -1
        self.marks_added = 0
        self.restarts = 0
        self.error = ""  # the worker's or the source's error (the CLI exits 2 with it)
        self.screenshot_path: Optional[str] = None  # saved after SCREENSHOT_S (the README's picture)
        self.skipped = 0  # matching events the feed did not carry to the log (beyond its per-update bound)
        self.source_paused = False
        self.recording = False
        self.dumps: List[str] = []  # the flight recorder's dumps written with d
        self.terminal_gone = ""  # why the terminal was lost (gone, or given up on while quitting)
        self._ui_loop: Optional[asyncio.AbstractEventLoop] = None
        self._quitting = False
        self._quit_early = False  # quit_soon() came before the loop ran: on_mount quits
        self._quit_lock = threading.RLock()  # the driver's thread, signal handlers (in the main thread) and on_mount

    def get_driver_class(self) -> Type[Driver]:
        """Textual's driver for this platform, but on a terminal: TerminalDriver (a terminal that is gone ends
        the app, and never holds the UI); a driver named by TEXTUAL_DRIVER is kept."""
        driver = super().get_driver_class()
        from textual.drivers.linux_driver import LinuxDriver

        return TerminalDriver if driver is LinuxDriver else driver

    def _deliver(self, payload: Tuple[Any, ...]) -> None:
        self.post_message(FeedMessage(payload))

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
                  "resets": "reset sequences and faults", "log": "events"}  # fmt: skip
        for wid, title in titles.items():
            self.query_one(f"#{wid}").border_title = title
        main = self.screen
        self.log_view = main.query_one(EventLog)
        self.spikes_view = main.query_one(SpikesPanel)
        self.resets_view = main.query_one(ResetsPanel)
        self.ops_view = main.query_one(OpsTable)
        self.views = (main.query_one(Lanes), main.query_one(MemoryPanel), main.query_one(StatusBar))
        self._show_status()
        with self._quit_lock:
            self._ui_loop = asyncio.get_running_loop()
            early = self._quit_early
        if self.signals is not None:  # a signal that came before: the app quits before the worker starts
            self.signals.attach(lambda _signum: self.quit_soon())
        if early:  # the terminal lost before the loop ran (a SIGHUP under nohup is not even delivered)
            self.quit_soon()
        self.call_after_refresh(self._start_feed)  # every view is mounted before the first update
        if self.screenshot_path:
            self.set_timer(SCREENSHOT_S, self._save_demo_screenshot)

    def _save_demo_screenshot(self) -> None:
        path = self.screenshot_path or "npu-trace.svg"
        self.save_screenshot(os.path.basename(path), os.path.dirname(path) or ".")

    def _start_feed(self) -> None:
        if not self._quitting:
            self.feed.start()

    async def on_unmount(self) -> None:
        await asyncio.to_thread(self.feed.close)

    # ---- quitting on its own -------------------------------------------------------------------
    def quit_soon(self) -> None:
        """Quit as soon as the event loop runs: from a signal handler or any thread (it only schedules). A
        terminal that takes no output is given up on shortly: it cannot hold the UI thread."""
        driver = self._driver
        if isinstance(driver, TerminalDriver):
            driver.give_up_after(QUIT_GRACE_S)
        with self._quit_lock:
            loop = self._ui_loop
            if loop is None:  # not mounted yet: on_mount quits (and attaches the signals, which say theirs)
                self._quit_early = True
                return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the app has ended, its caller cleans up
            loop.call_soon_threadsafe(self._quit_now)

    def terminal_lost(self, why: str) -> None:
        """The driver's word (from its writer thread): the terminal hung up, refused a write or a read, or
        took no output once quitting."""
        self.terminal_gone = self.terminal_gone or why
        self.quit_soon()

    def _quit_now(self) -> None:
        """The worker is told to stop now, and the app exits without waiting for it (its unmount does, and
        so does the CLI, which then removes what a killed worker left)."""
        if self._quitting:
            return
        self._quitting = True
        self.feed.stop_soon()
        self.exit()

    # ---- from the worker -----------------------------------------------------------------------
    def on_feed_message(self, message: FeedMessage) -> None:
        msg = message.payload
        kind = msg[0]
        if kind == "update":
            self._update(msg[1])
        elif kind == "reply":
            self.feed.resolve(msg[1], msg[2], msg[3])
        elif kind in ("error", "gone") and msg[1]:
            self._worker_error(str(msg[1]))

    def _update(self, up: FeedUpdate) -> None:
        self.updates += 1
        if up.restart:
            self._clear()
            self.skipped = 0
            self.restarts += 1
        if up.counters.error and up.counters.error != self.error:
            self._worker_error(up.counters.error)
        elif not up.counters.error:
            up.counters.error = self.error  # a worker failure stays shown
        self.counters = up.counters
        self.skipped += up.skipped
        self.log_view.add_rows(up.rows)
        self.views[0].show(up.devices)
        self.ops_view.show(up.ops)
        self.spikes_view.add(up.spikes)
        self.resets_view.show(up.resets, up.faults)
        self.views[1].show(up.memory)
        self._show_status()
        self.call_after_refresh(self.feed.ack, up.seq)  # the next update once this one is on the screen

    def _worker_error(self, text: str) -> None:
        """The worker failed or exited: one line in the status bar (the data shown so far stays)."""
        if text == self.error:
            return
        self.error = self.counters.error = text
        self._show_status()
        self.screen_stack[0].query_one("#detail", Static).update(Text(f"error: {safe(text)}", "bold red"))

    def _clear(self) -> None:
        self.log_view.clear()
        self.spikes_view.clear()
        self.ops_view.reset()
        self.jump_index = -1

    def _show_status(self) -> None:
        log = self.log_view
        bar = self.views[2]
        bar.show(self.counters, self.paused, len(log.pending), log.dropped, self.query_text, self.skipped)

    def _ask(self, name: str, *args: Any, then: Any) -> None:
        """A request to the worker; `then(value, error)` on the answer. Says so when the worker is gone."""
        if not self.feed.call(name, *args, then=then):
            self.notify(f"the worker has stopped: {self.error or 'no answer'}", severity="warning", markup=False)

    # ---- actions -------------------------------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP_KEYS))

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.log_view.set_paused(self.paused)
        self._show_status()

    def action_play(self) -> None:
        paused = not self.source_paused

        def done(ok: Any, error: str) -> None:
            if ok:
                self.source_paused = paused
                self.notify("replay paused" if paused else "replay playing")
            else:
                self.notify(error or "this source cannot be paused (p pauses the event log)", markup=False)

        self._ask("set_paused", paused, then=done)

    def action_speed(self, factor: float) -> None:
        def done(speed: Any, error: str) -> None:
            if not speed:  # a live source's: no pace to set
                self.notify(error or "speed: replay only", markup=False)
            else:  # inf: as fast as it reads
                self.notify("speed max" if speed == math.inf else f"speed {speed:g}x", markup=False)

        self._ask("set_speed", factor, then=done)

    def action_seek(self, seconds: float) -> None:
        def done(ok: Any, error: str) -> None:
            self.notify(f"seek {seconds:+g} s" if ok else error or "seek: replay only", markup=False)

        self._ask("seek", seconds, then=done)

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
        self.action_close_filter()
        self._show_status()
        self._ask("filter", self.query_text, then=self._filter_window)

    def _filter_window(self, window: Optional[LogWindow], error: str) -> None:
        """The worker's first window for the filter: the newest matching events among those it still held."""
        if window is None:
            self.notify(f"filter: {error}", severity="warning", markup=False)
            return
        if window.query != self.query_text:
            return  # superseded by a newer filter (its answer follows)
        self.log_view.replace(window.rows)
        self.skipped = window.skipped
        self._show_status()
        if window.query:
            self.notify(f"{len(window.rows) + window.skipped:,} matching among the last {window.examined:,} events; "
                        "new events are filtered as they come", markup=False)  # fmt: skip

    def action_marker(self) -> None:
        default = f"npu-trace mark {self.marks_added + 1} {time.strftime('%H:%M:%S')}"
        self.push_screen(PromptScreen("Marker text (Enter writes it to the trace):", default), self._write_marker)

    def _write_marker(self, text: Optional[str]) -> None:
        if not text:
            return

        def done(ok: Any, error: str) -> None:
            if ok:
                self.marks_added += 1
                self.notify(Text(f"marker written: {safe(text)}").plain, markup=False)
            else:
                self.notify(error or "markers need a live session", severity="warning", markup=False)

        self._ask("mark", text, then=done)

    def action_record(self) -> None:
        if self.counters.recording or self.recording:
            self.recording = False
            self._ask("stop_recording", then=lambda _ok, _error: self.notify("recording stopped"))
            return
        path = os.path.join(self.record_dir, time.strftime("npu-trace-%Y%m%d-%H%M%S.npt"))

        def done(ok: Any, error: str) -> None:
            if ok:
                self.notify(f"recording to {path}", markup=False)
            else:
                self.recording = False
                self.notify(error or "recording needs a live session", severity="warning", markup=False)

        self.recording = True
        self._ask("start_recording", path, then=done)

    def action_dump(self) -> None:
        """The live session's last minutes (the worker's flight ring) written now to a recording in record_dir."""

        def done(path: Any, error: str) -> None:
            if path:
                self.dumps.append(str(path))
                self.notify(f"dumped the last minutes to {path}", markup=False)
            else:
                self.notify(error or "dumps need a live session", severity="warning", markup=False)

        self._ask("dump_now", self.record_dir, then=done)

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
        self.screen_stack[0].query_one("#detail", Static).update(row_detail(message.row))

    async def action_quit(self) -> None:
        await asyncio.to_thread(self.feed.close)
        self.exit()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume the event log", "freeze the log; events keep buffering", self.action_pause)
        yield SystemCommand("Filter the event log", "dev:0 kind:timeout pid:123 comm:name text", self.action_filter)
        yield SystemCommand("Start / stop recording", "record the live session to a file", self.action_record)
        yield SystemCommand("Dump the last minutes", "the flight recorder's window, to a file now", self.action_dump)
        yield SystemCommand("Add a marker", "write a marker into the trace", self.action_marker)
        yield SystemCommand("Next spike or reset", "jump to the next finding", lambda: self.action_jump(1))
        yield SystemCommand("Previous spike or reset", "jump to the previous finding", lambda: self.action_jump(-1))
        yield SystemCommand("Replay: play / pause", "pause or resume a replay", self.action_play)
        yield SystemCommand("Help: npu-trace keys", "show the help screen", self.action_help)
