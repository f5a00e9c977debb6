# The compiled flow ids (_flows.c); npu_trace.export.tracks wraps it.
from typing import Any, Optional, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def fold(h: Buffer, values: Optional[Buffer], present: Optional[Buffer]) -> None: ...
