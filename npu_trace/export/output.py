"""Where a writer's bytes go, in the order they are written.

`Output(send, counts)`: `write(data)` writes bytes or text; `assembled(run)` writes what `run(buffer)` lays out
in the output's own buffer (npu_trace.export.wire.assemble: how many bytes), the buffer kept from one block to
the next. Both write at once (where the drawing runs: the export's drawing process, npu_trace.export.apart).
`send` is the stream's write; `counts["bytes"]` counts what is written.
"""

from __future__ import annotations

from typing import Any, Callable, Dict


class Output:
    """See the module docstring."""

    def __init__(self, send: Callable[[Any], Any], counts: Dict[str, int]) -> None:
        self._send = send
        self.counts = counts
        self.buffer = bytearray()

    def write(self, data: Any) -> None:
        self._send(data)
        self.counts["bytes"] += len(data)

    def assembled(self, run: Callable[[bytearray], int]) -> None:
        size = run(self.buffer)  # it may grow the buffer: no view of it may be held meanwhile
        self.write(memoryview(self.buffer)[:size])
