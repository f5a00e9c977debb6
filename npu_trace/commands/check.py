"""`npu-trace check FILE...`: the detectors over recordings, judged by rules; exit 0 pass, 1 violations.

One recording: its report (text, `--json`, `--junit`). Several, or a directory (every `.npt` below it): each
checked in a worker process (`--jobs`), one line each on stdout, one JUnit file with a test suite per
recording, one JSON summary; a recording that cannot be read is an erroring suite, and the exit is 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from npu_trace.ci.check_report import (
    damage_notes,
    junit_error_suite,
    junit_suite,
    render_json,
    render_junit,
    render_junit_batch,
    render_text,
)
from npu_trace.ci.checking import Outcome, batch_summary, check_many, check_recording, recordings
from npu_trace.detectors.rules import Rules, load_rules
from npu_trace.errors import EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError
from npu_trace.export.beside import refuse_inputs, write_report
from npu_trace.process import tune_gc, verdict_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="run the detectors on recordings and judge them by rules (CI gate)",
                       description="Exit 0 when every rule holds, 1 with violations, 2 for unreadable input or a "
                       "bad rules file. Without --rules: no reset sequence, no timeout, no allocation failure, "
                       "no loss; spikes are reported but allowed. Several files or a directory: checked in "
                       "parallel, one JUnit file (a test suite per recording) and one JSON summary.")  # fmt: skip
    p.add_argument("files", nargs="+", metavar="FILE|DIR", help="session files (.npt), or directories of them")
    p.add_argument("--rules", metavar="RULES.toml", help="rules file (default: the CI-gate defaults)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (several recordings: the summary) to OUT")
    p.add_argument("--junit", metavar="OUT", help="write a JUnit XML report to OUT")
    p.add_argument("--profile", help="profile to analyze with (default: the recording's)")
    p.add_argument("--quiet", "-q", action="store_true", help="no text report on stdout")
    p.add_argument("--jobs", "-j", type=int, metavar="N", help="several recordings: N at once (default: one per CPU)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    rules = load_rules(args.rules)  # a bad rules file fails before the (long) read
    paths = recordings(args.files)
    refuse_inputs([args.json, args.junit], paths)
    if len(paths) == 1 and len(args.files) == 1 and paths[0] == args.files[0]:
        return run_one(args, paths[0], rules)
    return run_many(args, paths, rules)


def run_one(args: argparse.Namespace, path: str, rules: Rules) -> int:
    tune_gc()  # millions of short-lived tuples: see npu_trace.process.tune_gc
    report = check_recording(path, rules, args.profile)
    if args.json:
        write_report(args.json, render_json(report), path)
    if args.junit:
        write_report(args.junit, render_junit(report, rules), path)
    if not args.quiet:
        verdict_text(render_text(report))
    return EXIT_VIOLATIONS if report["violations"] else EXIT_OK


def run_many(args: argparse.Namespace, paths: List[str], rules: Rules) -> int:
    outcomes = check_many(paths, rules, args.profile, args.jobs)
    summary = batch_summary(outcomes, rules)
    if args.json:
        write_report(args.json, render_json(summary), paths[0] if paths else None)
    if args.junit:
        suites = [junit_suite(o.report, rules) if o.report is not None else junit_error_suite(o.name, o.error)
                  for o in outcomes]  # fmt: skip
        write_report(args.junit, render_junit_batch(suites), paths[0] if paths else None)
    if not args.quiet:
        verdict_text("".join(_line(o) for o in outcomes) + _totals(summary))
    for o in outcomes:
        if o.report is None:
            print(f"npu-trace: {o.name}: {o.error}", file=sys.stderr)
    verdict = summary["verdict"]
    return EXIT_USAGE if verdict == "error" else EXIT_VIOLATIONS if verdict == "fail" else EXIT_OK


def _line(o: Outcome) -> str:
    if o.report is None:
        return f"ERROR {o.name}: {o.error}\n"
    r = o.report
    kinds: Dict[str, int] = {}
    for f in r["findings"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    found = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "nothing"
    lines = [f"{r['verdict'].upper()} {o.name}: findings: {found}", *damage_notes(r["reading"])]
    lines += [f"  {v['rule']}: {v['message']}" for v in r["violations"]]
    return "\n".join(lines) + "\n"


def _totals(summary: Any) -> str:
    t = summary["totals"]
    return f"{t['recordings']} recordings: {t['pass']} pass, {t['fail']} fail, {t['error']} error\n"
