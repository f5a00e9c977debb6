"""The simulator's uprobe events held enabled, for a test module's sessions to start and end quickly.

The kernel registers a uprobe when the first tracefs instance enables its event, and when the last one disables it
it unregisters it and waits for the readers of the old probe to finish: 0.7-0.8 s for the simulator's 16 events on
this kind of machine, paid inside the rmdir of every session that stops (`record`, `stream`, the agent...), one after
another on the suite's serial path. While another instance keeps them enabled, a session's own enable and removal
only link and unlink its buffer (0.03 s). The holder is an instance with tracing off (nothing is written to it),
named outside `npu-trace-*` so that no cleanup of the product takes it for a stale session; the product's code
runs as it does anywhere, only the kernel's last-user work is left to the holder's removal. Holders left by a
killed run (their pid gone) are removed by the next one.
"""

from __future__ import annotations

import os
import re
from typing import Any

PREFIX = "npt-tests-hold-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)$")


def hold(fs: Any, group: str) -> str:
    """An instance of ours with every event of `group` enabled and tracing off; returns its name."""
    for name in fs.instance_names():
        m = _NAME.match(name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            release(fs, name)
    name = f"{PREFIX}{os.getpid()}"
    root = fs.path(f"instances/{name}")
    os.mkdir(root)
    try:
        _write(os.path.join(root, "tracing_on"), "0")
        _write(os.path.join(root, "events", group, "enable"), "1")
    except OSError:
        release(fs, name)
        raise
    return name


def release(fs: Any, name: str) -> None:
    os.rmdir(fs.path(f"instances/{name}"))


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
