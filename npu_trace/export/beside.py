"""A trace file written beside its final name and moved there once whole (`export`, the cluster's trace).

`written_beside(out, binary, like)` gives the stream of a new file in `out`'s folder, `.NAME.XXXXXXXX.partial`
(0600), and once the block ends whole moves it to `out`, with `like`'s permission bits where one is given (never
more open than the recording it holds); `out` itself is untouched until then. Whatever ends the block otherwise
(an error, Ctrl-C, SIGTERM or SIGHUP where the command made them raise: npu_trace.process.end_on_termination)
removes the file, and a signal that comes while it is being made takes effect once its name is known
(npu_trace.process.signals_held). A folder where nothing can be made is one line (InputError).

`-` is the standard output, written in place through a copy of its descriptor (a file the shell opened to
append stays so; what the process printed before is flushed first); a binary trace (Perfetto) is refused
there when it is a terminal (UsageError: one line).

An output that exists and is not a regular file (a character device such as /dev/null, a FIFO a reader waits
on), or a link under /dev or /proc (/dev/stdout: to what the shell redirected), is written in place, as a shell's
redirection writes it: a file beside it moved over it would replace the device, the FIFO or the link with a
regular file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from typing import IO, Any, Iterator, Optional, Sequence, Tuple

from npu_trace.errors import InputError, UsageError
from npu_trace.process import signals_held

STDOUT = "-"  # the standard output


def shown(out: str) -> str:
    """The output as messages name it."""
    return "the standard output" if out == STDOUT else out


@contextlib.contextmanager
def written_beside(out: str, binary: bool, like: Optional[str] = None) -> Iterator[IO[Any]]:
    """See the module docstring (`binary`: bytes, else ASCII text with "\\n" line ends)."""
    if in_place(out):
        with _opened(out, binary) as stream:
            yield stream
        return
    with file_beside(out, like) as (fd, _), _stream(fd, binary) as stream:
        yield stream


@contextlib.contextmanager
def file_beside(out: str, like: Optional[str] = None) -> Iterator[Tuple[int, str]]:
    """The new file beside `out` (see the module docstring): its descriptor (the block's to close) and its path;
    moved to `out` once the block ends whole, with `like`'s permission bits where one is given (a rename that
    fails: InputError), removed whatever ends the block otherwise."""
    tmp: Optional[str] = None
    try:
        with signals_held():  # a signal's cleanup (Ctrl-C, SIGTERM) knows the file once it exists
            fd, tmp = _open_beside(out)
        yield fd, tmp
        if like is not None:
            _permissions(tmp, like)
        try:
            os.replace(tmp, out)
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror}") from None
    except BaseException:
        if tmp is not None:
            _remove(tmp)
        raise


def refuse_inputs(outputs: Sequence[Optional[str]], inputs: Sequence[str], instead: str = "another name") -> None:
    """UsageError when an output names one of the inputs (itself, through a link, or another name of it): moved
    over it once whole, the output would replace what it was made from. Called before the inputs are read;
    `instead`: what the message asks for (import's "another -o")."""
    for out in outputs:
        if out is None or out == STDOUT or not os.path.exists(out):
            continue
        for path in inputs:
            if os.path.exists(path) and os.path.samefile(path, out):
                raise UsageError(f"the output {out} is the input {path}: give {instead}")


def write_report(out: str, text: str, like: Optional[str] = None) -> None:
    """A report (JSON, JUnit XML: UTF-8) written as a trace is: beside its name and moved there once whole, with
    `like`'s permission bits at most; `-` the standard output (text there, a terminal too). A write that fails is
    one line (InputError)."""
    if out == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with written_beside(out, True, like) as stream:
            stream.write(text.encode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot write {shown(out)}: {exc.strerror or exc}") from None


def in_place(out: str) -> bool:
    """Is `out` written in place (see the module docstring): does it exist as something other than a regular file
    or a folder (followed through links), or as a link among the system's devices and processes (/dev/stdout,
    /proc/self/fd/1: to whatever the shell redirected, a regular file included; a file moved over it would
    replace the link)? The standard output (`-`) is."""
    if out == STDOUT:
        return True
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return False
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return True
    return os.path.islink(out) and os.path.abspath(out).startswith(("/dev/", "/proc/"))


def _opened(out: str, binary: bool) -> IO[Any]:
    """An output written in place: the file as it is, or a copy of the standard output's descriptor."""
    if out == STDOUT:
        if binary and os.isatty(1):
            raise UsageError("-o -: a Perfetto trace is binary: redirect the standard output to a file or a pipe")
        sys.stdout.flush()
    try:
        fd = os.dup(1) if out == STDOUT else os.open(out, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"cannot write {shown(out)}: {exc.strerror}") from None
    return _stream(fd, binary)


def _stream(fd: int, binary: bool) -> IO[Any]:
    """The descriptor as the writers' stream: bytes, or ASCII text with "\\n" line ends."""
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="ascii", newline="\n")


def _open_beside(out: str) -> Tuple[int, str]:
    """A new file in the output's folder (the output itself is replaced only once the file is whole)."""
    if os.path.isdir(out):
        raise InputError(f"cannot write {out}: Is a directory")
    folder = os.path.dirname(out) or "."
    try:
        return tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}") from None


def _permissions(path: str, like: str) -> None:
    with contextlib.suppress(OSError):  # the temporary file's own 0600 stays: never more open than `like`
        os.chmod(path, os.stat(like).st_mode & 0o666)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
