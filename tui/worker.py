"""The worker process: the source, decoding, normalization and every detector run there, never in the UI.

Why a process: at 100,000 events/s the analysis alone needs most of a CPU; in a thread of the UI process it
holds the GIL so long that a key press waits for seconds, and it still cannot keep up (measured, see
benchmarks/tui.py). The UI process only receives compact, already summarised `FeedUpdate`s.

`SourceSpec` says how to build the source in the worker (a module-level factory and its arguments,
pickled to it: the worker is a fresh interpreter, `python -c BOOT`, that imports only what the spec names,
never Textual, nor the UI's main module). `FeedClient` is the UI side: it starts the worker, reads its
messages on a thread of its own (receiving and unpickling never happen on the UI thread) and hands them to
`deliver` (the app's thread-safe post_message); it sends acknowledgements and requests, and stops the worker.

Protocol (pickled tuples over a duplex pipe):
  UI -> worker: ("ack", seq) | ("call", id, name, args) | ("stop",)
  worker -> UI: ("update", FeedUpdate) | ("reply", id, value, error) | ("resource", {...}) | ("error", text)
                | ("bye",)   (the source is closed: its kernel resources are released)
  and, made by FeedClient when the worker has exited: ("gone", error or "").

Exit paths: q / ctrl+q (stop, the worker closes the source, says bye); the UI process dying (the worker
reads end-of-file and stops; SIGINT/SIGTERM/SIGHUP stop it the same way); the worker failing (the source is
unwound and closed, the error is sent as one line); the worker killed (the UI sees end-of-file without bye
and removes the tracefs instance the worker announced).
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
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional, Tuple

from npu_trace.device.profiles import Profile
from npu_trace.process import StopFlag, tune_gc
from tui.collector import ROWS_PER_UPDATE
from tui.feed import INTERVAL_S, Feed, Source, one_line

STOP_TIMEOUT_S = 10.0  # a live session drains its buffers and removes its instance: give it time
KILL_TIMEOUT_S = 3.0
MAX_CALLS = 1000  # pending requests remembered (a UI that never hears back does not grow without bound)


@dataclass
class SourceSpec:
    """How the worker builds its source: `factory(*args, **kwargs)`; the factory must be importable by name
    (a module-level class or function) and the arguments picklable."""

    factory: Callable[..., Source]
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)
    label: str = ""  # shown until the worker's first update (and set on the source when given)

    def build(self) -> Source:
        source = self.factory(*self.args, **self.kwargs)
        if self.label:
            source.label = self.label
        return source

    def title(self) -> str:
        return self.label or str(getattr(self.factory, "label", "") or "")


# ---- the worker process ---------------------------------------------------------------------------------
class PipeChannel:
    """The feed's side of the pipe. End-of-file or a broken pipe means the UI is gone: stop."""

    def __init__(self, conn: Connection, stop: StopFlag) -> None:
        self.conn = conn
        self.stop = stop
        self.broken = False

    def send(self, message: Tuple[Any, ...]) -> None:
        if self.broken:
            return
        try:
            self.conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        except OSError:  # EPIPE, ECONNRESET: the UI process is gone
            self._gone()

    def receive(self, timeout: float = 0.0) -> Optional[Tuple[Any, ...]]:
        if self.broken:
            return None
        try:
            if not self.conn.poll(timeout):
                return None
            msg: Tuple[Any, ...] = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            self._gone()
            return None
        return msg

    def _gone(self) -> None:
        self.broken = True
        self.stop.set()


BOOT = (  # python -c BOOT FD PATH: the UI's module search path first, then the worker
    "import json, sys; sys.path[:0] = json.loads(sys.argv[2]); "
    "from tui.worker import worker_main; worker_main(int(sys.argv[1]))"
)


def worker_main(fd: int) -> None:
    """The worker process's entry point: `fd` is its end of the pipe; the first message says what to run:
    (SourceSpec, Profile, interval, rows)."""
    stop = StopFlag()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop.set)
    conn = Connection(fd)
    channel = PipeChannel(conn, stop)
    try:
        spec, profile, interval, rows = pickle.loads(conn.recv_bytes())
        tune_gc()
        feed = Feed(spec.build(), profile, channel, stop, interval=interval, rows_per_update=rows)
        feed.run()
    except EOFError:  # the UI went away before saying what to run
        pass
    except BaseException as exc:  # whatever it was, the UI says it in one line
        channel.send(("error", f"worker: {type(exc).__name__}: {one_line(exc)}"))
    finally:
        channel.send(("bye",))
        conn.close()


# ---- the UI side ----------------------------------------------------------------------------------------
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
                [sys.executable, "-c", BOOT, str(fd), path],
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
            self.error = self.error or f"worker exited unexpectedly ({_exit_text(self.exitcode)})"
            self._cleanup()
        if self._conn is not None:
            self._conn.close()
        self.done.set()
        self.deliver(("gone", self.error or ""))

    def _cleanup(self) -> None:
        """The worker died without closing its source: remove the tracefs instance it announced."""
        name, root = self.resource.get("instance"), self.resource.get("tracefs")
        if not name or not root:
            return
        from npu_trace.errors import NpuTraceError
        from npu_trace.ftrace.tracefs import Tracefs

        try:
            fs = Tracefs(root)
            if name in fs.instance_names():
                fs.remove_instance(name)
        except (NpuTraceError, OSError) as exc:
            self.error = f"{self.error}; and its instance {name} could not be removed: {one_line(exc)}"

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    # ---- stopping ------------------------------------------------------------------------------
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
