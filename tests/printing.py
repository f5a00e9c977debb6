"""Text and NDJSON two ways, for the tests that hold them equal: the production printer over blocks
(`npu_trace.sinks.text.StreamPrinter.write_block`) and the reference over the same items one object at a time
(tests/reference/text.py)."""

from __future__ import annotations

import io
from typing import Any, Callable, Iterable, Sequence

from npu_trace.pipeline.blocks import Block
from npu_trace.sinks.text import StreamPrinter
from reference.text import StreamPrinter as ReferencePrinter

CommOf = Callable[[int], str]


def comm_of(pid: int) -> str:
    """Names that need escaping in both forms (a tab, a quote, a %, a NUL), one per pid."""
    return ["py\tthon", 'q"u\\o%te', "\u00e9\x00", "npu_sim"][pid % 4]


def reference(items: Sequence[Any], fmt: str, comms: CommOf = comm_of) -> str:
    out = io.StringIO()
    ReferencePrinter(out, fmt, comms).write_batch(list(items))
    return out.getvalue()


def production(blocks: Iterable[Block], fmt: str, comms: CommOf = comm_of) -> str:
    """The blocks' lines, the compiled assembly's and the pure-Python path's (held equal here)."""
    outs = []
    blocks = list(blocks)
    for compiled in (True, False):
        out = io.StringIO()
        printer = StreamPrinter(out, fmt, comms, compiled=compiled)
        for block in blocks:
            printer.write_block(block)
        outs.append(out.getvalue())
    assert outs[0] == outs[1]
    return outs[0]
