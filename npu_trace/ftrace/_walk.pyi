# The compiled page walker (_walk.c); npu_trace.ftrace.walk wraps it.
from typing import Any, List, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

REASONS: Tuple[str, ...]  # why a page or a record is malformed (npu_trace.ftrace.framing.MALFORMED)

def walk(
    buf: Buffer,
    pages: Buffer,
    layout: Tuple[int, int, int],
    last_ts_hi: int,
    last_ts_lo: int,
    table: Buffer,
    big: bool,
    per_page: bool = False,
) -> Tuple[
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    List[Tuple[int, int, int, int, int, int]],
    Tuple[int, int, int, int, int, int],
    Union[bytes, None],
]: ...
def gather(buf: Buffer, offsets: Buffer, size: int) -> bytes: ...
def gather_rows(bufs: Tuple[Buffer, ...], which: Buffer, offsets: Buffer, size: int) -> bytes: ...
