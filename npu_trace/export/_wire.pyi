# The compiled byte assembler (_wire.c); npu_trace.export.wire wraps it.
from typing import Any, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def assemble(
    prog: Buffer,
    starts: Buffer,
    which: Buffer,
    cols: Buffer,
    ncols: int,
    consts: Tuple[bytes, ...],
    tables: Tuple[Tuple[bytes, ...], ...],
    out: _Bytes,
    at: int = 0,
) -> int: ...
