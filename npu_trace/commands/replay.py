"""`npu-trace replay FILE`: a recording through the same decode path as live tracing, as text or NDJSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from npu_trace.commands.stream import printing
from npu_trace.device.profiles import PROFILES
from npu_trace.errors import UsageError
from npu_trace.pipeline import pump
from npu_trace.pipeline.scope import RawScope
from npu_trace.process import prepare_process
from npu_trace.sinks.text import StreamPrinter
from npu_trace.sources.replay_source import ReplaySource


def add_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay a recorded session (TUI, or --headless)",
                       description="Decode a recording with the formats it carries and print its events, at the "
                       "recorded pace (--speed) or as fast as possible (--max).")  # fmt: skip
    p.add_argument("file", help="session file (.npt)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=None, metavar="N", help="N x the recorded pace (default 1)")
    pace.add_argument("--max", action="store_true", help="as fast as possible")
    p.add_argument("--format", choices=("text", "ndjson"), default="text", help="--headless output format")
    p.add_argument("--headless", action="store_true", help="print the events instead of opening the TUI")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.speed is not None and args.speed <= 0:
        raise UsageError("--speed must be positive")
    if not args.headless:
        from npu_trace.commands.live import tui_entry  # the TUI, imported lazily (npu_trace stays headless)

        return tui_entry("run_replay")(args)
    speed = None if args.max else (args.speed or 1.0)
    source = ReplaySource(args.file, speed=speed)
    printer = StreamPrinter(sys.stdout, args.format, source.comm, source.reader.kernel_text())
    stop = prepare_process()
    pump(source, printing(source.timeline(), printer, replay_scope(source)), stop=stop)
    print_replay_summary(source, printer.unformatted)
    return 0


def replay_scope(source: ReplaySource) -> Optional[RawScope]:
    """The recording's scope over the items printed, as `stream` applied it live (None: nothing to apply)."""
    scope = source.scope_filter()
    profile = PROFILES.get(str(source.header.get("profile", "")))
    return RawScope(scope, profile.mapping) if scope.active and profile is not None else None


def print_replay_summary(source: ReplaySource, unformatted: int = 0) -> None:
    reader = source.reader
    cut = f"; the file is cut: {reader.truncation}" if reader.truncated else ""
    more = f", and {source.channel_events_read} from other channels" if source.channel_events_read else ""
    print(f"npu-trace: replayed {source.events_read} events from {source.pages_read} pages{more}"
          f"{unformatted_summary(unformatted)}; {source.ledger.summary()}{cut}", file=sys.stderr)  # fmt: skip


def unformatted_summary(unformatted: int) -> str:
    """ ", 3 of them shown by their fields (their text could not be made)" for a summary line; "" for none."""
    if not unformatted:
        return ""
    return f", {unformatted} of them shown by their fields (their text could not be made: npu_trace.ftrace.special)"
