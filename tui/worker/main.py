"""The worker process: the source, decoding, normalization and every detector run there, never in the UI.

Why a process: at 100,000 events/s the analysis alone needs most of a CPU; in a thread of the UI process it
holds the GIL so long that a key press waits for seconds, and it still cannot keep up (measured, see
benchmarks/tui.py). The UI process only receives compact, already summarised `FeedUpdate`s.

`SourceSpec` (`tui.messages`) says how to build the source in the worker (a module-level factory and its arguments,
pickled to it: the worker is a fresh interpreter, `python -c BOOT`, that imports only what the spec names,
never Textual, nor the UI's main module). `FeedClient` (`tui.ui.client`) is the UI side.

Protocol (pickled tuples over a duplex pipe):
  UI -> worker: ("ack", seq) | ("call", id, name, args) | ("stop",)
  worker -> UI: ("update", FeedUpdate) | ("reply", id, value, error) | ("resource", {...}) | ("error", text)
                | ("bye",)   (the source is closed: its kernel resources are released)
  and, made by FeedClient when the worker has exited: ("gone", error or "").

Exit paths: q / ctrl+q (stop, the worker closes the source, says bye); the UI quitting on a signal or a lost
terminal (stop and SIGTERM: a worker still starting runs no source); the UI process dying (the worker reads
end-of-file and stops; SIGINT/SIGTERM/SIGHUP stop it the same way); the worker failing (the source is
unwound and closed, the error is sent as one line); the worker killed (the UI sees end-of-file without bye
and removes the tracefs instance the worker announced).
"""

from __future__ import annotations

import pickle
import signal
from multiprocessing.connection import Connection
from typing import Any, Optional, Tuple

from npu_trace.process import StopFlag, tune_gc
from tui.messages import one_line
from tui.worker.feed import Feed


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
        if stop.stopped:  # told to stop while it started (the UI quit): nothing is built
            return
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
