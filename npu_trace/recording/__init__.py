"""Recordings (`.npt`): raw ftrace pages in self-contained chunks, with everything needed to decode them later.

See docs/recording-format.md for the on-disk layout.
"""

from __future__ import annotations

from npu_trace.recording.reader import RecordingReader, open_decoder
from npu_trace.recording.schema import MAGIC, SCHEMA_VERSION, SUPPORTED_SCHEMAS, Chunk
from npu_trace.recording.writer import RecordingWriter, build_header, clock_anchor

__all__ = [
    "MAGIC",
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMAS",
    "Chunk",
    "RecordingReader",
    "RecordingWriter",
    "build_header",
    "clock_anchor",
    "open_decoder",
]
