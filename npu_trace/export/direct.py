"""An export's file written with direct I/O (O_DIRECT) from page-aligned buffers, by a thread of its own.

An export writes hundreds of MB to GB. Through the page cache, every byte is copied into a kernel page that
is allocated, dirtied and written back. Measured on the 2-vCPU VM the benchmarks run on, 2 M events to
Chrome JSON (280 MB): the drawing's process spent 0.15-0.30 s of system CPU on its writes, a fifth of its
CPU. Written direct, the disk's transfer reads the buffer itself and that CPU is not spent (0.07-0.14 s left).

`DirectFile.of(stream)` gives one for a stream whose descriptor is a regular file, not opened to append, at an
offset that is a multiple of ALIGN, that the process can open again with O_DIRECT (through /proc/self/fd: a
descriptor of its own, so that the stream's own, which a shell may share, never has the flag, whatever ends
the process); else None, and the caller writes through the stream. The bytes go into the current buffer (an
anonymous map: page-aligned): `write(data)` copies them in; `assembled(run)` has `run(buffer, at)`
(npu_trace.export.wire.assemble) lay them out in it where the last ones end, with no copy (a run the buffer
may not hold gets a buffer with room, and runs again). Once a buffer holds CHUNK bytes, its whole ALIGN-sized
blocks go to the thread, and the rest (less than ALIGN) begins the other buffer: one is written while the
other fills. Every write is at its offset (pwrite). `close()` writes what is left, its whole blocks direct,
the rest through the stream's descriptor, and leaves that descriptor's offset at the end, as writing
through it would have.

A write the file refuses direct (EINVAL: a file system that takes the flag but not such writes) is made again
through the stream's descriptor, and so is every later one. A write's error (a full disk) is raised by the
writing side's next call (`write`, `assembled` or `close`) as the OSError it is; nothing is written after it.
A DirectFile dropped without `close()` (the export failed: its file is removed) ends its thread when it is
collected.
"""

from __future__ import annotations

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
ROOM = 64 << 20  # a buffer's size: only its pages written to are made (see DirectFile._next)
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux's (not on macOS: never direct there)
Job = Optional[Tuple[mmap.mmap, int, bool]]  # (buffer, bytes, the last: its tail written too), None: stop


class DirectFile:
    """See the module docstring: the writing side."""

    def __init__(self, fd: int, direct: int, offset: int) -> None:
        self._writes = _Writes(fd, direct, offset)
        self.buf = mmap.mmap(-1, ROOM)
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
            if not stat.S_ISREG(os.fstat(fd).st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
                return None
            stream.flush()
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            if offset % ALIGN:
                return None
            direct = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_CLOEXEC | _O_DIRECT)
        except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation is both), no flag
            return None
        return cls(fd, direct, offset)

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
        """What is left written, the thread ended, the stream's descriptor at the end; a write's error raised."""
        self._writes.todo.put((self.buf, self.fill, True))
        self._stop()
        self._thread.join()
        self._check()

    def _check(self) -> None:
        """A write's error raised, once the thread ended."""
        if self._writes.error is not None:
            self._stop()
            self._thread.join()
            raise self._writes.error

    def _next(self, room: int) -> None:
        """The buffer's whole blocks to the thread; a free buffer (with `room` bytes past what is left) begun
        with the rest. A run's room is the most its rows could take (npu_trace.export.wire: 32 bytes a number),
        a few times what they do take: the buffers are large maps (ROOM), of which only the pages written are
        made, and a run refused for want of room (its call made twice) is rare; one is made larger, twice
        what was asked, when a run needs more."""
        old, fill = self.buf, self.fill
        whole = fill - fill % ALIGN
        new = self._writes.spare.get()  # waits while the thread writes it
        self._check()
        if len(new) < fill - whole + room:
            new.close()
            new = mmap.mmap(-1, _rounded(2 * (fill - whole + room) + CHUNK))
        new[: fill - whole] = old[whole:fill]
        if whole:
            self._writes.todo.put((old, whole, False))
        else:
            self._writes.spare.put(old)
        self.buf, self.fill = new, fill - whole


class _Writes:
    """The thread's side: writes the buffers it is given, in order, and hands each back. `fd`: the stream's
    descriptor; `direct`: the file's, opened with O_DIRECT (-1 once it is given up); `offset`: where the next
    bytes go."""

    def __init__(self, fd: int, direct: int, offset: int) -> None:
        self.fd, self.direct, self.offset = fd, direct, offset
        self.todo: queue.Queue[Job] = queue.Queue()
        self.spare: queue.Queue[mmap.mmap] = queue.Queue()
        self.spare.put(mmap.mmap(-1, ROOM))
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
            self._buffered()

    def _write(self, buf: mmap.mmap, size: int, last: bool) -> None:
        with memoryview(buf) as view:
            whole = size - size % ALIGN
            self._all(view[:whole])
            if last:
                self._buffered()
                self._all(view[whole:size])
                os.lseek(self.fd, self.offset, os.SEEK_SET)  # the stream's descriptor after what was written

    def _all(self, view: memoryview) -> None:
        while len(view):
            try:
                n = os.pwrite(self.direct if self.direct >= 0 else self.fd, view, self.offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL or self.direct < 0:
                    raise
                self._buffered()  # refused direct: written through the stream's descriptor, from now on
                continue
            view, self.offset = view[n:], self.offset + n

    def _buffered(self) -> None:
        """The direct descriptor given up (closed)."""
        if self.direct >= 0:
            direct, self.direct = self.direct, -1
            os.close(direct)


def _rounded(size: int) -> int:
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
