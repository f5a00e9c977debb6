"""`npu-trace cluster INPUT...`: many hosts' recordings on one timeline; a `cluster_incident` per incident, its
origin (the card that failed first: evidence first, time only among equals) and its consequences; exit 0 when
there is none, 1 with an incident, 2 for unreadable input.

Inputs: recordings (.npt), directories of them (an agent's spool, `sim cluster`'s DIR: every .npt below), and
`s3://BUCKET/PREFIX` (the dumps agents shipped there, `--from`/`--to` choosing them by their time). With `-o
FILE.pftrace|.json`: one trace, a process group per host (npu_trace.cluster.trace).
"""

from __future__ import annotations

import argparse
from typing import Any, List, Optional

from npu_trace.ci.checking import recordings
from npu_trace.cluster.incidents import Item
from npu_trace.cluster.read import read_all
from npu_trace.cluster.report import build, render_json, render_junit, render_text
from npu_trace.errors import EXIT_OK, EXIT_VIOLATIONS, UsageError
from npu_trace.export.beside import refuse_inputs, write_report
from npu_trace.export.run import TimeSpec, output_format, parse_time
from npu_trace.process import end_on_termination, tune_gc, verdict_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="many hosts' recordings on one timeline: which card failed first, and what "
                       "it took down", description="Read recordings of several hosts (files, directories of "
                       "agents' dumps, imports, s3://BUCKET/PREFIX), align them by each one's wall-clock anchor "
                       "(its clock-sync state as the uncertainty) and report each incident: its origin (a "
                       "driver-level fault outranks a timeout; time decides only among equals) and its "
                       "consequences. Exit 0: no incident; 1: an incident; 2: unreadable input.")  # fmt: skip
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="recordings (.npt), directories, s3://BUCKET/PREFIX")
    p.add_argument("--json", metavar="OUT", help="write the JSON report to OUT")
    p.add_argument("--junit", metavar="OUT", help="write a JUnit XML report to OUT")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="also write one trace of every host: .pftrace (Perfetto) or .json (Chrome JSON)")
    p.add_argument("--from", dest="start", metavar="T",
                   help="only evidence (and s3 dumps) from this wall-clock time on (2026-01-01T00:00:12Z)")
    p.add_argument("--to", dest="stop", metavar="T", help="... up to this wall-clock time")
    p.add_argument("--profile", help="profile to analyze with (default: each recording's)")
    p.add_argument("--jobs", "-j", type=int, metavar="N", help="recordings read at once (default: one per CPU)")
    p.add_argument("--quiet", "-q", action="store_true", help="no text report on stdout")
    p.set_defaults(func=run)


def wall_option(text: Optional[str], option: str) -> Optional[int]:
    if text is None:
        return None
    spec: TimeSpec = parse_time(text, option)
    if spec.kind != "wall":
        raise UsageError(f"{option} {text!r}: a wall-clock time with its zone (2026-01-01T00:00:12Z): the hosts' "
                         "clocks are aligned on wall time")  # fmt: skip
    return spec.ns


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    start, stop = wall_option(args.start, "--from"), wall_option(args.stop, "--to")
    if start is not None and stop is not None and stop <= start:
        raise UsageError(f"--to {args.stop} is not after --from {args.start}")
    fmt = output_format(args.output, None, option=False) if args.output else None
    tune_gc()
    end_on_termination()  # SIGTERM, SIGHUP: the trace's partial file and the fetched inputs removed, as on Ctrl-C
    from npu_trace.cluster.store import Fetched, fetch_inputs

    with Fetched() as fetched:
        paths = recordings(fetch_inputs(args.inputs, fetched, start, stop))
        refuse_inputs([args.output, args.json, args.junit], paths)
        views = read_all(paths, args.profile, args.jobs)
        items = [i for v in views for i in v.items() if _inside(i, start, stop)]
        report = build(views, items)
        if args.output:
            from npu_trace.cluster.trace import write_trace

            assert fmt is not None
            write_trace(views, report, args.output, fmt, args.profile)
    return _emit(args, report)


def _inside(item: Item, start: Optional[int], stop: Optional[int]) -> bool:
    return (start is None or item.at_ns >= start) and (stop is None or item.at_ns <= stop)


def _emit(args: argparse.Namespace, report: Any) -> int:
    if args.json:
        write_report(args.json, render_json(report))
    if args.junit:
        write_report(args.junit, render_junit(report))
    if not args.quiet:
        verdict_text(render_text(report))
    return EXIT_VIOLATIONS if report["findings"] else EXIT_OK


__all__: List[str] = ["add_parser", "run"]
