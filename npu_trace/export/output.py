"""Where a writer's bytes go, in the order they are written.

`Output(send, counts, stream)`: `write(data)` writes bytes or text; `assembled(run)` writes what
`run(buffer, at)` lays out in a buffer from `at` (npu_trace.export.wire.assemble: where its bytes end);
`close()` writes what is left. They write where the drawing runs (the export's drawing process,
npu_trace.export.apart). `send` is the stream's write; `counts["bytes"]` counts what is written.

A stream whose file can be written direct is written so (npu_trace.export.direct: O_DIRECT, from page-aligned
buffers the assembler lays its bytes out in, by a thread): decided at the first write, the stream flushed then.
Otherwise the bytes go through `send` at once, `assembled`'s laid out in the output's own buffer, kept from one
block to the next, and what was written more than `KEPT` bytes ago is let go from the page cache (`stream`'s file,
when it is one: posix_fadvise DONTNEED, which starts the writing back of those pages and drops those already
written): an export writes hundreds of MB to GB, and the kernel then reuses the pages it let go for what follows
instead of making new ones. Measured on the 2-vCPU VM the benchmarks run on, 1.4 GB written 650 kB at a time: 1.3 s
of CPU into pages the machine had not used lately (0.29 s into pages just freed), 0.43-0.49 s letting them go this
way; the export of 10 M events to Chrome JSON spent 3.0 s of its drawing's process's CPU writing. The pages are let
go close behind the writing (16 MB: what was let go is written into again a few ms later, before the machine gives
the pages back: this VM's balloon returns freed memory to the host after ~2 s, and taking it back costs ~4x a page
just freed). Exports whose start finds only such pages (run 3 s after the last), 16 MB kept against 64: 1 M events
to Chrome JSON (140 MB), the drawing's writes 44-96 ms against 131-198, the whole export 0.873x the wall (16 rounds;
two identical trees came out 1.030x apart); 10 M events, 0.958x (1.012x), 0.45 s less system CPU; to Perfetto (71
MB, of which 64 MB kept let nothing go), 0.99x (1.046x).
"""

from __future__ import annotations

import os
from typing import IO, Any, Callable, Dict, Optional

from npu_trace.export.direct import DirectFile

KEPT = 16 << 20  # the bytes written last, left in the page cache
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None)  # not on every system (macOS): nothing let go there
DIRECT = True  # a file written direct where it can be (the tests turn it off to test the other way)


class Output:
    """See the module docstring."""

    def __init__(self, send: Callable[[Any], Any], counts: Dict[str, int], stream: IO[Any]) -> None:
        self._send = send
        self.counts = counts
        self.buffer = bytearray()
        self._file = stream
        self._stream: Optional[IO[Any]] = stream if _DONTNEED is not None else None
        self._written = 0  # bytes given to the stream
        self._let_go = 0  # the file's bytes before this were let go (or are being written back)
        self._begun = 0  # those before this were let go by the call before the last
        self._direct: Optional[DirectFile] = None
        self._decided = False  # whether the file is written direct

    def write(self, data: Any) -> None:
        direct = self._direct_file()
        if direct is not None:
            direct.write(data)
            self.counts["bytes"] += len(data)
            return
        self._send(data)
        self.counts["bytes"] += len(data)
        self._written += len(data)
        if self._written - self._let_go >= 2 * KEPT:
            self._let_go_behind()

    def assembled(self, run: Callable[[Any, int], int]) -> None:
        direct = self._direct_file()
        if direct is not None:
            self.counts["bytes"] += direct.assembled(run)
            return
        size = run(self.buffer, 0)  # it may grow the buffer: no view of it may be held meanwhile
        self.write(memoryview(self.buffer)[:size])

    def close(self) -> None:
        """What is left written (a file written direct: its last bytes; its write's error raised here)."""
        if self._direct is not None:
            direct, self._direct = self._direct, None
            direct.close()

    def _direct_file(self) -> Optional[DirectFile]:
        if not self._decided:
            self._decided = True
            self._direct = DirectFile.of(self._file) if DIRECT else None
        return self._direct

    def _let_go_behind(self) -> None:
        """The file's pages but the last KEPT bytes' let go (a stream without a file, or one whose pages cannot
        be let go: nothing, from then on)."""
        upto = self._written - KEPT
        try:  # from where the call before began: what it started writing back is let go now
            os.posix_fadvise(self._stream.fileno(), self._begun, upto - self._begun, _DONTNEED)  # type: ignore[union-attr,arg-type]
        except (AttributeError, OSError, ValueError):  # no stream, no file (io.UnsupportedOperation is both)
            self._stream = None
            self._let_go = 1 << 62
            return
        self._begun, self._let_go = self._let_go, upto
