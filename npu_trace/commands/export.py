"""`npu-trace export REC -o OUT`: a recording as a Perfetto trace (ui.perfetto.dev) or Chrome JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict

from npu_trace.errors import EXIT_OK, UsageError
from npu_trace.export.beside import shown
from npu_trace.export.run import FORMATS, Request, export, output_format, parse_devices, parse_time
from npu_trace.process import end_on_termination, tune_gc


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="write a recording as a Perfetto trace or Chrome JSON (a timeline to open "
                       "in ui.perfetto.dev)",
                       description="Per-device tracks: driver calls, tasks (submit -> completion, flows from "
                       "the submitting call), interrupts, memory and health counters, device states, reset "
                       "sequences with their steps, every finding; loss on the tracer's track; the host's context "
                       "when recorded with --host-context (per-CPU ftrace packets in Perfetto, CPU tracks in "
                       "Chrome JSON). The analysis is check's. Exit 2 for an unreadable recording, an unwritable "
                       "output or a bad window.")  # fmt: skip
    p.add_argument("file", help="session file (.npt)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the file to write: .pftrace or .perfetto-trace (Perfetto), .json (Chrome JSON); "
                        "- for the standard output (with --format)")  # fmt: skip
    p.add_argument("--format", choices=FORMATS, help="the output format (default: by OUT's extension)")
    p.add_argument("--from", dest="start", metavar="T",
                   help="start of the window: seconds from the recording's first event (12.5, 500ms), a "
                   "trace-clock timestamp as stream/replay print them (@1012.5), or a wall-clock time with its "
                   "zone (2026-01-01T00:00:12Z)")  # fmt: skip
    p.add_argument("--to", dest="stop", metavar="T", help="end of the window (the same forms as --from)")
    p.add_argument("--devices", action="append", metavar="LIST",
                   help="only these NPU devices (0,2; repeatable); the tracer's loss and markers stay")  # fmt: skip
    p.add_argument("--profile", help="profile to analyze with (default: the recording's)")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary line on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    request = Request(
        recording=args.file, out=args.output, fmt=output_format(args.output, args.format),
        start=parse_time(args.start, "--from") if args.start is not None else None,
        stop=parse_time(args.stop, "--to") if args.stop is not None else None,
        devices=parse_devices(args.devices), profile=args.profile,
    )  # fmt: skip
    start, stop = request.start, request.stop
    if start is not None and stop is not None and start.kind == stop.kind and stop.ns <= start.ns:
        raise UsageError(f"--to {args.stop} is not after --from {args.start}")
    tune_gc()
    end_on_termination()  # SIGTERM, SIGHUP: the file written beside the output removed, as on Ctrl-C
    summary = export(request)
    if not args.quiet:
        print(summary_line(summary), file=sys.stderr)
    return EXIT_OK


def summary_line(s: Dict[str, Any]) -> str:
    w, m = s["written"], s["mapped"]
    lo, hi = s["window"]
    span = f"{(hi - lo) / 1e9:.3f} s" if lo is not None and hi is not None else "?"
    cut = " (the window's end: the rest of the recording was not read)" if s["stopped_at_window_end"] else ""
    unreturned = f", {m['unreturned_calls']} calls without a return drawn to the end" if m["unreturned_calls"] else ""
    host = s.get("host_context")
    if host:
        unreturned += ", the host's context: " + ", ".join(f"{n} {k.split(':')[-1]}" for k, n in sorted(host.items()))
    return (f"npu-trace: exported {span} of {s['events_read']} events read to {shown(s['out'])} ({s['format']}, "
            f"{s['bytes'] / 1e6:.1f} MB{cut}): {m['calls']} calls, {m['tasks']} tasks, {m['irqs']} interrupts, "
            f"{m['resets']} reset sequences, {m['findings']} findings, {w['instants']} instants, "
            f"{w['counters']} counter values, {w['flows']} flows, {w['tracks']} tracks{unreturned}; {s['loss']}"
            f"{s['notes']}")
