"""Where an export's bytes go (npu_trace.export.output): written in order. Through the stream, the file's pages
let go behind the writing, each range of the file advised twice (the first call begins its writing back, the
next one drops it), never the last KEPT bytes; a stream that is not a file is written all the same, with
nothing let go. A regular file written direct (npu_trace.export.direct): the same bytes, written through a
descriptor of its own with O_DIRECT (the stream's never has it), the last ones through the stream's, which
is left after them; a write the file refuses direct made again without it; a write's error raised by the
next call."""

from __future__ import annotations

import errno
import fcntl
import io
import os
import threading
from typing import Any, List, Tuple

import numpy as np
import pytest

import npu_trace.export.direct as direct
import npu_trace.export.output as output
from npu_trace.export.output import Output
from npu_trace.export.wire import Consts, Template, assemble, program

KEPT = 1 << 20  # the tests' own: the module's value is a tuning, not a rule


def _written(stream: Any, monkeypatch: Any, sizes: List[int]) -> Tuple[List[Tuple[int, int, int]], bytes]:
    """Output writes `sizes` bytes after bytes to `stream`: the posix_fadvise calls made meanwhile, each as
    (offset, end, the bytes written by then), and what was written."""
    monkeypatch.setattr(output, "KEPT", KEPT)
    monkeypatch.setattr(output, "DIRECT", False)  # through the stream (the direct writes: the tests below)
    calls: List[Tuple[int, int, int]] = []
    counts = {"bytes": 0}

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        assert fd == stream.fileno() and advice == os.POSIX_FADV_DONTNEED
        calls.append((offset, offset + length, counts["bytes"]))
        real(fd, offset, length, advice)  # the kernel takes it (a file's pages, its own range)

    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    out = Output(stream.write, counts, stream)
    data = b"".join(bytes([i % 251]) * size for i, size in enumerate(sizes))
    at = 0
    for size in sizes:
        out.write(memoryview(data)[at : at + size])
        at += size
    assert counts["bytes"] == len(data)
    return calls, data


def test_the_file_s_pages_are_let_go_behind_the_writing(tmp_path: Any, monkeypatch: Any) -> None:
    """Writes of uneven sizes (a 3 MB one among 100 kB ones): every range before the last KEPT bytes at a call
    is advised, from the file's start, without gaps; each call begins where the one before the last began (its
    range dropped now that its writing back began), so every byte up to the last call's start is advised twice;
    a call comes once 2 x KEPT bytes wait."""
    path = tmp_path / "out"
    sizes = [100_000] * 40 + [3 << 20] + [100_000] * 60
    with open(path, "wb") as f:
        calls, data = _written(f, monkeypatch, sizes)
    assert path.read_bytes() == data
    assert len(calls) >= 3
    begun, let_go = 0, 0
    for offset, end, written in calls:
        assert offset == begun and end > let_go and end == written - KEPT
        assert written - let_go >= 2 * KEPT
        begun, let_go = let_go, end
    assert len(data) - let_go < 2 * KEPT  # no call was due at the end


def test_a_stream_that_is_not_a_file_is_written_with_nothing_let_go(tmp_path: Any, monkeypatch: Any) -> None:
    """A pipe (ESPIPE: the first call fails, and none is made after it) and a stream with no descriptor."""
    sizes = [1 << 20] * 8
    got = bytearray()
    r, w = os.pipe()
    with os.fdopen(w, "wb") as pipe:
        reader = threading.Thread(target=lambda: got.extend(_read_all(r)))
        reader.start()
        calls, data = _written(pipe, monkeypatch, sizes)
    reader.join()
    assert bytes(got) == data and len(calls) == 1  # the one that failed: nothing after it

    class NoDescriptor(io.BytesIO):
        def fileno(self) -> int:
            raise io.UnsupportedOperation("fileno")

    buf = NoDescriptor()
    calls, data = _written(buf, monkeypatch, sizes)
    assert buf.getvalue() == data and calls == []


def _read_all(fd: int) -> bytes:
    out = bytearray()
    with os.fdopen(fd, "rb") as f:
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                return bytes(out)
            out += chunk


# ---- a file written direct ----------------------------------------------------------------------------------
def _lines(n: int, first: int) -> Tuple[Any, bytes]:
    """An assembler's run of n decimal lines (the numbers from `first`), and the bytes it lays out."""
    consts = Consts()
    prog, starts = program([Template(consts).dec(0).const(b"\n").done()])
    which = np.zeros(n, np.int32)
    cols = np.arange(first, first + n, dtype=np.int64).reshape(n, 1)

    def run(buf: Any, at: int) -> int:
        return assemble(prog, starts, which, cols, tuple(consts.items), (), buf, at)

    return run, b"".join(b"%d\n" % v for v in range(first, first + n))


