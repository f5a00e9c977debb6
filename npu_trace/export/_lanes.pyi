# The compiled lane placement (_lanes.c); npu_trace.export.lanes wraps it.
from typing import Any, List, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def place_many(lanes: List[Any], begins: Buffer, ends: Buffer, out: Buffer, at: int, max_roots: int) -> int: ...
def add_runs(lanes: List[Any], begins: Buffer, ends: Buffer, starts: Buffer, stops: Buffer, max_roots: int) -> None: ...
