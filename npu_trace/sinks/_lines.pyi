# The compiled assembly of text lines (_lines.c); npu_trace.sinks.text wraps it.
from typing import Any, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def render(parts: Tuple[Any, ...], n: int) -> Tuple[bytes, bytes]: ...
def render_into(out: bytearray, parts: Tuple[Any, ...], n: int) -> int: ...
def interleave(chunks: Tuple[bytes, ...], offsets: Tuple[bytes, ...], which: Buffer, index: Buffer) -> bytes: ...
