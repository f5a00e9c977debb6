"""An export's file written with direct I/O (O_DIRECT) from page-aligned buffers, by a thread of its own.

An export writes hundreds of MB to GB. Through the page cache, every byte is copied into a kernel page that
is allocated, dirtied and written back. Measured on the 2-vCPU VM the benchmarks run on, 2 M events to
Chrome JSON (280 MB): the drawing's process spent 0.15-0.30 s of system CPU on its writes, a fifth of its
CPU. Written direct, the disk's transfer reads the buffer itself and that CPU is not spent (0.07-0.14 s left).

`DirectFile.of(stream)` gives one for a stream whose descriptor is a regular file, not opened to append, at an
offset that is a multiple of ALIGN, once O_DIRECT is set on it (fcntl); else None, and the caller writes
through the stream. The bytes go into the current buffer (an anonymous map: page-aligned): `write(data)`
copies them in; `assembled(run)` has `run(buffer, at)` (npu_trace.export.wire.assemble) lay them out in it
where the last ones end, with no copy (a run the buffer may not hold gets a buffer with room, and runs again).
Once a buffer holds CHUNK bytes, its whole ALIGN-sized blocks go to the thread, and the rest (less than
ALIGN) begins the other buffer: one is written while the other fills. `close()` writes what is left, its
whole blocks direct, then the rest after O_DIRECT is cleared; the descriptor's flags are then as they were.

A write the file refuses direct (EINVAL: a file system that takes the flag but not such writes) is made again
without O_DIRECT, and so is every later one. A write's error (a full disk) is raised by the writing side's
next call (`write`, `assembled` or `close`) as the OSError it is; nothing is written after it. A DirectFile
dropped without `close()` (the export failed: its file is removed) ends its thread when it is collected.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import queue
import stat
import threading
import weakref
from typing import IO, Any, Callable, Optional, Tuple

ALIGN = 4096  # what O_DIRECT needs of a write's offset, length and memory (a page: every common disk's block)
CHUNK = 4 << 20  # the bytes a buffer gathers before they are written
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux's (not on macOS: never direct there)
Job = Optional[Tuple[mmap.mmap, int, bool]]  # (buffer, bytes, the last: its tail written too), None: stop


class DirectFile:
    """See the module docstring: the writing side."""

    def __init__(self, fd: int, flags: int) -> None:
        self._writes = _Writes(fd, flags)
        self.buf = mmap.mmap(-1, 2 * CHUNK)
        self.fill = 0
        self._thread = threading.Thread(target=self._writes.run, name="npu-trace export writes", daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, self._writes.todo.put, None)

    @classmethod
    def of(cls, stream: IO[Any]) -> Optional[DirectFile]:
        """One for the stream's file, when it can be written direct (see the module docstring)."""
        if not _O_DIRECT:
            return None
        try:
            fd = stream.fileno()
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if not stat.S_ISREG(os.fstat(fd).st_mode) or flags & os.O_APPEND:
                return None
            stream.flush()
            if os.lseek(fd, 0, os.SEEK_CUR) % ALIGN:
                return None
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | _O_DIRECT)
        except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation is both), no flag
            return None
        return cls(fd, flags)

    def write(self, data: Any) -> None:
        """Bytes, or ASCII text, after those written so far."""
        self._check()
        raw = memoryview(data.encode("ascii") if isinstance(data, str) else data).cast("B")
        while len(raw):
            if self.fill == len(self.buf):
                self._next(0)
            n = min(len(raw), len(self.buf) - self.fill)
            self.buf[self.fill : self.fill + n] = raw[:n]
            self.fill += n
            raw = raw[n:]
        if self.fill >= CHUNK:
            self._next(0)

    def assembled(self, run: Callable[[mmap.mmap, int], int]) -> int:
        """What `run(buffer, at)` lays out after the bytes written so far (it returns where its bytes end, or
        minus the size it needs): how many bytes."""
        self._check()
        end = run(self.buf, self.fill)
        if end < 0:
            self._next(-end - self.fill)
            end = run(self.buf, self.fill)
            if end < 0:
                raise RuntimeError(f"the assembler asked for {-end} bytes again in a buffer of {len(self.buf)}")
        size, self.fill = end - self.fill, end
        if self.fill >= CHUNK:
            self._next(0)
        return size

    def close(self) -> None:
        """What is left written, the thread ended, the descriptor's flags as they were; a write's error raised."""
        self._writes.todo.put((self.buf, self.fill, True))
        self._stop()
        self._thread.join()
        self._check()

    def _check(self) -> None:
        """A write's error raised, once the thread ended (the descriptor's flags as they were)."""
        if self._writes.error is not None:
            self._stop()
            self._thread.join()
            raise self._writes.error

    def _next(self, room: int) -> None:
        """The buffer's whole blocks to the thread; a free buffer (with `room` bytes past what is left) begun
        with the rest."""
        old, fill = self.buf, self.fill
        whole = fill - fill % ALIGN
        new = self._writes.spare.get()  # waits while the thread writes it
        self._check()
        if len(new) < fill - whole + room:
            new.close()
            new = mmap.mmap(-1, _rounded(fill - whole + room + CHUNK))
        new[: fill - whole] = old[whole:fill]
        if whole:
            self._writes.todo.put((old, whole, False))
        else:
            self._writes.spare.put(old)
        self.buf, self.fill = new, fill - whole


class _Writes:
    """The thread's side: writes the buffers it is given, in order, and hands each back."""

    def __init__(self, fd: int, flags: int) -> None:
        self.fd, self.flags = fd, flags
        self.todo: queue.Queue[Job] = queue.Queue()
        self.spare: queue.Queue[mmap.mmap] = queue.Queue()
        self.spare.put(mmap.mmap(-1, 2 * CHUNK))
        self.direct = True
        self.error: Optional[OSError] = None

    def run(self) -> None:
        try:
            while True:
                job = self.todo.get()
                if job is None:
                    return
                buf, size, last = job
                if self.error is None:
                    try:
                        self._write(buf, size, last)
                    except OSError as exc:
                        self.error = exc
                self.spare.put(buf)
        finally:
            with contextlib.suppress(OSError):  # the descriptor closed meanwhile (a failed export): nothing to restore
                self._buffered()

    def _write(self, buf: mmap.mmap, size: int, last: bool) -> None:
        with memoryview(buf) as view:
            whole = size - size % ALIGN
            self._all(view[:whole])
            if last and size > whole:
                self._buffered()
                self._all(view[whole:size])

    def _all(self, view: memoryview) -> None:
        while len(view):
            try:
                view = view[os.write(self.fd, view) :]
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self._buffered()  # refused direct: written as any write, from now on

    def _buffered(self) -> None:
        """O_DIRECT cleared: the descriptor's flags as they were."""
        if self.direct:
            self.direct = False
            fcntl.fcntl(self.fd, fcntl.F_SETFL, self.flags)


def _rounded(size: int) -> int:
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
