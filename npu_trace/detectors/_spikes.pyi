# The compiled scan of a run of latency samples (_spikes.c); npu_trace.detectors.latency wraps it.
from typing import Any, Optional, Tuple, Union

import numpy as np
from typing_extensions import Buffer as _Bytes

Buffer = Union[_Bytes, np.ndarray[Any, Any]]  # anything with the buffer protocol, C-contiguous

def scan(lat: Buffer, window: Buffer, seen: int, baseline: int, has_baseline: bool, w: int, refresh: int,
         warmup: int, floor: int, k_int: int, k_float: float, k_is_int: bool, absolute: int, has_absolute: bool,
         adaptive_on: bool, spike_at: Buffer, spike_adaptive: Buffer, spike_baseline: Buffer, spike_flags: Buffer,
         tail: Buffer) -> Tuple[int, int, Optional[int], int]: ...
