"""`npu-trace replay FILE`: a recording through the same path as live tracing (its blocks, their text or NDJSON
made from the columns), at its pace or as fast as it reads (--max); or in the TUI."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from typing import Any, Optional

from npu_trace.device.profiles import PROFILES
from npu_trace.errors import UsageError
from npu_trace.pipeline import Batch, pump
from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.pipeline.scope import RawScope
from npu_trace.process import StopFlag, prepare_process
from npu_trace.sinks.text import StreamPrinter, printing, scope_summary, unformatted_summary
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
    if args.speed is not None and not 0 < args.speed < math.inf:  # NaN too: it compares false to every bound
        raise UsageError("--speed must be a positive number")
    if not args.headless:
        from npu_trace.commands.live import tui_entry  # the TUI, imported lazily (npu_trace stays headless)

        header = ReplaySource(args.file).header  # a file that cannot be read is said before the lack of a terminal
        return tui_entry("run_replay")(args, header)
    speed = None if args.max else (args.speed or 1.0)
    source = ReplaySource(args.file, speed=speed)
    printer = StreamPrinter(sys.stdout, args.format, source.comm, source.reader.kernel_text())
    stop = prepare_process()
    keep = replay_scope(source)
    timeline = source.block_timeline(keep_unknown=True)  # every record shown (one no format describes: its bytes)
    if args.max:
        print_all(source, timeline, printer, keep, stop)
    else:
        pump(source, printing(timeline, printer, keep), stop=stop)
    if not stop.stopped:
        print_replay_summary(source, printer, keep)
        return 0
    # a signal stopped it (Ctrl-C): what was printed said, and that the rest was not read; the signal's exit code
    print_replay_summary(source, printer, keep, f"; stopped by {signal.Signals(stop.signal).name} before the end")
    return 128 + stop.signal


# --max prints the released rows in blocks of about this many (a block's text stays in the caches)
PRINT_ROWS = 1 << 15


def print_all(source: ReplaySource, timeline: BlockTimeline, printer: StreamPrinter, keep: Optional[RawScope],
              stop: StopFlag) -> None:  # fmt: skip
    """The whole recording as fast as it reads (--max): each recorded chunk walked in place (`add_chunk`, as
    `check` reads), the released rows printed a block at a time."""
    for part in source.parts():
        if stop.stopped:
            break
        if isinstance(part, Batch):
            timeline.add(part)
        else:
            timeline.add_chunk(part)
        if timeline.pending_rows >= PRINT_ROWS or timeline.ended:
            block = timeline.take()
            printer.write_block(block if keep is None else keep.keep(block))
    block = timeline.flush()
    printer.write_block(block if keep is None else keep.keep(block))


def replay_scope(source: ReplaySource) -> Optional[RawScope]:
    """The recording's scope over the items printed, as `stream` applied it live (None: nothing to apply)."""
    scope = source.scope_filter()
    profile = PROFILES.get(str(source.header.get("profile", "")))
    return RawScope(scope, profile.mapping) if scope.active and profile is not None else None


def print_replay_summary(source: ReplaySource, printer: StreamPrinter, keep: Optional[RawScope] = None,
                         stopped: str = "") -> None:  # fmt: skip
    """What was replayed, on stderr: the records read (every one printed, but what the scope left out), those
    shown by their raw fields, the malformed ones, the other channels' events, the losses."""
    reader = source.reader
    cut = reader.notes()
    more = f", and {source.channel_events_read} from other channels" if source.channel_events_read else ""
    malformed = source.block_timeline().malformed
    bad = f", {malformed} malformed" if malformed else ""
    print(f"npu-trace: replayed {source.events_released} events from {source.pages_read} pages"
          f"{unformatted_summary(printer.unformatted)}{bad}{more}{scope_summary(keep.filter if keep else None)}; "
          f"{source.ledger.summary()}{cut}{stopped}", file=sys.stderr)  # fmt: skip
