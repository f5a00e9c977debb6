"""`npu-trace stream`: decoded kernel events on stdout (text or NDJSON), a loss summary on stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, List, Mapping, Optional

from npu_trace.device.chips import CHIPS
from npu_trace.pipeline import pump
from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.pipeline.scope import RawScope, ScopeFilter
from npu_trace.process import prepare_process
from npu_trace.sinks.text import StreamPrinter, printing, scope_summary, unformatted_summary
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.host_channels import CHANNELS, DEFAULT_HEALTH_INTERVAL_S, Channels
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.options import TraceOptions
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
    from npu_trace.sim import build

    return TraceOptions.from_args(args, sim_binary=build.ensure_built)


def note(text: str) -> None:
    print(f"npu-trace: {text}", file=sys.stderr, flush=True)


def announce(session: TracefsSession, doing: str = "", channels: Optional[Channels] = None,
             say: Optional[Callable[[str], None]] = None) -> None:
    """What the session traces, on stderr (`say`: each line elsewhere, without the "npu-trace: " prefix)."""
    for text in announce_lines(session, doing, channels):
        if say is not None:
            say(text)
        else:
            note(text)


def announce_lines(session: TracefsSession, doing: str = "", channels: Optional[Channels] = None) -> List[str]:
    what = f"; {doing}" if doing else ""
    lines = list(session.notes)
    if not session.scope.empty:
        lines.append(f"scope: {session.scope.where()}")
    if session.unmatched and not session.chosen():
        lines.append(f"none of the profile's events exists here ({', '.join(session.unmatched)}): "
                     "tracing trace markers and the other channels only")  # fmt: skip
    elif session.unmatched:
        lines.append(f"not on this host: {', '.join(session.unmatched)}")
    also = f" with {', '.join(channels.running)}" if channels is not None and channels.running else ""
    tasks = " (and task:task_newtask: which process each new thread belongs to)" if session.traces_new_tasks() else ""
    context = session.context_traced()
    if context:
        tasks += f" and the host's context ({', '.join(e.split(':', 1)[1] for e in context)})"
    lines.append(f"tracing {len(session.chosen())} event types{tasks} on tracefs instance {session.name} "
                 f"(clock {session.clock}){also}{what}; Ctrl-C stops")  # fmt: skip
    if session.instance is not None and session.fs is not None:
        also_top = f" (or to {session.fs.path('trace_marker')}: copied here)" if session.copies_markers else ""
        lines.append(f"trace markers: a line written to {session.marker_path}{also_top} is shown as ftrace:print "
                     "(echo 'text' > that file)")  # fmt: skip
    return lines


def print_summary(session: TracefsSession, timeline: BlockTimeline, printer: StreamPrinter,
                  channels: Optional[Channels] = None, scope: Optional[ScopeFilter] = None) -> None:  # fmt: skip
    """What was traced and shown, on stderr: the events read (every one printed, but what the scope left
    out), those shown by their raw fields, the malformed records, the channels, the losses."""
    extra = f", {timeline.malformed} malformed" if timeline.malformed else ""
    more = channel_summary(channels)
    print(f"npu-trace: {timeline.events} events from {len(session.selected)} event types"
          f"{unformatted_summary(printer.unformatted)}{extra}{more}{scope_summary(scope)}; "
          f"{session.ledger.summary()}", file=sys.stderr)  # fmt: skip


def scope_keeper(
    session: TracefsSession, mapping: Mapping[str, Any], comm_of: Callable[[int], str]
) -> Optional[RawScope]:
    """The pipeline's part of the session's scope over raw items, normalized by the profile's `mapping` to tell
    (None when it has none); after the session started (its scope says what the kernel took)."""
    scope = ScopeFilter(session.scope, comm_of)
    return RawScope(scope, mapping) if scope.active else None


def channel_summary(channels: Optional[Channels]) -> str:
    """ ", and 12 from kmsg, uevent (3 lost)" for a summary line; "" without channels."""
    if channels is None or not channels.running:
        return ""
    lost = f" ({channels.lost} lost)" if channels.lost else ""
    return f", and {channels.events_read} from {', '.join(channels.running)}{lost}"


def terminal_printer(session: TracefsSession, fmt: str) -> StreamPrinter:
    """Prints to stdout; pids are named from /proc, or the session's saved_cmdlines for exited processes."""
    return StreamPrinter(sys.stdout, fmt, CommCache(lambda: saved_comms(session.fs)))


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    session = options.make_session()
    channels = options.make_channels(on_note=note)
    printer = terminal_printer(session, args.format)
    stop = prepare_process()
    with LiveTrace(session, channels) as source:
        announce(session, channels=channels)
        printer.kernel = session.kernel_text()
        keep = scope_keeper(session, options.profile.mapping, printer.comm_of)
        timeline = source.block_timeline(keep_unknown=True)
        pump(source, printing(timeline, printer, keep), duration=options.duration, stop=stop)
    print_summary(session, timeline, printer, channels, keep.filter if keep is not None else None)
    return 0
