# The compiled distinct strings (_texts.c); npu_trace.export.texts wraps it.
from typing import Any, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def distinct(bufs: Tuple[Buffer, ...], buf: Buffer, start: Buffer, length: Buffer, groups: Buffer) -> bytes: ...
