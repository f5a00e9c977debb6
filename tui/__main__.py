"""`python -m tui ARGS`: the same as `npu-trace ARGS` (live, demo and replay open the TUI)."""

from __future__ import annotations

import sys

from npu_trace.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["live"]))
