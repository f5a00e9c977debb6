"""`check` on one recording, and on many in parallel processes.

`check_recording(path, rules, ...)` is what `npu-trace check FILE` does: the detectors over the recording
(`npu_trace.ci.recording_analysis`), judged by the rules, as one report (`npu_trace.ci.check_report`).
`check_many(paths, ...)` runs it over several recordings in worker processes (one recording each at a time,
`jobs` at once) and returns their outcomes in the order of `paths`, whatever order they finish in: a report, or
the one-line error of a recording that could not be read (it fails the batch, the others are still checked).
`recordings(args)` turns the command line's files and directories into the recordings to check (a directory: every
`.npt` in it and below, sorted; the flight recorder's unfinished `.partial` dumps left out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from npu_trace.ci.check_report import build_report
from npu_trace.ci.recording_analysis import analyze
from npu_trace.detectors.op_latency import op_rows, p99_by_op
from npu_trace.detectors.rules import Rules, evaluate
from npu_trace.errors import InputError, NpuTraceError
from npu_trace.process import tune_gc


def check_recording(path: str, rules: Rules, profile: Optional[str] = None, progress: bool = True,
                    name: Optional[str] = None) -> Dict[str, Any]:  # fmt: skip
    """The report of one recording (`name`: what it is called in the report; default its file name)."""
    result = analyze(path, profile, progress=progress)
    analysis, reading = result["analysis"], result["reading"]
    analysis["summary"]["latency_by_op"] = op_rows(result["latency"])
    violations = evaluate(rules, analysis["findings"], p99_by_op(result["latency"]), reading["lost"],
                          reading["incomplete"], analysis["summary"]["health"]["devices"])  # fmt: skip
    return build_report(name or os.path.basename(path), analysis, rules, violations, reading)


@dataclass(frozen=True)
class Outcome:
    """One recording of a batch: its name, and its report or why it could not be checked."""

    name: str
    report: Optional[Dict[str, Any]] = None
    error: str = ""
    exit_code: int = 0


def _check_one(path: str, name: str, rules: Rules, profile: Optional[str]) -> Outcome:
    tune_gc()
    try:
        return Outcome(name, check_recording(path, rules, profile, progress=False, name=name))
    except NpuTraceError as exc:
        return Outcome(name, error=str(exc), exit_code=exc.exit_code)


def check_many(paths: Sequence[str], rules: Rules, profile: Optional[str] = None,
               jobs: Optional[int] = None) -> List[Outcome]:  # fmt: skip
    """Every recording checked, `jobs` processes at once (default: one per CPU, at most one per recording)."""
    names = report_names(paths)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    if workers == 1:
        return [_check_one(p, n, rules, profile) for p, n in zip(paths, names)]
    from concurrent.futures import ProcessPoolExecutor  # only here: ~5 ms of every check's start-up

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_check_one, p, n, rules, profile) for p, n in zip(paths, names)]
        return [f.result() for f in futures]


def report_names(paths: Sequence[str]) -> List[str]:
    """What each recording is called in the reports: its file name, or its path below the common directory
    when two share a name (dumps of several hosts, each in its own directory)."""
    base = [os.path.basename(p) for p in paths]
    if len(set(base)) == len(base):
        return base
    root = os.path.commonpath([os.path.abspath(p) for p in paths]) if len(paths) > 1 else ""
    return [os.path.relpath(os.path.abspath(p), root) for p in paths]


def recordings(args: Sequence[str]) -> List[str]:
    """The recordings named: files as given, directories walked for `.npt` files (sorted); an InputError for a
    name that does not exist or a directory without any."""
    out: List[str] = []
    for arg in args:
        if os.path.isdir(arg):
            found = sorted(os.path.join(d, f) for d, _, files in os.walk(arg) for f in files if f.endswith(".npt"))
            if not found:
                raise InputError(f"{arg}: no recordings (.npt) in this directory")
            out += found
        elif os.path.exists(arg):
            out.append(arg)
        else:
            raise InputError(f"{arg}: no such file or directory")
    return _once(out)


def _once(paths: Sequence[str]) -> List[str]:
    """Each file once, by what it is (./a.npt and a.npt, a link and its file), where it was first named."""
    seen, kept = set(), []
    for path in paths:
        try:
            info = os.stat(path)
            key: Any = (info.st_dev, info.st_ino)
        except OSError:
            key = path
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


def batch_summary(outcomes: Sequence[Outcome], rules: Rules) -> Dict[str, Any]:
    """The JSON summary of a batch: each recording's verdict, violations and findings by kind; the totals."""
    rows: List[Dict[str, Any]] = []
    for o in outcomes:
        if o.report is None:
            rows.append({"input": o.name, "verdict": "error", "error": o.error})
            continue
        r = o.report
        kinds: Dict[str, int] = {}
        for f in r["findings"]:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        rows.append({"input": o.name, "verdict": r["verdict"], "violations": r["violations"],
                     "findings": dict(sorted(kinds.items())), "events": r["reading"]["events"],
                     "lost": r["reading"]["lost"], "truncated": r["reading"]["truncated"]})  # fmt: skip
    counts: Dict[str, Any] = {v: sum(1 for row in rows if row["verdict"] == v) for v in ("pass", "fail", "error")}
    verdict = "error" if counts["error"] else "fail" if counts["fail"] else "pass"
    return {"recordings": rows, "totals": {"recordings": len(rows), **counts}, "rules": rules.as_dict(),
            "verdict": verdict}  # fmt: skip
