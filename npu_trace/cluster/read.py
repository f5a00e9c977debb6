"""Recordings in, each one's host and evidence out: check's analysis (`npu_trace.ci.recording_analysis`, the
columnar path) of every recording, one worker process per recording at a time (`jobs` at once), the results in
input order.

A recording that cannot be read is an error of the whole run (exit 2), named with its file: a cluster's origin
cannot be judged with a host's evidence silently missing.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from npu_trace.ci.checking import report_names
from npu_trace.ci.recording_analysis import analyze
from npu_trace.cluster.evidence import Evidence, evidence_of
from npu_trace.cluster.hosts import RecordingHost, host_of
from npu_trace.cluster.incidents import Item
from npu_trace.errors import InputError, NpuTraceError
from npu_trace.process import tune_gc


@dataclass(frozen=True)
class RecordingView:
    path: str
    name: str  # as the reports call it (its file name, or its path below the inputs' common directory)
    host: RecordingHost
    evidence: List[Evidence]
    first_ns: Optional[int]  # its events' span, trace clock
    last_ns: Optional[int]
    events: int
    truncated: bool
    lost: int
    incomplete: bool = False  # events were lost (a count, or flags of losses of unknown size)
    damaged: int = 0  # damaged parts skipped (a chunk, or bytes up to the next chunk)

    def items(self) -> List[Item]:
        """Its evidence on the cluster's timeline (aligned by its host's clock anchor)."""
        out = []
        for ev in self.evidence:
            at = self.host.wall(ev.ts_ns)
            out.append(Item(self.host.name, self.host.key, ev.device, ev.kind, ev.rank, ev.what, ev.ts_ns,
                            ev.ts_ns if at is None else at, self.host.error_ns, self.name))  # fmt: skip
        return out


def read_one(path: str, name: str, profile: Optional[str] = None) -> RecordingView:
    """One recording's view (check's analysis of it)."""
    result = analyze(path, profile, progress=False)
    analysis, reading = result["analysis"], result["reading"]
    summary = analysis["summary"]
    span = summary["events"]
    return RecordingView(path, name, host_of(result["header"], name),
                         evidence_of(analysis["findings"], result["ecc_times"]), span.get("first_ts_ns"),
                         span.get("last_ts_ns"), int(reading["events"]) + int(reading["channel_events"]),
                         bool(reading["truncated"]), int(reading["lost"]), bool(reading["incomplete"]),
                         len(reading["damaged"]))  # fmt: skip


def _read(path: str, name: str, profile: Optional[str]) -> Any:
    tune_gc()
    try:
        return read_one(path, name, profile)
    except NpuTraceError as exc:
        return exc


def read_all(paths: Sequence[str], profile: Optional[str] = None, jobs: Optional[int] = None) -> List[RecordingView]:
    """Every recording's view, in the order of `paths`; an InputError naming the first that cannot be read."""
    names = report_names(paths)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    if workers == 1:
        results = [_read(p, n, profile) for p, n in zip(paths, names)]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = [f.result() for f in [pool.submit(_read, p, n, profile) for p, n in zip(paths, names)]]
    for name, got in zip(names, results):
        if isinstance(got, NpuTraceError):
            raise InputError(f"{name}: {got}")
    return list(results)


def host_groups(views: Sequence[RecordingView]) -> Dict[str, List[RecordingView]]:
    """The recordings of each host (by its identity key), in input order."""
    out: Dict[str, List[RecordingView]] = {}
    for v in views:
        out.setdefault(v.host.key, []).append(v)
    return out
