"""`npu-trace diff A.npt B.npt`: per-operation latency of two recordings side by side, with a verdict."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from npu_trace.ci.recording_analysis import analyze, gaps
from npu_trace.detectors.op_latency import op_rows
from npu_trace.errors import EXIT_OK, EXIT_VIOLATIONS, UsageError
from npu_trace.export.beside import refuse_inputs, write_report
from npu_trace.process import tune_gc, verdict_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diff", help="compare per-operation latency of two recordings (regression gate)",
                       description="B regresses when an operation's p99 grows by more than --threshold percent "
                       "and by more than --min-delta-ns. Exit 1 on a regression.")  # fmt: skip
    p.add_argument("a", help="baseline recording")
    p.add_argument("b", help="candidate recording")
    p.add_argument("--threshold", type=float, default=10.0, metavar="PCT", help="allowed p99 growth (default 10%%)")
    p.add_argument("--min-delta-ns", type=int, default=10_000, help="ignore p99 changes below this (default 10 us)")
    p.add_argument("--profile", help="profile to analyze with (default: each recording's)")
    p.add_argument("--json", metavar="OUT", help="write the comparison as JSON")
    p.set_defaults(func=run)


def compare(a: List[Dict[str, Any]], b: List[Dict[str, Any]], threshold: float, min_delta: int) -> List[Dict[str, Any]]:
    rows_a = {r["op"]: r for r in a}
    rows_b = {r["op"]: r for r in b}
    out = []
    for op in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(op), rows_b.get(op)
        out.append({"op": op, "a": ra, "b": rb, **_verdict(ra, rb, threshold, min_delta)})
    return out


def _verdict(
    ra: Optional[Dict[str, Any]], rb: Optional[Dict[str, Any]], threshold: float, min_delta: int
) -> Dict[str, Any]:
    if ra is None:
        return {"change_pct": None, "verdict": "new"}
    if rb is None:
        return {"change_pct": None, "verdict": "gone"}
    pa, pb = ra["p99_ns"], rb["p99_ns"]
    change = round((pb - pa) * 100.0 / pa, 1) if pa else None
    if change is not None and abs(pb - pa) > min_delta and abs(change) > threshold:
        return {"change_pct": change, "verdict": "regression" if pb > pa else "improved"}
    return {"change_pct": change, "verdict": "same"}


def _us(ns: Optional[int]) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f}"


def render(rows: List[Dict[str, Any]]) -> str:
    head = (
        f"{'operation':<28} {'count A':>9} {'count B':>9} {'p50 us A->B':>20} {'p99 us A->B':>20} {'change':>8}"
        "  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        a, b = r["a"] or {}, r["b"] or {}
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        lines.append(
            f"{r['op']:<28} {a.get('count', 0):>9} {b.get('count', 0):>9} "
            f"{_us(a.get('p50_ns')) + ' -> ' + _us(b.get('p50_ns')):>20} "
            f"{_us(a.get('p99_ns')) + ' -> ' + _us(b.get('p99_ns')):>20} {change:>8}  {r['verdict']}"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.threshold >= 0 or not args.min_delta_ns >= 0:  # NaN too: it compares false to every bound
        raise UsageError("--threshold and --min-delta-ns must be numbers, not negative")
    refuse_inputs([args.json], [args.a, args.b])
    tune_gc()  # millions of short-lived tuples: see npu_trace.process.tune_gc
    result_a, result_b = analyze(args.a, args.profile), analyze(args.b, args.profile)
    rows = compare(op_rows(result_a["latency"]), op_rows(result_b["latency"]), args.threshold, args.min_delta_ns)
    notes = {side: gaps(result["reading"]) for side, result in (("a", result_a), ("b", result_b))}
    for side, path in (("a", args.a), ("b", args.b)):  # incomplete evidence: its latencies may miss calls
        for gap in notes[side]:
            print(f"npu-trace: note: {side.upper()} ({path}) is incomplete: {gap}", file=sys.stderr)
    regressions = [r["op"] for r in rows if r["verdict"] == "regression"]
    verdict = f"REGRESSION in {', '.join(regressions)}" if regressions else "no regression"
    verdict_text(f"{render(rows)}verdict: {verdict}\n")
    if args.json:
        report = {"rows": rows, "regressions": regressions, "incomplete": notes}
        write_report(args.json, json.dumps(report, sort_keys=True, indent=1), args.a)
    return EXIT_VIOLATIONS if regressions else EXIT_OK
