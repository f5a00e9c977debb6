"""Latency: per (device, op) distributions and spikes, from paired calls and submitted tasks.

Samples:
- a call's latency: events of kind call/submit/free carrying `latency_ns` (the Normalizer paired the return
  with its entry by (pid, op) and put latency_ns/entry_ts_ns in the return's args);
- a task's latency: a `submit` event (args dev/stream/task) to the `complete` event with the same
  (device, stream, task); op = the complete event's op ("task"). Pending tasks are bounded (`MAX_TASKS`).

Statistics: count, min, p50, p99, max, mean per (device, op), from a log-linear histogram (histogram.py:
bounded memory, percentiles within 0.4%; min/max exact).

Spikes (one `spike` finding per slow sample), two rules, either fires:
- absolute: latency > thresholds_ns[op] (DEFAULT_THRESHOLDS_NS, overridden by config);
- adaptive: latency > max(floor_ns, k x median of the last `window` non-spike samples of (device, op)),
  active once `warmup` samples were seen (warm-up samples all enter the baseline). The median is refreshed
  every `refresh` samples. floor_ns (4 ms) sits above ordinary scheduling noise (1-2 ms on a busy VM).

Config (a profile's `latency` mapping, all optional): floor_ns, k, window, warmup, refresh, thresholds_ns
{op: ns}, ops {op: {"adaptive": bool, "absolute_ns": ns or None}}.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.detectors.histogram import Histogram
from npu_trace.events import NpuEvent

MS = 1_000_000
DEFAULT_THRESHOLDS_NS: Dict[str, int] = {
    "halMemAlloc": 4 * MS,
    "halMemFree": 4 * MS,
    "halSqTaskSend": 4 * MS,
}
DEFAULTS: Dict[str, Any] = {"floor_ns": 4 * MS, "k": 8, "window": 64, "warmup": 8, "refresh": 8}
CALL_KINDS = frozenset(("call", "submit", "free"))
MAX_TASKS = 100_000

Key = Tuple[Optional[int], str]


class OpView(NamedTuple):
    dev: Optional[int]
    op: str
    calls: int
    p50_ns: int
    p99_ns: int
    max_ns: int
    spikes: int


class OpStats:
    """One (device, op): its histogram and its rolling baseline."""

    __slots__ = ("baseline", "hist", "seen", "spikes", "window")

    def __init__(self, window: int) -> None:
        self.hist = Histogram()
        self.window: Deque[int] = deque(maxlen=window)
        self.baseline: Optional[int] = None
        self.seen = 0
        self.spikes = 0

    def learn(self, latency: int, refresh: int) -> None:
        self.window.append(latency)
        self.seen += 1
        if self.seen % refresh == 0 or self.baseline is None:
            ordered = sorted(self.window)
            self.baseline = ordered[len(ordered) // 2]

    def row(self, key: Key) -> Dict[str, Any]:
        h = self.hist
        return {
            "device": key[0], "op": key[1], "count": h.count, "min_ns": h.min, "p50_ns": h.percentile(0.5),
            "p99_ns": h.percentile(0.99), "max_ns": h.max, "mean_ns": h.mean, "spikes": self.spikes,
        }  # fmt: skip


class LatencyDetector:
    def __init__(self, config: Optional[Mapping[str, Any]] = None) -> None:
        cfg = {**DEFAULTS, **(config or {})}
        self.floor_ns, self.k = int(cfg["floor_ns"]), cfg["k"]
        self.window, self.warmup, self.refresh = int(cfg["window"]), int(cfg["warmup"]), int(cfg["refresh"])
        self.thresholds = {**DEFAULT_THRESHOLDS_NS, **cfg.get("thresholds_ns", {})}
        self.op_rules: Mapping[str, Mapping[str, Any]] = cfg.get("ops", {})
        self.stats: Dict[Key, OpStats] = {}
        self.tasks: Dict[Tuple[Optional[int], Any, Any], Tuple[int, int]] = {}
        self.counters = {"unmatched_completes": 0, "evicted_tasks": 0}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        for ev in events:
            if ev.kind in CALL_KINDS and "latency_ns" in ev.args:
                start = ev.args.get("entry_ts_ns", ev.ts_ns - ev.args["latency_ns"])
                self._sample(ev, ev.op, int(ev.args["latency_ns"]), int(start), "call", out)
            if ev.kind == "submit":
                self._submit(ev)
            elif ev.kind == "complete":
                self._complete(ev, out)
        return out

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        rows = [self.stats[k].row(k) for k in sorted(self.stats, key=_key_order)]
        return {"ops": rows, "pending_tasks": len(self.tasks), **self.counters}

    def histograms(self) -> Dict[Key, Histogram]:
        return {k: s.hist for k, s in self.stats.items()}

    def ops(self) -> List[OpView]:
        """Every (device, op) now, by device then op (read-only values: calls, p50, p99, max, spikes)."""
        out = []
        for key in sorted(self.stats, key=_key_order):
            st, h = self.stats[key], self.stats[key].hist
            out.append(OpView(key[0], key[1], h.count, h.percentile(0.5), h.percentile(0.99), h.max or 0, st.spikes))
        return out

    # ---- tasks --------------------------------------------------------------------------------------
    def _submit(self, ev: NpuEvent) -> None:
        key = (ev.dev, ev.args.get("stream"), ev.args.get("task"))
        self.tasks.pop(key, None)  # a reused id re-opens at the end (insertion order = age)
        if len(self.tasks) >= MAX_TASKS:
            del self.tasks[next(iter(self.tasks))]
            self.counters["evicted_tasks"] += 1
        self.tasks[key] = (ev.ts_ns, ev.pid)

    def _complete(self, ev: NpuEvent, out: List[Finding]) -> None:
        opened = self.tasks.pop((ev.dev, ev.args.get("stream"), ev.args.get("task")), None)
        if opened is None:
            self.counters["unmatched_completes"] += 1
            return
        self._sample(ev, ev.op, ev.ts_ns - opened[0], opened[0], "task", out)

    # ---- samples and spikes -------------------------------------------------------------------------
    def _sample(self, ev: NpuEvent, op: str, latency: int, start: int, source: str, out: List[Finding]) -> None:
        key = (ev.dev, op)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = OpStats(self.window)
        st.hist.add(latency)
        absolute, adaptive = self._thresholds(op, st)
        rules = [
            name for name, thr in (("absolute", absolute), ("adaptive", adaptive)) if thr is not None and latency > thr
        ]
        if not rules:
            st.learn(latency, self.refresh)
            return
        st.spikes += 1
        fired = min(thr for thr in (absolute, adaptive) if thr is not None and latency > thr)
        details = {
            "latency_ns": latency, "threshold_ns": fired, "rules": rules, "absolute_ns": absolute,
            "adaptive_ns": adaptive, "baseline_ns": st.baseline, "end_ts_ns": ev.ts_ns, "pid": ev.pid,
            "source": source,
        }  # fmt: skip
        if st.seen < self.warmup:
            st.learn(latency, self.refresh)  # warm-up: every sample builds the baseline
        out.append(Finding("spike", ev.dev, op, start, details))

    def _thresholds(self, op: str, st: OpStats) -> Tuple[Optional[int], Optional[int]]:
        rule = self.op_rules.get(op, {})
        absolute = rule["absolute_ns"] if "absolute_ns" in rule else self.thresholds.get(op)
        adaptive = None
        if rule.get("adaptive", True) and st.seen >= self.warmup and st.baseline is not None:
            adaptive = max(self.floor_ns, int(self.k * st.baseline))
        return absolute, adaptive


def _key_order(key: Key) -> Tuple[int, str]:
    return (-1 if key[0] is None else key[0], key[1])
