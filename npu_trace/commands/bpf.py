"""`npu-trace bpf`: HAL call latencies and IRQ handler durations measured in the kernel by eBPF (bcc), printed
as text or NDJSON; losses (ring buffer reserve failures, perf lost samples) and, with --aggregate, the log2
latency histograms on stderr."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Dict, Optional, Tuple

from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource, BpfStream
from npu_trace.commands.session_text import note
from npu_trace.commands.trace_options import add_chip_option, add_scope_options
from npu_trace.errors import UsageError
from npu_trace.events import Loss
from npu_trace.pipeline import Batch, Sink, pump
from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.process import prepare_process
from npu_trace.sinks.text import StreamPrinter, printing
from npu_trace.sources.comm import CommCache
from npu_trace.sources.options import TraceOptions, processes

POLL_S = 0.01  # drain interval: the kernel side never wakes the reader per event
READ_BYTES = 256 << 10  # per read: small batches stay in the CPU caches (decoded about twice as fast)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bpf", help="measure HAL calls and IRQs in the kernel with eBPF (bcc)", description=__doc__)
    p.add_argument("--hal", "--bpf-binary", metavar="PATH", dest="bpf_binary",
                   help="the HAL library (libascend_hal.so) or a binary with its symbols (default: the simulator)")
    p.add_argument("--hal-abi", choices=("real", "sim"),
                   help="read the HAL's arguments so (default: each file's own; docs/hal-abi.md)")  # fmt: skip
    p.add_argument("--no-hal", action="store_true", help="no HAL uprobes")
    p.add_argument("--irq", action="append", default=[], metavar="NAME", help="trace IRQs whose name starts so")
    p.add_argument("--irq-num", action="append", type=int, default=[], metavar="N", help="trace IRQ number N")
    p.add_argument("--kprobe", action="append", default=[], metavar="SYM", help="driver symbol (needs kprobes)")
    add_scope_options(p)
    p.add_argument("--threshold-us", type=float, default=0.0, help="emit only calls at least this slow")
    p.add_argument("--aggregate", action="store_true", help="kernel histograms; events only above the threshold")
    p.add_argument("--perf-buffer", action="store_true", help="perf buffer instead of the ring buffer (< 5.8)")
    p.add_argument("--compat", metavar="X.Y",
                   help="load the programs' variant for kernel X.Y (4.14, 4.19: bpf_probe_read and a perf buffer) "
                   "instead of the running kernel's (doctor says which that is)")  # fmt: skip
    add_chip_option(p)
    p.add_argument("--ringbuf-pages", type=int, default=256, metavar="N", help="ring buffer pages (power of 2)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--format", choices=("text", "ndjson"), default="text")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> BpfConfig:
    """The BPF configuration, its scope checked as `stream`'s is (npu_trace.sources.options.TraceOptions)."""
    if args.duration is not None and not 0 < args.duration < math.inf:  # NaN too
        raise UsageError("--duration must be positive")
    scope = TraceOptions(pids=processes(args.pid or ()), comms=tuple(args.comm or ()),
                         devices=tuple(args.device or ()), profile_name="ascend", chip=args.chip)  # fmt: skip
    binary = args.bpf_binary
    if binary is None and not args.no_hal:
        from npu_trace.sim import build

        binary = build.ensure_built()
    irq = bool(args.irq or args.irq_num)
    return BpfConfig(
        binary=binary, hal_abi=args.hal_abi, hal=not args.no_hal, irq=irq, irq_names=tuple(args.irq),
        irq_numbers=tuple(args.irq_num),
        kprobes=tuple(args.kprobe), pids=scope.pids, comms=scope.comms, devs=scope.devices,
        threshold_ns=int(args.threshold_us * 1000),
        aggregate=args.aggregate, ringbuf_pages=args.ringbuf_pages, perf_buffer=args.perf_buffer,
        compat=args.compat, task_layout=task_layout(scope, args.bpf_binary),
    )  # fmt: skip


def task_layout(scope: TraceOptions, library: Optional[str]) -> str:
    """The chip's task layout for --hal's library (said when it is there); the simulator's executor (no --hal)
    takes its ids in registers."""
    if library is None:
        return "unknown"
    return scope.task_layout(note if os.path.isfile(library) else None)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    printer = StreamPrinter(sys.stdout, args.format, CommCache(dict))
    with BpfSource(config) as bpf:
        stop = prepare_process()  # after the checks: an error leaves the process as it was
        variant = f" ({bpf.variant.describe()})" if bpf.variant else ""
        print(f"npu-trace: BPF programs attached{variant}; Ctrl-C stops", file=sys.stderr, flush=True)
        source = BpfStream(bpf, READ_BYTES)
        timeline = BlockTimeline(None, {}, {}, ledger=source.ledger)  # the channels' stream only: no pages
        counted = Counted(printing(timeline, printer))
        pump(source, counted, duration=args.duration, stop=stop, poll_s=POLL_S)
        hists = bpf.histograms()
    print_histograms(hists)
    print(f"npu-trace: {counted.events} BPF events; {source.ledger.summary()}", file=sys.stderr)
    return 0


class Counted:
    """A sink that counts the events (not the losses) of the batches it passes on."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.events = 0

    def __call__(self, batch: Batch) -> None:
        self.events += sum(1 for item in batch.events if not isinstance(item, Loss))
        self.sink(batch)


def print_histograms(hists: Dict[Tuple[int, str], Dict[int, int]]) -> None:
    for (dev, op), slots in sorted(hists.items()):
        total = sum(slots.values())
        print(f"dev {dev} {op}: {total} calls", file=sys.stderr)
        for slot, count in sorted(slots.items()):
            print(f"  [{1 << slot:>12} ns, {1 << (slot + 1):>12} ns)  {count}", file=sys.stderr)