def _o_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def _direct_writes(path: Any, monkeypatch: Any) -> Tuple[List[bool], bytes]:
    """Text, bytes and assembler runs (one far past a buffer's size) written to a new file through Output:
    whether O_DIRECT was set at each write the thread made, and the bytes expected."""
    monkeypatch.setattr(direct, "CHUNK", 1 << 16)  # many buffers written
    monkeypatch.setattr(direct, "ROOM", 1 << 17)  # of 128 kB: a run past one (refused, then given room)
    flags: List[bool] = []
    write_all = direct._Writes._all
    refused = [0]
    next_buffer = direct.DirectFile._next

    def counted(self: Any, room: int) -> None:
        refused[0] += room > 0
        next_buffer(self, room)

    monkeypatch.setattr(direct.DirectFile, "_next", counted)

    def seen(self: Any, view: memoryview) -> None:
        assert not _o_direct(self.fd)  # the stream's own descriptor: never
        flags.append(self.direct >= 0 and _o_direct(self.direct))
        write_all(self, view)

    monkeypatch.setattr(direct._Writes, "_all", seen)
    counts = {"bytes": 0}
    expected = bytearray()
    with open(path, "w", encoding="ascii", newline="\n") as f:
        out = Output(f.write, counts, f)
        out.write("[\n")
        expected += b"[\n"
        for k, n in enumerate([3, 5000, 40_000, 1, 7]):
            run, data = _lines(n, k * 1_000_000_000)
            out.assembled(run)
            expected += data
            out.write(memoryview(b"x" * (k * 3001)))
            expected += b"x" * (k * 3001)
        out.close()
        assert f.tell() == len(expected)  # the stream's descriptor after what was written
        f.flush()
    assert counts["bytes"] == len(expected)
    assert refused[0] >= 1  # the run of 40 000 lines did not fit
    return flags, bytes(expected)


def _direct_writes_fail(monkeypatch: Any, code: int) -> None:
    """Every write made with O_DIRECT set fails with `code` (the direct module's writes only)."""
    real = os.pwrite

    def failing(fd: int, data: Any, offset: int) -> int:
        if _o_direct(fd):
            raise OSError(code, os.strerror(code))
        return real(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", failing)


def test_a_file_is_written_direct_with_the_same_bytes(tmp_path: Any, monkeypatch: Any) -> None:
    path = tmp_path / "out"
    flags, expected = _direct_writes(path, monkeypatch)
    assert path.read_bytes() == expected
    assert len(flags) >= 4 and all(flags[:-2]) and not flags[-1]  # the last bytes: through the stream's descriptor


def test_a_write_refused_direct_is_made_again_without_it(tmp_path: Any, monkeypatch: Any) -> None:
    """EINVAL for every write with O_DIRECT set (a file system that takes the flag but not such writes)."""
    _direct_writes_fail(monkeypatch, errno.EINVAL)
    path = tmp_path / "out"
    flags, expected = _direct_writes(path, monkeypatch)
    assert path.read_bytes() == expected
    assert flags[0] and not any(flags[1:])  # refused once: never direct again


def test_a_direct_write_s_error_is_raised_by_the_next_call(tmp_path: Any, monkeypatch: Any) -> None:
    _direct_writes_fail(monkeypatch, errno.ENOSPC)
    monkeypatch.setattr(direct, "CHUNK", 1 << 16)
    with open(tmp_path / "out", "wb") as f:
        out = Output(f.write, {"bytes": 0}, f)
        with pytest.raises(OSError, match="No space left on device"):
            for _ in range(64):  # the first buffer goes to the thread; its error comes back at a later call
                out.write(b"y" * 50_000)
            out.close()


@pytest.mark.parametrize("how", ["pipe", "append", "unaligned"])
def test_what_cannot_be_written_direct_goes_through_the_stream(tmp_path: Any, how: str) -> None:
    """A pipe, a file opened to append, a file whose offset is not a multiple of a block: no O_DIRECT."""
    if how == "pipe":
        r, w = os.pipe()
        os.close(r)
    else:
        w = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | (os.O_APPEND if how == "append" else 0))
        os.write(w, b"z" * (100 if how == "unaligned" else 0))
    with os.fdopen(w, "wb") as stream:
        assert direct.DirectFile.of(stream) is None
        assert not _o_direct(stream.fileno())
