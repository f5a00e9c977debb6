"""The UI side of the worker process: `FeedClient` starts the worker (`tui.messages.WORKER_BOOT`, a fresh
interpreter), reads its messages on a thread of its own (receiving and unpickling never happen on the UI
thread) and hands them to `deliver` (the app's thread-safe post_message); it sends acknowledgements and
requests, and stops the worker. The protocol and every exit path: `tui.worker.main`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional, Tuple

from npu_trace.device.profiles import Profile
from tui.messages import INTERVAL_S, ROWS_PER_UPDATE, WORKER_BOOT, SourceSpec, one_line

STOP_TIMEOUT_S = 10.0  # a live session drains its buffers and removes its instance: give it time
KILL_TIMEOUT_S = 3.0
MAX_CALLS = 1000  # pending requests remembered (a UI that never hears back does not grow without bound)


class FeedClient:
    """Starts and stops the worker; `deliver(message)` is called on the reader thread (it must be
    thread-safe: App.post_message is). Calls and acks may come from any thread."""

    def __init__(
        self,
        spec: SourceSpec,
        profile: Profile,
        deliver: Callable[[Tuple[Any, ...]], Any],
        *,
        interval: float = INTERVAL_S,
        rows: int = ROWS_PER_UPDATE,
        quiet: bool = False,
    ) -> None:
        self.spec = spec
        self.profile = profile
        self.deliver = deliver
        self.interval = interval
        self.rows = rows
        self.quiet = quiet
        self.error: Optional[str] = None
        self.done = threading.Event()  # the worker has exited (and what it left behind is cleaned up)
        self.said_bye = False
        self.resource: Dict[str, str] = {}
        self.pid: Optional[int] = None
        self.exitcode: Optional[int] = None
        self.started = False
        self._conn: Optional[Connection] = None
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._send_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._calls: Dict[int, Callable[[Any, str], Any]] = {}
        self._next_id = 0
        self._early: List[bytes] = []  # sent before the worker was started: they go first
        self._closing = False
        self._terminated = False  # stop_soon sent SIGTERM: a worker it killed while it started is no error

    def start(self) -> None:
        with self._close_lock:
            if self._closing or self.started:
                return
            self._start()

    def _start(self) -> None:
        ours, theirs = multiprocessing.Pipe(duplex=True)  # a socketpair; nothing else of multiprocessing
        fd = theirs.fileno()
        out = subprocess.DEVNULL if self.quiet else None  # quiet: the UI owns the terminal
        path = json.dumps([os.path.abspath(p or os.curdir) for p in sys.path])
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", WORKER_BOOT, str(fd), path],
                pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        finally:
            theirs.close()
        ours.send_bytes(pickle.dumps((self.spec, self.profile, self.interval, self.rows), pickle.HIGHEST_PROTOCOL))
        with self._send_lock:
            self._conn, self._process, self.pid, self.started = ours, process, process.pid, True
            early, self._early = self._early, []
        for data in early:
            self._send_bytes(data)
        threading.Thread(target=self._read, name="npu-trace-reader", daemon=True).start()

    # ---- to the worker -------------------------------------------------------------------------
    def ack(self, seq: int) -> None:
        self._send(("ack", seq))

    def call(self, name: str, *args: Any, then: Optional[Callable[[Any, str], Any]] = None) -> bool:
        """Ask the worker to do `name(*args)`; `then(value, error)` runs when the answer comes (on the
        thread that calls `resolve`, the UI's). False when the worker is not there to ask."""
        self._next_id += 1
        rid = self._next_id
        if then is not None:
            if len(self._calls) >= MAX_CALLS:
                self._calls.pop(next(iter(self._calls)))
            self._calls[rid] = then
        if not self._send(("call", rid, name, args)):
            self._calls.pop(rid, None)
            return False
        return True

    def resolve(self, rid: int, value: Any, error: str) -> None:
        then = self._calls.pop(rid, None)
        if then is not None:
            then(value, error)

    def _send(self, message: Tuple[Any, ...]) -> bool:
        if self.done.is_set():
            return False
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            if self._conn is None:  # not started yet (a key pressed as the app opened): kept for the worker
                self._early.append(data)
                return True
        return self._send_bytes(data)

    def _send_bytes(self, data: bytes) -> bool:
        with self._send_lock:
            conn = self._conn
            if conn is None or self.done.is_set():
                return False
            try:
                conn.send_bytes(data)
            except (OSError, ValueError):  # the worker is gone (or the pipe closed)
                return False
        return True

    # ---- from the worker (the reader thread) ---------------------------------------------------
    def _read(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            while True:
                msg = pickle.loads(conn.recv_bytes())
                kind = msg[0]
                if kind == "bye":
                    self.said_bye = True
                elif kind == "resource":
                    self.resource = dict(msg[1])
                elif kind == "error":
                    self.error = str(msg[1])
                self.deliver(msg)
        except (EOFError, OSError):
            pass
        except Exception as exc:  # an unreadable message: treat the worker as lost
            self.error = f"worker: unreadable message ({type(exc).__name__}: {one_line(exc)})"
            self._kill()
        finally:
            self._finished()

    def _finished(self) -> None:
        process = self._process
        if process is not None:
            try:
                process.wait(KILL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._kill()
                process.wait()
            self.exitcode = process.returncode
        if not self.said_bye:
            if not (self._terminated and self.exitcode == -signal.SIGTERM and not self.resource):
                self.error = self.error or f"worker exited unexpectedly ({_exit_text(self.exitcode)})"
            self._cleanup()
        if self._conn is not None:
            self._conn.close()
        self.done.set()
        self.deliver(("gone", self.error or ""))

    def _cleanup(self) -> None:
        """The worker died without closing its source: remove the tracefs instance it announced, and put back
        the driver trace switches it turned on."""
        name, root = self.resource.get("instance"), self.resource.get("tracefs")
        if not name or not root:
            return
        from npu_trace.errors import NpuTraceError
        from npu_trace.ftrace.tracefs import Tracefs
        from npu_trace.sources.driver_switches import SwitchState, restore_stale

        try:
            fs = Tracefs(root)
            if name in fs.instance_names():
                fs.remove_instance(name)
        except (NpuTraceError, OSError) as exc:
            self.error = f"{self.error}; and its instance {name} could not be removed: {one_line(exc)}"
        state = self.resource.get("switch_state")
        try:
            problems = restore_stale(SwitchState(state))[1] if state else []
        except NpuTraceError as exc:
            problems = [one_line(exc)]
        if problems:
            self.error = f"{self.error}; and {'; '.join(problems)}"

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    # ---- stopping ------------------------------------------------------------------------------
    def stop_soon(self) -> None:
        """Tell the worker to stop without waiting for it (close() waits); a start() still to come starts
        nothing. Never blocks (close() may be holding its lock, waiting, on another thread). SIGTERM too: a
        worker still starting stops before it runs its source (and one that has not set its handlers yet
        dies of it, having made nothing), rather than after it has set its source up."""
        self._closing = True
        process = self._process
        if process is None:
            return
        self._send(("stop",))
        if process.poll() is None and not self.done.is_set():
            self._terminated = True
            process.terminate()

    def close(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the worker and wait for it (it closes its source first); SIGTERM, then SIGKILL, if it does not
        stop in time. Idempotent, from any thread."""
        with self._close_lock:
            self._closing = True  # a start() still to come will not start anything
            process = self._process
            if process is None or self.done.is_set():
                return
            self._send(("stop",))
            if self.done.wait(timeout):
                return
            if process.poll() is None:
                process.terminate()  # SIGTERM: the worker's stop flag; it still closes its source
            if self.done.wait(KILL_TIMEOUT_S):
                return
            self._kill()
            self.done.wait(KILL_TIMEOUT_S * 2)


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
