"""`npu-trace check FILE`: the detectors over a recording, judged by rules; exit 0 pass, 1 violations."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from npu_trace.ci.analyze import analyze, op_rows, p99_by_op
from npu_trace.ci.report import build_report, render_json, render_junit, render_text
from npu_trace.ci.rules import evaluate, load_rules
from npu_trace.errors import EXIT_OK, EXIT_VIOLATIONS, InputError
from npu_trace.process import tune_gc


def add_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="run the detectors on a recording and judge them by rules (CI gate)",
                       description="Exit 0 when every rule holds, 1 with violations, 2 for unreadable input or a "
                       "bad rules file. Without --rules: no reset sequence, no timeout, no allocation failure, "
                       "no loss; spikes are reported but allowed.")  # fmt: skip
    p.add_argument("file", help="session file (.npt)")
    p.add_argument("--rules", metavar="RULES.toml", help="rules file (default: the CI-gate defaults)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report to OUT")
    p.add_argument("--junit", metavar="OUT", help="write a JUnit XML report to OUT")
    p.add_argument("--profile", help="profile to analyze with (default: the recording's)")
    p.add_argument("--quiet", "-q", action="store_true", help="no text report on stdout")
    p.add_argument("--reference", action="store_true",
                   help="analyse with the pure-Python reference path (an object per event: slower, same report)")
    p.set_defaults(func=run)


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    rules = load_rules(args.rules)  # a bad rules file fails before the (long) read
    tune_gc()  # millions of short-lived tuples: see npu_trace.process.tune_gc
    result = analyze(args.file, args.profile, reference=args.reference)
    analysis, reading = result["analysis"], result["reading"]
    analysis["summary"]["latency_by_op"] = op_rows(result["latency"])
    violations = evaluate(rules, analysis["findings"], p99_by_op(result["latency"]), reading["lost"],
                          reading["incomplete"], analysis["summary"]["health"]["devices"])  # fmt: skip
    report = build_report(os.path.basename(args.file), analysis, rules, violations, reading)
    if args.json:
        _write(args.json, render_json(report))
    if args.junit:
        _write(args.junit, render_junit(report, rules))
    if not args.quiet:
        sys.stdout.write(render_text(report))
    return EXIT_VIOLATIONS if violations else EXIT_OK
