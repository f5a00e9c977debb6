"""Deterministic detectors over normalized events (`npu_trace.pipeline.normalize.NpuEvent`).

Analysis(profile).feed(items) -> [Finding]; .finish() -> {"findings": [...], "summary": {...}}
LatencyDetector(config), ResetDetector(definition), MemoryDetector(), TimeoutDetector(), LossDetector():
    feed(events) -> [Finding]; flush() -> [Finding]; summary() -> dict
"""

from __future__ import annotations

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import FINDING_KINDS, Detector, Finding, sort_findings
from npu_trace.detectors.histogram import Histogram
from npu_trace.detectors.latency import DEFAULT_THRESHOLDS_NS, LatencyDetector
from npu_trace.detectors.loss import LossDetector
from npu_trace.detectors.memory import MemoryDetector
from npu_trace.detectors.reset import ResetDetector
from npu_trace.detectors.timeouts import TimeoutDetector

__all__ = [
    "DEFAULT_THRESHOLDS_NS",
    "FINDING_KINDS",
    "Analysis",
    "Detector",
    "Finding",
    "Histogram",
    "LatencyDetector",
    "LossDetector",
    "MemoryDetector",
    "ResetDetector",
    "TimeoutDetector",
    "sort_findings",
]
