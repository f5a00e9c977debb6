"""Where an export's bytes go (npu_trace.export.output): written in order, and the file's pages let go behind the
writing, each range of the file advised twice (the first call begins its writing back, the next one drops it),
never the last KEPT bytes; a stream that is not a file is written all the same, with nothing let go."""

from __future__ import annotations

import io
import os
import threading
from typing import Any, List, Tuple

import npu_trace.export.output as output
from npu_trace.export.output import Output

KEPT = 1 << 20  # the tests' own: the module's value is a tuning, not a rule


def _written(stream: Any, monkeypatch: Any, sizes: List[int]) -> Tuple[List[Tuple[int, int, int]], bytes]:
    """Output writes `sizes` bytes after bytes to `stream`: the posix_fadvise calls made meanwhile, each as
    (offset, end, the bytes written by then), and what was written."""
    monkeypatch.setattr(output, "KEPT", KEPT)
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
