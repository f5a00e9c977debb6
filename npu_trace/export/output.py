"""Where a writer's bytes go, in the order they are written: at once, or, given a lane
(npu_trace.export.overlap), in that lane's thread, beside the drawing of what comes next (the assembler's byte
loop and the file's writes let go of the interpreter's lock).

`Output(send, counts)`: `write(data)` writes bytes or text the caller does not change after (a view into a
buffer the caller reuses is copied when it is written later); `assembled(run)` writes what `run(buffer)` lays
out in the output's own buffer (npu_trace.export.wire.assemble: how many bytes), so that the assembly itself
runs in the lane; `wait()` returns once everything given is written (an error in the lane raised here, as the
caller's). `send` is the stream's write; `counts["bytes"]` counts what is written, in the thread that writes it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from npu_trace.export.overlap import Overlap


class Output:
    """See the module docstring."""

    def __init__(self, send: Callable[[Any], Any], counts: Dict[str, int]) -> None:
        self._send = send
        self.counts = counts
        self.lane: Optional[Overlap] = None  # set by the exporter (npu_trace.export.run)
        self.buffer = bytearray()

    def write(self, data: Any) -> None:
        if self.lane is None:
            self._write(data)
            return
        kept = data if isinstance(data, (bytes, str)) else bytes(data)
        self.lane.submit(lambda: self._write(kept))

    def assembled(self, run: Callable[[bytearray], int]) -> None:
        if self.lane is None:
            self._assembled(run)
        else:
            self.lane.submit(lambda: self._assembled(run))

    def wait(self) -> None:
        if self.lane is not None:
            self.lane.wait()

    def _assembled(self, run: Callable[[bytearray], int]) -> None:
        size = run(self.buffer)  # it may grow the buffer: no view of it may be held meanwhile
        self._write(memoryview(self.buffer)[:size])

    def _write(self, data: Any) -> None:
        self._send(data)
        self.counts["bytes"] += len(data)
