"""Where the Ascend HAL library (`libascend_hal.so`) lives on a real host: pure facts and parsers.

The driver package installs it as /usr/local/Ascend/driver/lib64/driver/libascend_hal.so (older packages:
lib64/ itself); a container mounts the host's driver directory or carries its own copy, so the file a traced
process runs is best found in that process's own maps (`/proc/PID/maps`), reached through `/proc/PID/root` for a
process in another mount namespace. The CANN toolkit's `devlib/libascend_hal.so` is a link-time stub, never the
library processes run; it is named, never chosen.
"""

from __future__ import annotations

import os
from typing import List

LIBRARY = "libascend_hal.so"
INSTALL_PATHS = (
    "/usr/local/Ascend/driver/lib64/driver/libascend_hal.so",
    "/usr/local/Ascend/driver/lib64/libascend_hal.so",
    "/usr/lib64/libascend_hal.so",
)
STUB_DIR = "devlib"  # <toolkit>/<arch>-linux/devlib/libascend_hal.so: the toolkit's stub for linking
DELETED = " (deleted)"


def is_hal(path: str) -> bool:
    """A path naming the HAL library (libascend_hal.so, or a versioned libascend_hal.so.N)."""
    name = os.path.basename(path)
    return name == LIBRARY or name.startswith(LIBRARY + ".")


def is_stub(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)) == STUB_DIR


def mapped_paths(maps: str) -> List[str]:
    """The HAL library files a process maps (`/proc/PID/maps` text), each once, in order of appearance. A file
    deleted since it was mapped (an upgraded driver) is left out: a uprobe cannot be set on it by path."""
    out: List[str] = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5]
        if path.endswith(DELETED) or not is_hal(path) or path in out:
            continue
        out.append(path)
    return out
