"""The UI process and its terminal: a Textual driver that notices a terminal that is gone and never lets one
hold the UI, and the signals that end a TUI run (SIGHUP, SIGTERM, SIGINT) from its first moment to its last.

Why not Textual's own LinuxDriver alone (measured with py-spy on a UI left behind by a closed pty):
- its writer thread (textual.drivers._writer_thread) dies at the first write the terminal refuses (EIO, once
  the ssh session or the multiplexer is gone), uncaught; the UI thread then puts every frame into its bounded
  queue (30 writes), which nobody empties: the event loop blocks in a futex for ever, and with it every
  handler set with loop.add_signal_handler: SIGTERM and SIGHUP did nothing, only SIGKILL ended it;
- the SIGCONT that a hang-up sends with its SIGHUP makes it "resume" an application mode that was never
  suspended: a second writer thread (which dies the same way) and a second input thread (the first one,
  non-daemon, may then run on after the app, keeping the process alive);
- a hung-up terminal reads end-of-file: its input thread spins on it, and nothing ends the app.

`TerminalDriver` writes through `TerminalOutput`: a write that fails or a terminal that hangs up makes the
terminal lost (the app is told, and quits), a write never blocks the UI thread on a lost terminal, and once
the app is quitting, not on one that takes no output either (a dropped ssh link that is not closed yet).
`QuitSignals` are plain signal handlers, installed before anything is created that must be cleaned up (the
simulator's probes, the worker): they run whatever the main thread is doing, and only ask the app to quit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import select
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, List, Optional

from textual.drivers.linux_driver import LinuxDriver

QUIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
QUEUED_WRITES = 30  # as Textual's writer: a slow terminal slows the UI's drawing down rather than piling up frames
WAIT_S = 0.05  # a write waiting for room in the queue looks this often whether to give up
WATCH_S = 0.2  # the writer looks at the terminal (hung up?) this often
CLOSE_S = 1.0  # the most that closing waits for the last writes (the terminal's reset) to be written
QUIT_GRACE_S = 0.5  # once quitting: a terminal that takes no output for this long is given up
HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL


class TerminalOutput:
    """What the UI draws, written to the terminal by a thread of its own. `lost` says why the terminal is no
    longer written (empty while it is): it hung up or refused a write (`on_lost(why, True)`), or it took no
    output past the time `give_up_after` gave it (`on_lost(why, False)`). Once lost, writes are dropped."""

    def __init__(self, fd: int, encoding: str, errors: str, watch: List[int],
                 on_lost: Callable[[str, bool], Any]) -> None:  # fmt: skip
        self.fd = fd
        self.encoding = encoding
        self.errors = errors
        self.on_lost = on_lost
        self.lost = ""
        self._give_up_at: Optional[float] = None
        self._queue: queue.Queue[Optional[str]] = queue.Queue(QUEUED_WRITES)
        self._poll = select.poll()
        for watched in watch:  # terminals whose hang-up (reads at end-of-file or EIO) ends the app
            self._poll.register(watched, 0)  # POLLHUP, POLLERR and POLLNVAL are always reported
        self._lost_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="npu-trace-terminal", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # ---- the UI thread -------------------------------------------------------------------------
    def write(self, text: str) -> None:
        """Queue `text` for the terminal; while the queue is full (a slow terminal), wait, but never once the
        terminal is lost or the time given to it ran out."""
        self._put(text)

    def _put(self, item: Optional[str]) -> None:
        while not self.lost:
            try:
                self._queue.put(item, timeout=WAIT_S)
                return
            except queue.Full:
                at = self._give_up_at
                if at is not None and time.monotonic() >= at:
                    self._lose("it took no output", gone=False)

    def give_up_after(self, seconds: float) -> None:
        """From now on a terminal that takes no output for `seconds` is given up (safe in a signal handler:
        it only sets a time)."""
        at = time.monotonic() + seconds
        if self._give_up_at is None or at < self._give_up_at:
            self._give_up_at = at

    def close(self, timeout: float = CLOSE_S) -> None:
        """Stop the writer once it wrote what is queued, waiting `timeout` at most (a terminal that takes no
        output is not waited for: the writer is a daemon thread, writing nothing after this)."""
        self.give_up_after(timeout)
        self._put(None)
        at = self._give_up_at
        self._thread.join(max(0.0, at - time.monotonic()) if at is not None else timeout)

    # ---- the writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        watched_at = 0.0
        while not self.lost:  # once lost, nothing more is written (what was queued is dropped)
            try:
                item = self._queue.get(timeout=WATCH_S)
            except queue.Empty:
                item = ""
            batch: List[str] = [item] if item else []
            done = item is None
            while not done:  # everything queued, in one write
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                else:
                    batch.append(more)
            if batch:
                self._write("".join(batch))
            now = time.monotonic()
            if now - watched_at >= WATCH_S and not self.lost:
                watched_at = now
                self._watch()
            if done:
                return

    def _write(self, text: str) -> None:
        data = memoryview(text.encode(self.encoding, self.errors))
        try:
            while data and not self.lost:
                try:
                    n = os.write(self.fd, data)
                except BlockingIOError:  # a terminal left non-blocking by another program: wait for room
                    select.select([], [self.fd], [], WAIT_S)
                    continue
                data = data[n:]
        except OSError as exc:
            self._lose(f"writing to it failed: {exc.strerror or errno.errorcode.get(exc.errno or 0, exc)}")

    def _watch(self) -> None:
        try:
            events = self._poll.poll(0)
        except OSError:
            return
        if any(mask & HANGUP for _fd, mask in events):
            self._lose("it hung up")

    def _lose(self, why: str, gone: bool = True) -> None:
        with self._lost_lock:
            if self.lost:
                return
            self.lost = why
        while True:  # what was queued is dropped: a UI thread waiting for room gets it
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self.on_lost(why, gone)


class TerminalDriver(LinuxDriver):
    """Textual's LinuxDriver, written through a `TerminalOutput` (see the module's docstring). The app is told
    when its terminal is lost: `app.terminal_lost(why)`, from any thread."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._output: Optional[TerminalOutput] = None
        self.lost = ""  # why the terminal was lost (empty while it is not)
        self._suspended = False  # by SIGTSTP (ctrl+z): then, and only then, a SIGCONT resumes application mode

    def give_up_after(self, seconds: float) -> None:
        out = self._output
        if out is not None:
            out.give_up_after(seconds)

    def start_application_mode(self) -> None:
        file = self._file if self._file is not None else sys.__stderr__
        assert file is not None, "the terminal driver needs a terminal on stderr"
        fd = file.fileno()
        with contextlib.suppress(OSError, ValueError):
            file.flush()  # what was written to it before goes first
        watch = sorted({f for f in (self.fileno, fd) if os.isatty(f)})
        encoding = getattr(file, "encoding", None) or "utf-8"
        errors = getattr(file, "errors", None) or "replace"
        self._output = TerminalOutput(fd, encoding, errors, watch, self._lost)
        self._output.start()
        super().start_application_mode()

    def write(self, data: str) -> None:
        out = self._output
        if out is not None:
            out.write(data)

    def close(self) -> None:
        out, self._output = self._output, None
        if out is not None:
            out.close()
        super().close()  # Textual's own writer thread: started by start_application_mode, never written to

    def run_input_thread(self) -> None:
        try:
            super().run_input_thread()
        except OSError as exc:  # the terminal refuses reads (EIO): it is gone (Textual would panic with a traceback)
            out = self._output
            if out is not None:
                out._lose(f"reading from it failed: {exc.strerror or exc}")

    def _lost(self, why: str, gone: bool) -> None:
        self.lost = self.lost or why
        if gone:  # its input thread would spin on end-of-file until the app ends
            self.exit_event.set()
        notify = getattr(self._app, "terminal_lost", None)
        if notify is not None:
            notify(why)

    def _sigtstp_application(self, *args: Any) -> None:
        self._suspended = bool(self._auto_restart)
        super()._sigtstp_application(*args)

    def _sigcont_application(self, *args: Any) -> None:
        if self._suspended:  # any other SIGCONT (a hang-up sends one with its SIGHUP) is not a resume
            self._suspended = False
            super()._sigcont_application(*args)


class QuitSignals:
    """SIGINT, SIGTERM and SIGHUP for a whole TUI run, as plain handlers (they run whatever the main thread
    is doing: the event loop need not). Before the app runs, a signal is remembered (`signum`): the caller
    skips what is still to start, the app quits as soon as it mounts; once `attach`ed, it calls
    `on_quit(signum)`, which must only schedule the quit (it runs inside the signal handler). SIGHUP is
    handled even when inherited ignored: a TUI under nohup has no terminal to keep."""

    def __init__(self) -> None:
        self.signum = 0
        self._on_quit: Optional[Callable[[int], Any]] = None

    def install(self) -> QuitSignals:
        for sig in QUIT_SIGNALS:
            signal.signal(sig, self._handle)
        return self

    def attach(self, on_quit: Callable[[int], Any]) -> None:
        self._on_quit = on_quit
        if self.signum:
            on_quit(self.signum)

    def _handle(self, signum: int, _frame: Optional[FrameType]) -> None:
        self.signum = self.signum or signum
        on_quit = self._on_quit
        if on_quit is not None:
            on_quit(signum)
