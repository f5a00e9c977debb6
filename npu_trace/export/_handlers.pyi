# The compiled interrupt handlers' pairing (_handlers.c); npu_trace.export.handlers wraps it.
from typing import Any, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def checks(line: Buffer, entry: Buffer, ok: Buffer, named: Buffer, held: Buffer, max_open: int, bad: Buffer,
           first_named: Buffer, first_exit: Buffer) -> None: ...
def pairs(line: Buffer, entry: Buffer, bad: Buffer, held: Buffer, entries: Buffer, exits: Buffer, held_exits: Buffer,
          opened: Buffer) -> Tuple[int, int, int]: ...
