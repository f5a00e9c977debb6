"""`npu-trace stream`: decoded kernel events on stdout (text or NDJSON), a loss summary on stderr."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Mapping, Optional

from npu_trace.commands.session_text import announce, note, print_summary, terminal_printer
from npu_trace.commands.trace_options import add_trace_options, options_from_args
from npu_trace.pipeline import pump
from npu_trace.pipeline.scope import RawScope, ScopeFilter
from npu_trace.process import prepare_process
from npu_trace.sinks.text import printing
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.tracefs_source import TracefsSession


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "stream",
        help="print decoded kernel events (text or NDJSON)",
        description="Trace on a private tracefs instance and print every decoded event.",
    )
    add_trace_options(p)
    p.add_argument("--format", choices=("text", "ndjson"), default="text", help="output format (default text)")
    p.set_defaults(func=run)


def scope_keeper(
    session: TracefsSession, mapping: Mapping[str, Any], comm_of: Callable[[int], str]
) -> Optional[RawScope]:
    """The pipeline's part of the session's scope over raw items, normalized by the profile's `mapping` to tell
    (None when it has none); after the session started (its scope says what the kernel took)."""
    scope = ScopeFilter(session.scope, comm_of)
    return RawScope(scope, mapping) if scope.active else None


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
