"""Process set-up for a CLI process that traces: the stop flag its signals set, GC tuning; for the agent, the
SIGHUP flag and a service log journald reads."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, TextIO, Tuple

from npu_trace.errors import UsageError


def tune_gc() -> None:
    """Millions of small tuples a second make CPython's cyclic GC run constantly (measured: 2-3x the decode
    cost); events hold no cycles, so the process collects rarely. Called by the CLI, never by the library."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


class StopFlag:
    """Set by SIGTERM/SIGINT/SIGHUP (installed by `install`) or by a caller; checked once per poll."""

    def __init__(self) -> None:
        self.stopped = False
        self.signal = 0

    def set(self, signum: int = 0, _frame: Optional[FrameType] = None) -> None:
        self.stopped = True
        self.signal = signum

    def install(self) -> None:
        """SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session) stop the session, which then puts back
        what it changed in the kernel; a SIGHUP ignored on purpose (nohup) stays ignored."""
        _handle((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), self.set)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP where a command runs to its end at once (`end_on_termination`): raised in the main thread,
    so that what it made is undone as on Ctrl-C; the CLI exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def end_on_termination() -> None:
    """SIGTERM and SIGHUP (unless ignored on purpose: nohup) raise Terminated: a command that writes its output
    beside its final name (export) removes it and ends, instead of dying with it left behind."""

    def terminated(signum: int, _frame: Optional[FrameType]) -> None:
        raise Terminated(signum)

    _handle((signal.SIGTERM, signal.SIGHUP), terminated)


def _handle(signals: Tuple[signal.Signals, ...], handler: Callable[[int, Optional[FrameType]], Any]) -> None:
    """`handler` for each of `signals`, but a SIGHUP ignored on purpose (nohup) stays ignored."""
    for sig in signals:
        if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP that come while the block runs take effect after it, their handlers run then as
    they would have (Ctrl-C's KeyboardInterrupt, Terminated): a file made inside it is named where the caller's
    cleanup finds it before either can interrupt. (A signal mask would not do: the kernel gives a signal to any
    thread that does not block it, numpy's among them, and Python runs the handler in the main thread anyway.)
    Signals left to the system (ignored, or their default action) are left as they are. Main thread only."""
    came: List[int] = []

    def note(signum: int, _frame: Optional[FrameType]) -> None:
        came.append(signum)

    before: Dict[int, Callable[[int, Optional[FrameType]], Any]] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(sig)
        if callable(handler):
            before[sig] = handler
            signal.signal(sig, note)
    try:
        yield
    finally:
        for number, kept in before.items():
            signal.signal(number, kept)
        if came:
            before[came[0]](came[0], None)  # the first signal's own handler: it raises, as it would have


def pid_alive(pid: int) -> bool:
    """A process of this id exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare_process() -> StopFlag:
    """For a CLI process about to trace: SIGINT/SIGTERM/SIGHUP end the session cleanly, GC tuned for throughput."""
    stop = StopFlag()
    stop.install()
    # `kill -USR1 PID` writes every thread's stack to stderr: where a session that does not end is waiting
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    tune_gc()
    return stop


class HupFlag:
    """Set by SIGHUP (installed by `install`); the service takes it between reads (`take`)."""

    def __init__(self) -> None:
        self.pending = False

    def set(self, _signum: int = 0, _frame: Optional[FrameType] = None) -> None:
        self.pending = True

    def install(self) -> None:
        signal.signal(signal.SIGHUP, self.set)

    def take(self) -> bool:
        pending, self.pending = self.pending, False
        return pending


# syslog priorities, as sd-daemon(3)'s "<N>" line prefixes: journald reads them off a service's stderr
PRIORITIES = {"error": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7}


def journal_stderr() -> bool:
    """stderr is the journal's stream (systemd sets JOURNAL_STREAM to its device:inode)."""
    want = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return bool(want) and want == f"{st.st_dev}:{st.st_ino}"


class ServiceLog:
    """A long-running service's log: one line per message, `npu-trace: ` first, or the "<N>" priority
    prefix journald reads when stderr is the journal (`prefix`: forced on or off); to stderr or a file opened
    for appending, which `reopen()` opens again (SIGHUP, after logrotate moved it). Never raises: a log that
    cannot be written loses the line, not the service."""

    def __init__(self, path: Optional[str] = None, prefix: Optional[bool] = None) -> None:
        self.path = path
        self.prefix = journal_stderr() if prefix is None and path is None else bool(prefix)
        self._file: Optional[TextIO] = None
        self.reopen()

    def reopen(self) -> None:
        """Open the log file again (a UsageError naming it the first time it cannot be opened)."""
        if self.path is None:
            return
        old = self._file
        try:
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (kept open)
        except OSError as exc:
            if old is None:
                raise UsageError(f"--log-file {self.path}: {exc.strerror}") from None
            self.write("warning", f"cannot reopen {self.path} ({exc.strerror}): logging to it as before")
            return
        if old is not None:
            old.close()

    @property
    def stream(self) -> TextIO:
        return self._file if self._file is not None else sys.stderr

    def write(self, level: str, text: str) -> None:
        head = f"<{PRIORITIES[level]}>" if self.prefix else "npu-trace: "
        try:
            self.stream.write(f"{head}{text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the log itself is gone (disk full, closed): the service goes on

    def info(self, text: str) -> None:
        self.write("info", text)

    def warning(self, text: str) -> None:
        self.write("warning", text)

    def error(self, text: str) -> None:
        self.write("error", text)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def verdict_text(text: str) -> None:
    """A gate's report to the standard output (check, diff, cluster). A reader that goes away early (`| head`)
    ends the output, never the verdict: the command's exit code stands (the standard output is then the null
    device, so that nothing written after it fails again)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_null()


def standard_streams() -> None:
    """A standard descriptor the command was started without (`>&-`) made the null device: Python leaves its
    stream None (a print to it an AttributeError, exit 1: check's verdict for violations), and the first file
    the command opened would take the descriptor, where a child's output would land."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 (the process's own stream)


def stdout_to_null() -> None:
    """The standard output made the null device: a reader that left, or a full disk, ends what it is written
    (nothing written after it, Python's own flush at exit included, fails again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
