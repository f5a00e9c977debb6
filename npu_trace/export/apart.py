"""The drawing of an export in a process of its own, beside the analysis: both CPUs, two interpreters.

An export analyses each block (check's reading, normalizing and detectors) and draws it (npu_trace.export.drawer,
and the writer's assembly and writes). Both are many small numpy and Python steps that hold the interpreter's
lock, so a thread drawing beside the analysis barely overlapped it (1 M events, 2 vCPU: 1.2 s of CPU in
0.9 s); in a process of their own they run at once. `DrawingProcess.start(drawer, ...)` forks once the
window is known, before anything is written: the child opens the window (the writer's header, the mapping) and
then does, in order, what the parent tells it (`block`, `events`, `findings`, `finish`: the Drawer's calls,
npu_trace.export.ship says how they travel); the parent goes on reading and analysing. The child writes the
file (the stream the export opened, inherited); the parent writes nothing to it.

Bounded: a block's columns go through one of `SLOTS` slots of shared memory and the parent waits for a freed
slot before it sends a block: the child draws one block while the parent analyses the next (and at most
SLOTS - 1 more wait). The answers come back through a pipe of their own: a slot freed, at the end the counts
(`finish`), or the child's error, raised in the parent as its own (an OSError, the file's writing failed: one
line, the output named: InputError); a child that ends otherwise is one line too. Every exit path of the
parent ends the child: `close()` (in the exporter's `finally`) closes the pipes, kills the child unless it
finished (SIGKILL: it holds nothing to undo, the parent removes the partial file) and reaps it, signals held
meanwhile; a child that finished is reaped by `reap()` once the file is in place (its exit, the teardown of its
memory, ~15 ms, runs meanwhile). The child ignores SIGINT, SIGTERM and SIGHUP (a terminal's Ctrl-C reaches
the whole group: the parent decides) and ends when the parent's end of its pipe closes, whatever ended the
parent; it never runs the parent's exit code (`os._exit`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import traceback
from typing import IO, Any, Callable, Dict, List, Optional, Sequence

from npu_trace.errors import InputError, NpuTraceError
from npu_trace.export.beside import shown
from npu_trace.export.drawer import Changes, Drawer, Tasks, Window
from npu_trace.export.drawing import Rows
from npu_trace.export.ship import Receiver, Sender, Shared, Slots, read_frame, send_frame
from npu_trace.pipeline.vnormalize import NormBlock
from npu_trace.process import signals_held

_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# blocks in flight: the two sides take turns at being the slower (their work a block differs from block to
# block); a third slot lets the parent run ahead of a slow block's drawing (2 M events: the parent's waits for a
# freed slot 15-27 -> ~1 ms; 16 MiB more shared memory)
SLOTS = 3
_NAMED = ("block", "events", "finish")  # the calls whose last argument is the process names


class DrawingError(NpuTraceError):
    """The drawing's process could not start, or ended without saying why (the out-of-memory killer, a signal)."""


class ChildTraceback(Exception):
    """Where the drawing's process failed: its traceback, as the cause of the error raised in the parent."""


