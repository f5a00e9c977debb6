"""`npu-trace stream`: decoded kernel events on stdout (text or NDJSON), a loss summary on stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional, Tuple

from npu_trace.bpf.config import BpfConfig
from npu_trace.device.profiles import get_profile
from npu_trace.errors import UsageError
from npu_trace.ftrace.tracefs import Tracefs, find_optional
from npu_trace.pipeline import Batch, Sink, Timeline, pump
from npu_trace.process import prepare_process
from npu_trace.sinks.text import StreamPrinter
from npu_trace.sources.channels import CHANNELS, DEFAULT_HEALTH_INTERVAL_S, Channels, parse_channels
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.live import LiveTrace
from npu_trace.sources.tracefs_source import DEFAULT_BUFFER_KB, TracefsSession


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "stream",
        help="print decoded kernel events (text or NDJSON)",
        description="Trace on a private tracefs instance and print every decoded event.",
    )
    add_trace_options(p)
    p.add_argument("--format", choices=("text", "ndjson"), default="text", help="output format (default text)")
    p.set_defaults(func=run)


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
    p.add_argument("--bpf", action="store_true",
                   help="also measure in the kernel with eBPF: HAL call latencies (uprobes on --bpf-binary) and the "
                   "profile's IRQ handlers; replaces the profile's ftrace events for the same calls")  # fmt: skip
    p.add_argument("--bpf-binary", metavar="PATH",
                   help="library or binary with the HAL symbols (libascend_hal.so; default for the sim profile: "
                   "the simulator)")  # fmt: skip
    p.add_argument(
        "--buffer-kb",
        type=int,
        default=DEFAULT_BUFFER_KB,
        metavar="KB",
        help=f"ring buffer per CPU (default {DEFAULT_BUFFER_KB})",
    )


def session_from_args(args: argparse.Namespace, fs: Optional[Tracefs] = None) -> TracefsSession:
    """Checks the arguments (before anything touches the kernel) and builds the session."""
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.buffer_kb <= 0:
        raise UsageError("--buffer-kb must be positive")
    profile = get_profile(args.profile)
    optional = () if args.events else profile.events
    names = channel_names(args)
    return TracefsSession(
        args.events,
        optional=optional,
        missing_hint=profile.hint,
        fs=fs,
        buffer_kb=args.buffer_kb,
        layouts=profile.layouts,
        allow_none=bool(names) and not args.events and not profile.require_events,  # the channels still run
        exclude=profile.bpf_replaces if getattr(args, "bpf", False) and not args.events else (),
    )


def channel_names(args: argparse.Namespace) -> List[str]:
    """The channels asked for: --channels, else the profile's."""
    given = getattr(args, "channels", None)
    if given is None:
        return list(get_profile(args.profile).channels)
    return parse_channels(given)


def channels_from_args(args: argparse.Namespace) -> Optional[Channels]:
    """The other channels to run beside the session (not opened yet), or None; their notes go to stderr."""
    names = channel_names(args)
    if getattr(args, "health_interval", DEFAULT_HEALTH_INTERVAL_S) <= 0:
        raise UsageError("--health-interval must be positive")
    bpf = bpf_config_from_args(args)
    if not names and bpf is None:
        return None
    return Channels(names, npu_smi=getattr(args, "npu_smi", "npu-smi"),
                    health_interval_s=getattr(args, "health_interval", DEFAULT_HEALTH_INTERVAL_S),
                    on_note=lambda text: print(f"npu-trace: {text}", file=sys.stderr, flush=True),
                    bpf=bpf, mapping=get_profile(args.profile).mapping)  # fmt: skip


def bpf_config_from_args(args: argparse.Namespace) -> Optional[BpfConfig]:
    """--bpf: HAL uprobes on --bpf-binary (the simulator for the sim profile) and the profile's IRQ names."""
    if not getattr(args, "bpf", False):
        if getattr(args, "bpf_binary", None):
            raise UsageError("--bpf-binary needs --bpf")
        return None
    profile = get_profile(args.profile)
    binary = args.bpf_binary
    if binary is None and profile.name == "sim":
        from npu_trace.sim import build

        binary = build.ensure_built()
    if binary is None and not profile.bpf_irq_prefixes:
        raise UsageError(f"--bpf with the {profile.name} profile needs --bpf-binary PATH (the HAL library)")
    tracepoints = present_tracepoints(profile.bpf_tracepoints)
    return BpfConfig(binary=binary, hal=binary is not None, irq=bool(profile.bpf_irq_prefixes),
                     irq_names=profile.bpf_irq_prefixes, tracepoints=tracepoints)  # fmt: skip


def present_tracepoints(wanted: Tuple[str, ...]) -> Tuple[str, ...]:
    """The profile's BPF tracepoints that exist here; the absent ones are named once on stderr."""
    if not wanted:
        return ()
    fs = find_optional()
    available = set(fs.available_events()) if fs is not None else set()
    absent = [tp for tp in wanted if tp not in available]
    if absent:
        print(f"npu-trace: --bpf: not on this host: {', '.join(absent)} (the driver is not loaded)", file=sys.stderr)
    return tuple(tp for tp in wanted if tp in available)


def announce(session: TracefsSession, doing: str = "", channels: Optional[Channels] = None) -> None:
    what = f"; {doing}" if doing else ""
    if session.unmatched and not session.selected:
        print(f"npu-trace: none of the profile's events exists here ({', '.join(session.unmatched)}): "
              "tracing trace markers and the other channels only", file=sys.stderr)  # fmt: skip
    elif session.unmatched:
        print(f"npu-trace: not on this host: {', '.join(session.unmatched)}", file=sys.stderr)
    also = f" with {', '.join(channels.running)}" if channels is not None and channels.running else ""
    print(
        f"npu-trace: tracing {len(session.selected)} event types on tracefs instance {session.name} "
        f"(clock {session.clock}){also}{what}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )


def print_summary(session: TracefsSession, printed: int, channels: Optional[Channels] = None) -> None:
    err = sys.stderr
    extra = f", {session.malformed} malformed" if session.malformed else ""
    more = channel_summary(channels)
    print(
        f"npu-trace: {printed} events from {len(session.selected)} event types{extra}{more}; "
        f"{session.ledger.summary()}",
        file=err,
    )


def channel_summary(channels: Optional[Channels]) -> str:
    """ ", and 12 from kmsg, uevent (3 lost)" for a summary line; "" without channels."""
    if channels is None or not channels.running:
        return ""
    lost = f" ({channels.lost} lost)" if channels.lost else ""
    return f", and {channels.events_read} from {', '.join(channels.running)}{lost}"


def terminal_printer(session: TracefsSession, fmt: str) -> StreamPrinter:
    """Prints to stdout; pids are named from /proc, or the session's saved_cmdlines for exited processes."""
    return StreamPrinter(sys.stdout, fmt, CommCache(lambda: saved_comms(session.fs)))


def printing(timeline: Timeline, printer: StreamPrinter) -> Sink:
    """A pump sink: each batch through the timeline, what it releases (in time order) printed."""

    def sink(batch: Batch) -> None:
        items = timeline.push(batch)
        if items:
            printer.write_batch(items)

    return sink


def run(args: argparse.Namespace) -> int:
    session = session_from_args(args)
    channels = channels_from_args(args)
    printer = terminal_printer(session, args.format)
    stop = prepare_process()
    with LiveTrace(session, channels) as source:
        announce(session, channels=channels)
        timeline = source.timeline()
        pump(source, printing(timeline, printer), duration=args.duration, stop=stop)
    print_summary(session, timeline.events, channels)
    return 0
