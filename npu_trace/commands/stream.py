"""`npu-trace stream`: decoded kernel events on stdout (text or NDJSON), a loss summary on stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from npu_trace.errors import SourceError, UsageError
from npu_trace.profiles import get_profile
from npu_trace.runner import prepare_process, pump
from npu_trace.sinks.text import StreamPrinter
from npu_trace.sources.comm import CommCache
from npu_trace.sources.tracefs_source import DEFAULT_BUFFER_KB, TracefsSession
from npu_trace.tracefs import Tracefs


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
    return TracefsSession(
        args.events,
        optional=optional,
        missing_hint=profile.hint,
        fs=fs,
        buffer_kb=args.buffer_kb,
        layouts=profile.layouts,
    )


def announce(session: TracefsSession, doing: str = "") -> None:
    what = f"; {doing}" if doing else ""
    print(
        f"npu-trace: tracing {len(session.selected)} event types on tracefs instance {session.name} "
        f"(clock {session.clock}){what}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )


def print_summary(session: TracefsSession, printed: int) -> None:
    err = sys.stderr
    if session.unmatched:
        print(f"npu-trace: not on this host: {', '.join(session.unmatched)}", file=err)
    extra = f", {session.malformed} malformed" if session.malformed else ""
    print(
        f"npu-trace: {printed} events from {len(session.selected)} event types{extra}; {session.ledger.summary()}",
        file=err,
    )


def terminal_printer(session: TracefsSession, fmt: str) -> StreamPrinter:
    """Prints to stdout; pids are named from /proc, or the session's saved_cmdlines for exited processes."""
    return StreamPrinter(sys.stdout, fmt, CommCache(lambda: _saved_cmdlines(session.fs)))


def run(args: argparse.Namespace) -> int:
    session = session_from_args(args)
    printer = terminal_printer(session, args.format)
    stop = prepare_process()
    with session:
        announce(session)
        pump(session, printer.write_batch, duration=args.duration, stop=stop)
    print_summary(session, session.events_read)
    return 0


def _saved_cmdlines(fs: Optional[Tracefs]) -> str:
    if fs is None:
        return ""
    try:
        return fs.read_text("saved_cmdlines")
    except SourceError:  # display only: an unreadable file means "<...>" names
        return ""
