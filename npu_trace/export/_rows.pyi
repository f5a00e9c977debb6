# The compiled pieces' rows (_rows.c); npu_trace.export.rows wraps it.
from typing import Any, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def fill(out: Buffer, width: int, where: Buffer, cols: Tuple[Union[int, Buffer], ...]) -> None: ...
def dense(values: Buffer, low: int, span: int, codes: Buffer, firsts: Buffer) -> int: ...
