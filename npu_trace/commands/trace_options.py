"""The trace options every tracing command shares (`stream`, `record`, `live`, `agent`, `bpf`, the TUI): argparse
options in, checked `TraceOptions` out."""

from __future__ import annotations

import argparse

from npu_trace.device.chips import CHIPS
from npu_trace.sources.host_channels import CHANNELS, DEFAULT_HEALTH_INTERVAL_S
from npu_trace.sources.options import TraceOptions
from npu_trace.sources.tracefs_source import DEFAULT_BUFFER_KB


def add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--events",
        "-e",
        action="append",
        metavar="GLOB",
        default=[],
        help="event glob, e.g. 'ascend_*', 'trs_core:*', 'irq:irq_handler_entry' (repeatable; "
        "replaces the profile's events; each must match)",
    )
    p.add_argument("--profile", default="sim", help="target profile: sim (default) or ascend")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--channels", metavar="LIST",
                   help=f"other channels beside ftrace, comma-separated: {', '.join(CHANNELS)}, or none "
                   "(default: the profile's)")  # fmt: skip
    p.add_argument("--npu-smi", default="npu-smi", metavar="PATH",
                   help="the npu-smi the health channel polls (default: npu-smi on PATH)")  # fmt: skip
    p.add_argument("--health-interval", type=float, default=DEFAULT_HEALTH_INTERVAL_S, metavar="S",
                   help=f"npu-smi/PCIe poll interval (default {DEFAULT_HEALTH_INTERVAL_S:g} s)")  # fmt: skip
    p.add_argument("--app-log", action="append", metavar="PATH",
                   help="an application log (CANN plog, framework output) to follow like tail -F: its driver-level "
                   "errors join the timeline (repeatable)")  # fmt: skip
    p.add_argument("--bpf", action="store_true",
                   help="also measure in the kernel with eBPF: HAL call latencies (uprobes on --bpf-binary) and the "
                   "profile's IRQ handlers; replaces the profile's ftrace events for the same calls")  # fmt: skip
    p.add_argument("--hal", "--bpf-binary", metavar="PATH", dest="bpf_binary",
                   help="the HAL library (libascend_hal.so) or a binary with its symbols, for --bpf (default: the "
                   "one running processes map, seen through /proc/PID/root for containers, else the driver's "
                   "install path; for the sim profile: the simulator)")  # fmt: skip
    p.add_argument("--stacktrace", action="store_true",
                   help="a kernel stack after each event (the private instance's stacktrace option; shown as "
                   "ftrace:kernel_stack, its frames by name: the recording keeps the kernel's symbols)")  # fmt: skip
    add_chip_option(p)
    p.add_argument(
        "--buffer-kb",
        type=int,
        default=DEFAULT_BUFFER_KB,
        metavar="KB",
        help=f"ring buffer per CPU (default {DEFAULT_BUFFER_KB})",
    )
    p.add_argument("--host-context", action="store_true",
                   help="also trace the host's context, host-wide: sched:sched_switch, sched:sched_waking, "
                   "irq:irq_handler_entry/exit, irq:softirq_entry/exit (which thread each CPU ran, wakeups, "
                   "interrupts: `export` shows them as per-CPU tracks and thread states beside the NPU's)")  # fmt: skip
    add_scope_options(p)


def add_chip_option(p: argparse.ArgumentParser) -> None:
    """--chip: the chip whose task layout the real HAL's task calls are read with (npu_trace.device.chips)."""
    p.add_argument("--chip", choices=(*CHIPS, "unknown"),
                   help="the NPU chip, for where the HAL's task calls carry their stream and task ids (default: "
                   "found from the NPU's PCI device id, else npu-smi's model; unknown: those fields left "
                   "empty)")  # fmt: skip


def add_scope_options(p: argparse.ArgumentParser) -> None:
    """--pid, --comm and --device (alias --dev): what a session traces (npu_trace.pipeline.scope)."""
    p.add_argument("--pid", type=int, action="append", metavar="PID",
                   help="only this process: its threads and the tasks it starts while traced (a thread's id "
                   "stands for its process; repeatable)")  # fmt: skip
    p.add_argument("--comm", action="append", metavar="NAME",
                   help="only tasks of this name (the kernel's task name: 15 characters at most, a thread's own "
                   "name; repeatable)")  # fmt: skip
    p.add_argument("--device", "--dev", type=int, action="append", metavar="N", dest="device",
                   help="only NPU device N (events naming no device are left out; --dev is the same; repeatable)")


def options_from_args(args: argparse.Namespace) -> TraceOptions:
    """The trace options, checked (a UsageError before anything touches the kernel); --bpf with the sim
    profile measures the simulator's binary (built if need be)."""
    from npu_trace.bpf.config import HAL_SYMBOLS
    from npu_trace.bpf.source import check_binary  # its symbols read, as the BPF source reads them
    from npu_trace.sim import build

    options = TraceOptions.from_args(args, sim_binary=build.ensure_built)
    for path in (options.bpf_binary, *options.hal_more) if options.bpf else ():
        if path is not None:  # said before a tracefs instance is made, not after
            check_binary(path, HAL_SYMBOLS)
    return options
