"""Compressed data read from a file (a trace.dat's chunks and sections, a recording's chunks), inflated within the
size the file gives it: hostile input never makes more.

python-zstandard sizes its output by the size a frame declares in its header and uses `max_output_size` only for
a frame that declares none: a frame of a few kB declaring hundreds of MB is inflated whole, whatever bound is
given. So the declared size is read first and must be the size expected.
"""

from __future__ import annotations

from typing import Tuple

import zstandard


def unzstd(data: bytes, size: int, what: str, declared: bool = False) -> Tuple[bytes, str]:
    """(one zstd frame inflated: exactly `size` bytes, "") or (b"", why not): corrupt, a frame declaring another
    size than `size` (said as `what`'s: "raw_len says 4096"), or one declaring none when `declared` is required.
    Never more than `size` bytes made."""
    try:
        frame = zstandard.frame_content_size(data)
        if frame != size and (frame != -1 or declared):  # -1: the frame does not declare its size
            said = f"{frame} bytes" if frame != -1 else "no size"
            return b"", f"zstd frame declares {said}, {what} {size}"
        out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except zstandard.ZstdError as exc:
        return b"", f"corrupt zstd data ({exc})"
    if len(out) != size:
        return b"", f"zstd frame holds {len(out)} bytes, {what} {size}"
    return out, ""