class DrawingProcess:
    """See the module docstring: the Drawer's calls, made in the child."""

    def __init__(self, drawer: Drawer, shared: Sequence[Any], stream: IO[Any], out: str,
                 later: Callable[[Any], bool] = lambda chunk: True) -> None:  # fmt: skip
        """`later(chunk)`: whether a block after the one being sent may name a recorded chunk (the timeline
        holds rows in it; npu_trace.export.ship.Sender)."""
        self.drawer, self.shared, self.stream, self.out, self.later = drawer, Shared(shared), stream, out, later
        try:
            self.slots = Slots(SLOTS)
        except OSError as exc:
            raise DrawingError(f"cannot make the shared memory the export draws through: {exc.strerror}") from None
        self.free = list(range(len(self.slots.fds)))
        self.pid: Optional[int] = None
        self.sender: Optional[Sender] = None
        self.answers = -1  # the parent's end of the child's answers
        self.finished = False
        self.ops_sent = 0  # of the block normalizer's operation names, those the child knows
        self.names_sent: Optional[Dict[int, str]] = None  # the process names the child knows
        self.frozen = False  # gc.freeze() done at the fork, not yet undone

    # ---- the parent's side -----------------------------------------------------------------------------------
    def start(self, window: Window, ops: List[str]) -> None:
        """Fork: the child opens the window and serves; `ops`: the operation names known now (the child's
        copy of the block normalizer has them)."""
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self.ops_sent = len(ops)
        self.stream.flush()  # nothing of the parent's left in its buffer for the child to write twice
        gc.freeze()  # what both hold now is not traversed by either's collector: its pages stay shared (close()
        self.frozen = True  # undoes it in the parent: a process that exports again collects them as before)
        with signals_held():  # a signal that comes now takes effect once the child's pid is kept: close() ends it
            try:
                self.pid = os.fork()
            except OSError as exc:  # no memory, or the user's process limit
                for fd in (down_r, down_w, up_r, up_w):
                    os.close(fd)
                raise DrawingError(f"cannot start the export's drawing process: {exc.strerror}") from None
            if self.pid == 0:  # pragma: no cover (the child; its work is seen in the file and the answers)
                _child(self, window, down_r, up_w, (down_w, up_r))
            os.close(down_r)
            os.close(up_w)
            self.answers = up_r
            self.sender = Sender(down_w, self.slots, self.shared, self._take, self.later)

    def block(self, nb: NormBlock, rows: Rows, tasks: Tasks, changes: Changes, names: Dict[int, str]) -> None:
        ops = nb.norm.ops
        self._send(("block", (nb, rows, tasks, changes, self._names(names)), ops[self.ops_sent :]))
        self.ops_sent = len(ops)

    def events(self, *args: Any) -> None:
        self._send(("events", (*args[:-1], self._names(args[-1])), []))

    def findings(self, found: List[Any], transitions: List[Any]) -> None:
        self._send(("findings", (found, transitions), []))

    def finish(self, *args: Any) -> Dict[str, Any]:
        self._send(("finish", (*args[:-1], self._names(args[-1])), []))
        while True:
            answer = self._answer()
            if answer[0] == "done":
                self.finished = True
                result: Dict[str, Any] = answer[1]
                return result

    def close(self) -> None:
        """Let go of the pipes and shared memory; a child that did not finish killed and reaped (one that did
        exits by itself: `reap` waits for it, once the caller has put the file in place)."""
        with signals_held():
            if self.sender is not None:
                os.close(self.sender.fd)
                self.sender = None
            if self.answers >= 0:
                os.close(self.answers)
                self.answers = -1
            if self.pid is not None and not self.finished:
                _kill(self.pid)
                self.reap()
            self.slots.close()
            if self.frozen:
                gc.unfreeze()
                self.frozen = False

    def reap(self) -> None:
        """Wait for the child to have exited; one that something else stopped (SIGSTOP: it would never end, and
        the signals held here would wait with it) is killed."""
        with signals_held():
            while self.pid is not None:
                _, status = os.waitpid(self.pid, os.WUNTRACED)
                if os.WIFSTOPPED(status):
                    _kill(self.pid)
                else:
                    self.pid = None

    def _names(self, names: Dict[int, str]) -> Optional[Dict[int, str]]:
        """The process names, the last argument of block, events and finish: None when they are those sent
        last (the child keeps them; hundreds of names pickled with every block cost more than the block's
        columns' copy)."""
        if names == self.names_sent:
            return None
        self.names_sent = names
        return names

    def _send(self, message: Any) -> None:
        assert self.sender is not None
        try:
            self.sender.send(message)
        except BrokenPipeError:  # the child ended: its answer says why
            while True:
                self._answer()

    def _take(self) -> int:
        while not self.free:
            answer = self._answer()
            if answer[0] == "free":
                self.free.append(answer[1])
        return self.free.pop(0)

    def _answer(self) -> Any:
        """The child's next answer; its error raised as the export's own."""
        try:
            answer = read_frame(self.answers)
        except EOFError:
            answer = None
        if answer is None:
            raise self._ended()

        got = pickle.loads(answer)
        if got[0] == "error":
            raise self._error(got[1], got[2])
        return got

    def _error(self, exc: BaseException, where: str) -> BaseException:
        if isinstance(exc, OSError):
            return InputError(f"cannot write {shown(self.out)}: {exc.strerror or exc}")
        exc.__cause__ = ChildTraceback(where)
        return exc

    def _ended(self) -> DrawingError:
        assert self.pid is not None
        pid, self.pid = self.pid, None
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return DrawingError(f"the export's drawing process ended unexpectedly ({how}); {self.out} was not written")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself
        os.kill(pid, signal.SIGKILL)


# ---- the child's side --------------------------------------------------------------------------------------
def _child(proc: DrawingProcess, window: Window, down: int, up: int, parents: Sequence[int]) -> None:
    """The child's life: serve, answer, and leave through os._exit whatever happens."""
    code = 1
    try:
        for sig in _IGNORED:
            signal.signal(sig, signal.SIG_IGN)
        for fd in parents:
            os.close(fd)
        _serve(proc.drawer, window, Receiver(down, proc.slots, proc.shared), up, proc.stream)
        code = 0
    except BaseException as exc:  # every error goes to the parent, which raises it
        _tell_error(up, exc)
    finally:
        os._exit(code)


def _serve(drawer: Drawer, window: Window, receiver: Receiver, up: int, stream: IO[Any]) -> None:
    drawer.open(window)
    receiver.slots.populate()  # while the first block is analysed
    names: Dict[int, str] = {}
    while True:
        got = receiver.receive()
        if got is None:
            return  # the parent ended, or stopped before the end: nothing more to do
        (name, args, ops), held = got
        if ops:
            args[0].norm.ops.extend(ops)  # the block's: the child's copy of the block normalizer
        if name in _NAMED:
            names = names if args[-1] is None else args[-1]
            args = (*args[:-1], names)
        if name == "finish":
            result = drawer.finish(*args)
            stream.flush()
            send_frame(up, ("done", result))
            return
        getattr(drawer, name)(*args)
        del args, got
        receiver.release(held)
        if held.slot is not None:
            send_frame(up, ("free", held.slot))


def _tell_error(up: int, exc: BaseException) -> None:
    where = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        send_frame(up, ("error", exc, where))
    except Exception:  # it does not pickle: its text
        send_frame(up, ("error", RuntimeError(f"{type(exc).__name__}: {exc}"), where))
