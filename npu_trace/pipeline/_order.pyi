# The compiled counting sort and previous rows (_order.c); npu_trace.pipeline.order wraps them.
from typing import Any, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def counting_order(key: Buffer, low: int, span: int, out: Buffer) -> None: ...
def previous(key: Buffer, prev: Buffer, last: Buffer) -> int: ...
