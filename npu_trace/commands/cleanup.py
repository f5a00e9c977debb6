"""`npu-trace cleanup`: remove what crashed or killed runs left in the kernel."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from npu_trace import sim
from npu_trace.errors import SourceError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import hal_install
from npu_trace.sources.driver_switches import restore_stale
from npu_trace.sources.tracefs_source import cleanup_stale


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cleanup",
        help="remove tracefs instances and restore driver trace switches left by dead npu-trace runs (and, with "
        "--sim, the simulator's probes)",
        description="Remove npu-trace-<pid> tracefs instances whose process is gone, and put the Ascend driver's "
        "trace switches (/proc/trs_*/.../trace_enable) a killed run turned on back to what they were. Every session "
        "also does this when it starts. With --sim, also unload the simulated NPU's uprobe events.",
    )
    p.add_argument("--sim", action="store_true", help="also unload the simulator (ascend/* uprobe events, and the "
                   "real-ABI libascend_hal.so sim load --hal-abi real installed)")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fs = Tracefs.find()
    removed = cleanup_stale(fs)
    for name in removed:
        print(f"removed tracefs instance {name}", file=sys.stderr)
    switches, problems = restore_stale()
    for line in switches + problems:
        print(line, file=sys.stderr)
    if args.sim:
        n = sim.unload(fs)
        print(f"unloaded the simulator ({n} uprobe events)", file=sys.stderr)
        lib = hal_install.uninstall()
        if lib:
            print(f"removed the simulator's real-ABI HAL {lib}", file=sys.stderr)
    elif sim.is_loaded(fs) or hal_install.installed() is not None:
        print("the simulator is loaded (npu-trace sim unload, or cleanup --sim, removes it)", file=sys.stderr)
    if not removed and not switches and not problems and not args.sim:
        print("nothing to clean", file=sys.stderr)
    if problems:
        raise SourceError(f"{len(problems)} driver trace switches could not be put back (see above)")
    return 0
