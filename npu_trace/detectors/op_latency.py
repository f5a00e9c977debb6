"""Latency per operation over every device, from an analysis's latency detector: the histograms `check`'s
report, `diff` and the agent's p99 rules read."""

from __future__ import annotations

from typing import Any, Dict, List

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.histogram import Histogram


def op_histograms(analysis: Analysis) -> Dict[str, Histogram]:
    """Latency per operation over every device (the per-device histograms merged bucket by bucket)."""
    merged: Dict[str, Histogram] = {}
    for (_dev, op), hist in sorted(analysis.latency.histograms().items(), key=lambda kv: (kv[0][1], kv[0][0] or -1)):
        merged.setdefault(op, Histogram()).merge(hist)
    return merged


def p99_by_op(histograms: Dict[str, Histogram]) -> Dict[str, int]:
    return {op: h.percentile(0.99) for op, h in sorted(histograms.items())}


def op_rows(histograms: Dict[str, Histogram]) -> List[Dict[str, Any]]:
    return [
        {"op": op, "count": h.count, "p50_ns": h.percentile(0.5), "p99_ns": h.percentile(0.99), "max_ns": h.max}
        for op, h in sorted(histograms.items())
    ]
