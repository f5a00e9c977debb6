"""Latency: per (device, op) distributions and spikes, from paired calls and submitted tasks.

Samples:
- a call's latency: events of kind call/submit/free/alloc/alloc_fail carrying `latency_ns` (the Normalizer
  paired the return with its entry by (pid, op) and put latency_ns/entry_ts_ns in the return's args; a real
  HAL's halMemAlloc measured by BPF is the allocation or the failure itself);
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

import math
from collections import OrderedDict, deque
from typing import Any, Deque, Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

import numpy as np

from npu_trace.detectors.base import Finding
from npu_trace.detectors.histogram import Histogram, bucket_indices
from npu_trace.events import NpuEvent, int64_of
from npu_trace.pipeline.order import KeyPacking, member_of, previous_of, stable_order
from npu_trace.pipeline.vnormalize import KIND_CODE, MISSING, NormBlock, rows_of

try:
    from npu_trace.detectors import _spikes
except ImportError:  # installed where no compiler was: the numpy twin (LatencyDetector._run), the same results
    _spikes = None  # type: ignore[assignment]

IMPLEMENTATION = "c" if _spikes is not None else "python"  # the runs of samples' scan

MS = 1_000_000
DEFAULT_THRESHOLDS_NS: Dict[str, int] = {
    "halMemAlloc": 4 * MS,
    "halMemFree": 4 * MS,
    "halSqTaskSend": 4 * MS,
}
DEFAULTS: Dict[str, Any] = {"floor_ns": 4 * MS, "k": 8, "window": 64, "warmup": 8, "refresh": 8}
CALL_KINDS = frozenset(("call", "submit", "free", "alloc", "alloc_fail"))
MAX_TASKS = 100_000

Key = Tuple[Optional[int], str]


class TaskWatch(Protocol):
    """Told each task as it is paired: its completion (a row of a normalized block, or an event) and the time
    of its submit, in time order; the pairing is the detector's own (what exporters draw as task slices)."""

    def tasks(self, nb: NormBlock, rows: np.ndarray, submitted: np.ndarray) -> None: ...

    def task(self, complete: NpuEvent, submitted: int) -> None: ...


class Summary(NamedTuple):
    """What many runs of samples need of their latencies, taken for all runs of a block at once: the lowest and
    highest latency and histogram bucket, and the sum of the latencies (None where it could overflow int64)."""

    low: int
    high: int
    bucket_low: int
    bucket_high: int
    total: Optional[int]


def summaries(lat: np.ndarray, bucket: np.ndarray, starts: np.ndarray) -> List[Summary]:
    """The Summary of each run of `lat` (and of its `bucket`s) beginning at `starts` (ascending, the first 0)."""
    low, high = np.minimum.reduceat(lat, starts).tolist(), np.maximum.reduceat(lat, starts).tolist()
    b_low, b_high = np.minimum.reduceat(bucket, starts).tolist(), np.maximum.reduceat(bucket, starts).tolist()
    totals = np.add.reduceat(lat, starts).tolist()
    counts = np.diff(np.append(starts, len(lat))).tolist()
    return [Summary(lo, hi, bl, bh, t if max(abs(lo), abs(hi)) < (1 << 62) // n else None)  # int64 sums are exact
            for lo, hi, bl, bh, t, n in zip(low, high, b_low, b_high, totals, counts)]  # fmt: skip


class Samples(NamedTuple):
    """Latency samples of one (device, op), in time order."""

    latency: np.ndarray  # int64
    start: np.ndarray  # int64: the call's entry, the task's submit
    end: np.ndarray  # int64: the return, the completion
    pid: np.ndarray
    source: Sequence[str]  # "call" or "task" (any sequence of them: a list, a numpy array of str)
    bucket: Optional[np.ndarray] = None  # the histogram bucket of each latency, when already known
    summary: Optional[Summary] = None  # the latencies' extremes and sum, when already known


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
        # the open tasks, oldest first: an OrderedDict, whose oldest is taken in O(1) at the bound (a dict's
        # next(iter()) walks past every key deleted before it: 26 us a submit at 100 k open, against 0.8)
        self.tasks: OrderedDict[Tuple[Optional[int], Any, Any], Tuple[int, int]] = OrderedDict()
        self.counters = {"unmatched_completes": 0, "evicted_tasks": 0}
        self.task_watch: Optional[TaskWatch] = None  # told every task paired (exporters draw them)

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

    def feed_block(self, nb: NormBlock) -> List[Finding]:
        """The columnar twin of feed(): the same state and findings from a normalized block."""
        out: List[Finding] = []
        rows, lat, start = self._call_samples(nb)
        t_rows, t_lat, t_start = self._tasks_block(nb)
        if self.task_watch is not None:
            self.task_watch.tasks(nb, t_rows, t_start)
        if len(t_rows):  # calls and tasks in row order (a row is one or the other)
            all_rows = np.concatenate([rows, t_rows])
            order = stable_order(all_rows)
            sources = np.where(order >= len(rows), "task", "call")
            lat, start = np.concatenate([lat, t_lat])[order], np.concatenate([start, t_start])[order]
            rows = all_rows[order]
        else:
            sources = np.full(len(rows), "call")
        self._feed_samples(nb, rows, lat, start, sources, out)
        return out

    def _call_samples(self, nb: NormBlock) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, latency, start) of the calls that carry a latency (paired returns, BPF's measured calls)."""
        calls = rows_of(nb, tuple(CALL_KINDS))
        pairing = nb.pairing_args(calls)
        if pairing is not None:  # latencies only from the pairing: the paired returns, at once
            paired_lat, paired_entry, paired = pairing
            return calls[paired], paired_lat[paired], paired_entry[paired]
        got = nb.int_args(calls, "latency_ns")
        if got is None:
            return self._call_samples_slow(nb, calls)
        lat, has = got
        rows, lat = calls[has], lat[has]
        entry = nb.int_args(rows, "entry_ts_ns")
        if entry is None:
            return self._call_samples_slow(nb, calls)
        start = np.where(entry[1], entry[0], nb.block.ts[rows] - lat)
        return rows, lat, start

    def _call_samples_slow(self, nb: NormBlock, calls: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        keep, lat, start = [], [], []
        for k, r in enumerate(calls.tolist()):
            ev = nb.event(r)
            took, entry = int64_of(ev.args.get("latency_ns")), int64_of(ev.args.get("entry_ts_ns"))
            if took is None:  # none, or not a time (a hand-made or damaged recording's): no sample
                continue
            began = entry if entry is not None else ev.ts_ns - took
            if int64_of(began) is not None:
                keep.append(k)
                lat.append(took)
                start.append(began)
        return calls[keep], np.array(lat, dtype=np.int64), np.array(start, dtype=np.int64)

    def _feed_samples(self, nb: NormBlock, rows: np.ndarray, lat: np.ndarray, start: np.ndarray, sources: Any,
                      out: List[Finding]) -> None:  # fmt: skip
        if not len(rows):
            return
        dev, op = nb.dev[rows], nb.op[rows].astype(np.int64)
        key = (dev + 1) * (len(nb.norm.ops) + 1) + op
        order = stable_order(key)  # by (device, op), each in row order
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        rows, lat, start, sources = rows[order], lat[order], start[order], sources[order]  # each key's a slice
        end, pid = nb.block.ts[rows], nb.block.pid[rows]
        bucket = bucket_indices(lat)  # every key's at once
        edges = [0, *bounds.tolist(), len(rows)]
        summary = summaries(lat, bucket, np.array(edges[:-1], dtype=np.int64))
        for k, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
            first = int(order[lo])
            d = int(dev[first])
            self.samples(None if d < 0 else d, nb.norm.ops[int(op[first])],
                         Samples(lat[lo:hi], start[lo:hi], end[lo:hi], pid[lo:hi], sources[lo:hi], bucket[lo:hi],
                                 summary[k]), out)  # fmt: skip

    def _tasks_block(self, nb: NormBlock) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Submits open tasks, completions close them, in time order (as _submit/_complete): the task samples
        (rows of the completions, latency, the submit's time)."""
        rows = rows_of(nb, ("submit", "complete"))
        got = nb.int_args_of(rows, ("stream", "task"))
        if got is None or len(self.tasks) + len(rows) >= MAX_TASKS:
            return self._tasks_one_by_one(nb, rows)
        streams, tasks = got
        cols = np.stack([nb.dev[rows], streams[1], streams[0], tasks[1], tasks[0]])  # a task's key, as columns
        packing = KeyPacking(cols)
        key = packing.pack(cols)
        prev, last = previous_of(key)  # each row's row before of its key (rows ascend: time order)
        is_submit = nb.kind[rows] == KIND_CODE["submit"]
        inner = prev >= 0
        firsts = np.flatnonzero(~inner)  # each key's first row in the block
        carried: np.ndarray = np.zeros(len(firsts), dtype=bool)
        if self.tasks:  # keys still open from before the block (few): matched by their packed value
            open_keys = [kk for kk in self.tasks if packing.fits(_key_values(kk))]
            if open_keys:
                carried = member_of(key[firsts], packing.pack(_key_columns(open_keys)))
        after_submit: np.ndarray = np.zeros(len(rows), dtype=bool)
        after_submit[inner] = is_submit[prev[inner]]
        after_submit[firsts] = carried
        matched = np.flatnonzero(~is_submit & after_submit)
        self.counters["unmatched_completes"] += int((~is_submit).sum()) - len(matched)
        ts = nb.block.ts
        before = prev[matched]
        inside = before >= 0
        opened: np.ndarray = np.empty(len(matched), dtype=np.int64)
        opened[inside] = ts[rows[before[inside]]]
        key_of = _KeyOf(cols)
        for j in np.flatnonzero(~inside).tolist():
            opened[j] = self.tasks[key_of(int(matched[j]))][0]
        self._settle_tasks(nb, key_of, rows, is_submit, firsts[carried], last)
        done = rows[matched]
        return done, ts[done] - opened, opened

    def _settle_tasks(self, nb: NormBlock, key_of: Any, rows: np.ndarray, is_submit: np.ndarray,
                      carried: np.ndarray, last: np.ndarray) -> None:  # fmt: skip
        """The open tasks after the block, as _submit/_complete leave them (a key whose last row is a submit is
        open, re-inserted where that submit put it; the others closed). `carried`: the first rows of the keys
        open before the block."""
        for i in carried.tolist():
            del self.tasks[key_of(i)]
        ts, pid = nb.block.ts, nb.block.pid
        for i in np.flatnonzero(last & is_submit).tolist():  # in row order
            row = int(rows[i])
            self.tasks[key_of(i)] = (int(ts[row]), int(pid[row]))

    def _tasks_one_by_one(self, nb: NormBlock, rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        streams, tasks = nb.int_arg(rows, "stream"), nb.int_arg(rows, "task")
        submit = KIND_CODE["submit"]
        got_rows, got_lat, got_start = [], [], []
        ts, pid, dev, kind = nb.block.ts.tolist(), nb.block.pid.tolist(), nb.dev.tolist(), nb.kind.tolist()
        for r, stream, task in zip(rows.tolist(), streams, tasks):
            key = (None if dev[r] < 0 else dev[r], None if stream is MISSING else _hashable(stream),
                   None if task is MISSING else _hashable(task))  # fmt: skip
            if kind[r] == submit:
                self._open_task(key, ts[r], pid[r])
                continue
            opened = self.tasks.pop(key, None)
            if opened is None:
                self.counters["unmatched_completes"] += 1
                continue
            got_rows.append(r)
            got_lat.append(ts[r] - opened[0])
            got_start.append(opened[0])
        return (np.array(got_rows, dtype=np.int64), np.array(got_lat, dtype=np.int64),
                np.array(got_start, dtype=np.int64))  # fmt: skip

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
        self._open_task(_task_key(ev), ev.ts_ns, ev.pid)

    def _open_task(self, key: Tuple[Optional[int], Any, Any], ts: int, pid: int) -> None:
        self.tasks.pop(key, None)  # a reused id re-opens at the end (insertion order = age)
        if len(self.tasks) >= MAX_TASKS:
            self.tasks.popitem(last=False)
            self.counters["evicted_tasks"] += 1
        self.tasks[key] = (ts, pid)

    def _complete(self, ev: NpuEvent, out: List[Finding]) -> None:
        opened = self.tasks.pop(_task_key(ev), None)
        if opened is None:
            self.counters["unmatched_completes"] += 1
            return
        if self.task_watch is not None:
            self.task_watch.task(ev, opened[0])
        self._sample(ev, ev.op, ev.ts_ns - opened[0], opened[0], "task", out)

    # ---- samples and spikes -------------------------------------------------------------------------
    def _sample(self, ev: NpuEvent, op: str, latency: int, start: int, source: str, out: List[Finding]) -> None:
        self._sample_at(ev.dev, op, latency, start, ev.ts_ns, ev.pid, source, out)

    def _sample_at(self, dev: Optional[int], op: str, latency: int, start: int, end: int, pid: int, source: str,
                   out: List[Finding]) -> None:  # fmt: skip
        key = (dev, op)
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
            "adaptive_ns": adaptive, "baseline_ns": st.baseline, "end_ts_ns": end, "pid": pid,
            "source": source,
        }  # fmt: skip
        if st.seen < self.warmup:
            st.learn(latency, self.refresh)  # warm-up: every sample builds the baseline
        out.append(Finding("spike", dev, op, start, details))

    # ---- many samples of one (device, op) at once: the same state and findings as _sample_at, one by one ---
    def samples(self, dev: Optional[int], op: str, s: Samples, out: List[Finding]) -> None:
        """Samples of one (device, op) in time order (arrays: latency, start, end, pid; `source` per sample)."""
        key = (dev, op)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = OpStats(self.window)
        st.hist.add_many(s.latency, s.bucket, s.summary)
        absolute, _ = self._thresholds(op, st)
        adaptive_on = bool(self.op_rules.get(op, {}).get("adaptive", True))
        if _spikes is None or not self._run_compiled(st, s, absolute, adaptive_on, dev, op, out):
            self._run(st, s, absolute, adaptive_on, dev, op, out)

    def _run_compiled(self, st: OpStats, s: Samples, absolute: Optional[int], adaptive_on: bool,
                      dev: Optional[int], op: str, out: List[Finding]) -> bool:  # fmt: skip
        """samples() in one pass of the C extension; False (nothing changed) where it cannot take the run: a
        threshold or factor of another type, a value or an adaptive threshold outside int64, a window of no
        sample."""
        k, n = self.k, len(s.latency)
        k_is_int = isinstance(k, int) and not isinstance(k, bool) and -(1 << 63) <= k < (1 << 63)
        if not (k_is_int or isinstance(k, float)):
            return False
        limit = absolute
        if isinstance(limit, float) and math.isfinite(limit) and abs(limit) < 2**62:
            limit = math.floor(limit)  # an integer latency is above x where it is above floor(x)
        if limit is not None and (not isinstance(limit, int) or not -(1 << 63) <= limit < (1 << 63)):
            return False
        at: np.ndarray = np.empty(n, dtype=np.int64)
        adaptive: np.ndarray = np.empty(n, dtype=np.int64)
        base: np.ndarray = np.empty(n, dtype=np.int64)
        flags: np.ndarray = np.empty(n, dtype=np.uint8)
        try:  # a window of no sample, a value outside int64: the twin's (and the reference's) way
            tail: np.ndarray = np.empty(self.window, dtype=np.int64)
            window = np.array(st.window, dtype=np.int64)
            spikes, seen, baseline, kept = _spikes.scan(
                np.ascontiguousarray(s.latency, dtype=np.int64), window, st.seen,
                0 if st.baseline is None else st.baseline, st.baseline is not None, self.window, self.refresh,
                self.warmup, self.floor_ns, k if k_is_int else 0, float(k), k_is_int,
                0 if limit is None else limit, limit is not None, adaptive_on, at, adaptive, base, flags,
                tail)  # fmt: skip
        except (ValueError, OverflowError):  # the numpy twin takes it, with Python's integers where they must be
            return False
        learned = seen - st.seen
        st.seen, st.baseline = seen, baseline
        if learned:
            st.window.extend(tail[:kept].tolist()[-learned:])
        for i, thr, b, f in zip(at[:spikes].tolist(), adaptive[:spikes].tolist(), base[:spikes].tolist(),
                                flags[:spikes].tolist()):  # fmt: skip
            self._spike_finding(st, s, i, absolute, thr if f & 1 else None, b if f & 2 else None, dev, op, out)
        return True

    def _run(self, st: OpStats, s: Samples, absolute: Optional[int], adaptive_on: bool, dev: Optional[int], op: str,
             out: List[Finding]) -> None:  # fmt: skip
        """samples() in numpy (the twin of the C extension's pass: the same state and findings), from the run's
        first sample to each spike past the warm-up (which does not learn, so the baselines diverge)."""
        i = 0
        while i < len(s.latency):
            done = self._scan(st, s, i, absolute, adaptive_on, dev, op, out)
            i += done
            if i < len(s.latency):  # a spike past the warm-up
                self._spike(st, s, i, absolute, dev, op, out)
                i += 1

    def _scan(self, st: OpStats, s: Samples, i: int, absolute: Optional[int], adaptive_on: bool,
              dev: Optional[int], op: str, out: List[Finding]) -> int:  # fmt: skip
        """Learn samples from i on, assuming each learns, up to (not including) the first spike past the warm-up;
        returns how many were learned. Warm-up spikes learn too: their findings are made here.

        The adaptive threshold is never below floor_ns, so only samples above it can be adaptive spikes: the
        baseline each sample meets (a median of the window) is computed for those, and for the spikes."""
        lat = s.latency[i:]
        m = len(lat)
        high = s.summary.high if i == 0 and s.summary is not None else int(lat.max())
        if _below_every(high, absolute, self.floor_ns if adaptive_on else None):  # most runs: no spike can be
            self._learn_many(st, lat)
            return m
        spike = lat > absolute if absolute is not None else np.zeros(m, dtype=bool)
        seen = st.seen + np.arange(m, dtype=np.int64)
        cand = np.flatnonzero(lat > self.floor_ns) if adaptive_on else np.zeros(0, np.int64)
        if len(cand):
            before = self._baselines(st, lat, cand)
            active = (seen[cand] >= self.warmup) & (before >= 0)
            adaptive = np.maximum(self.floor_ns, (self.k * before).astype(np.int64))
            spike[cand] |= active & (lat[cand] > adaptive)
        diverge = np.flatnonzero(spike & (seen >= self.warmup))
        done = int(diverge[0]) if len(diverge) else m
        warm = np.flatnonzero(spike[:done])  # warm-up spikes: findings, and they learn
        if len(warm):
            before = self._baselines(st, lat, warm)
            for k, b in zip(warm.tolist(), before.tolist()):
                on = adaptive_on and k + st.seen >= self.warmup and b >= 0
                thr = max(self.floor_ns, int(self.k * b)) if on else None
                self._spike_finding(st, s, i + k, absolute, thr, b if b >= 0 else None, dev, op, out)
        self._learn_many(st, lat[:done])
        return done

    def _baselines(self, st: OpStats, lat: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The baseline in force before each sample of `at` if all samples learn (-1: none yet)."""
        last = self._last_refresh(st, at)  # the last refresh before each sample (-1: none in this run)
        before: np.ndarray = np.full(len(at), -1 if st.baseline is None else st.baseline, dtype=np.int64)
        has = last >= 0
        if has.any():
            needed, where = np.unique(last[has], return_inverse=True)
            seq = np.concatenate([np.array(st.window, dtype=np.int64), lat[: int(needed[-1]) + 1]])
            medians = _medians(seq.astype(np.int64, copy=False), len(st.window) + needed, self.window)
            before[has] = medians[where.reshape(-1)]
        return before

    def _last_refresh(self, st: OpStats, at: np.ndarray) -> np.ndarray:
        """For each sample index of a run where all learn: the last sample before it after which learn()
        refreshed the baseline (every `refresh` learned ones, and the very first), or -1."""
        at = np.asarray(at, dtype=np.int64)
        last: np.ndarray = ((st.seen + at) // self.refresh) * self.refresh - st.seen - 1
        if st.baseline is None:  # the run's first sample refreshes too
            last = np.where(at > 0, np.maximum(last, 0), -1)
        return np.where(last < at, last, -1)

    def _last_refresh_before(self, st: OpStats, at: int) -> int:
        """_last_refresh of one index, in plain integers (once per run of every (device, op) of a block)."""
        last = ((st.seen + at) // self.refresh) * self.refresh - st.seen - 1
        if st.baseline is None:
            last = max(last, 0) if at > 0 else -1
        return last if last < at else -1

    def _learn_many(self, st: OpStats, lat: np.ndarray) -> None:
        """Every sample learns, as OpStats.learn does one by one."""
        m = len(lat)
        if not m:
            return
        point = self._last_refresh_before(st, m)  # the last refresh within the run
        if point >= 0:
            w = self.window
            seq = np.concatenate([np.array(st.window, dtype=np.int64)[max(0, len(st.window) + point + 1 - w):],
                                  lat[max(0, point + 1 - w) : point + 1].astype(np.int64)])  # fmt: skip
            tail = seq[-w:]
            st.baseline = int(np.partition(tail, len(tail) // 2)[len(tail) // 2])
        st.window.extend(lat[-self.window :].tolist())
        st.seen += m

    def _spike(self, st: OpStats, s: Samples, i: int, absolute: Optional[int], dev: Optional[int], op: str,
               out: List[Finding]) -> None:  # fmt: skip
        _, adaptive = self._thresholds(op, st)
        self._spike_finding(st, s, i, absolute, adaptive, st.baseline, dev, op, out)

    def _spike_finding(self, st: OpStats, s: Samples, i: int, absolute: Optional[int], adaptive: Optional[int],
                       baseline: Optional[int], dev: Optional[int], op: str, out: List[Finding]) -> None:  # fmt: skip
        latency = int(s.latency[i])
        rules = [n for n, thr in (("absolute", absolute), ("adaptive", adaptive)) if thr is not None and latency > thr]
        fired = min(thr for thr in (absolute, adaptive) if thr is not None and latency > thr)
        st.spikes += 1
        details = {
            "latency_ns": latency, "threshold_ns": fired, "rules": rules, "absolute_ns": absolute,
            "adaptive_ns": adaptive, "baseline_ns": baseline, "end_ts_ns": int(s.end[i]), "pid": int(s.pid[i]),
            "source": str(s.source[i]),
        }  # fmt: skip
        out.append(Finding("spike", dev, op, int(s.start[i]), details))

    def _thresholds(self, op: str, st: OpStats) -> Tuple[Optional[int], Optional[int]]:
        rule = self.op_rules.get(op, {})
        absolute = rule["absolute_ns"] if "absolute_ns" in rule else self.thresholds.get(op)
        adaptive = None
        if rule.get("adaptive", True) and st.seen >= self.warmup and st.baseline is not None:
            adaptive = max(self.floor_ns, int(self.k * st.baseline))
        return absolute, adaptive


TaskKey = Tuple[Optional[int], Any, Any]


def _below_every(high: int, absolute: Optional[int], floor: Optional[int]) -> bool:
    """No latency (the highest is `high`) is above the absolute threshold, nor above the adaptive rule's floor
    (None: that rule is off): no sample of the run can be a spike, whatever the baselines."""
    limits = [x for x in (absolute, floor) if x is not None]
    return bool(limits) and high <= min(limits)


def _key_values(key: TaskKey) -> Tuple[Any, ...]:
    """A (dev, stream, task) key as the five key columns' values (dev or -1, has and value of stream, of task)."""
    d, s, t = key
    stream, task = (0, 0) if s is None else (1, s), (0, 0) if t is None else (1, t)
    return (-1 if d is None else d, *stream, *task)


def _key_columns(keys: Sequence[TaskKey]) -> np.ndarray:
    """Keys (each inside the int64 range) as the five key columns."""
    return np.array([_key_values(k) for k in keys], dtype=np.int64).T.reshape(5, -1)


class _KeyOf:
    """The (dev, stream, task) key of a row (its position among the key columns' rows), as _submit makes it, made
    only when asked."""

    def __init__(self, cols: np.ndarray) -> None:
        self.cols = cols

    def __call__(self, at: int) -> TaskKey:
        d, sh, sv, th, tv = self.cols[:, at].tolist()
        return (None if d < 0 else d, sv if sh else None, tv if th else None)


def _medians(seq: np.ndarray, ends: np.ndarray, window: int) -> np.ndarray:
    """sorted(w)[len(w) // 2] of each window w of seq: the (at most `window`) values ending at each of `ends`,
    as OpStats.learn takes them; full windows in one partition, the first (shorter) ones one by one."""
    out: np.ndarray = np.empty(len(ends), dtype=np.int64)
    full = ends >= window - 1
    if full.any():
        rows = np.lib.stride_tricks.sliding_window_view(seq, window)[ends[full] - (window - 1)]
        out[full] = np.partition(rows, window // 2, axis=1)[:, window // 2]
    for k in np.flatnonzero(~full).tolist():
        part = seq[: ends[k] + 1]
        out[k] = np.partition(part, len(part) // 2)[len(part) // 2]
    return out


def _key_order(key: Key) -> Tuple[int, str]:
    return (-1 if key[0] is None else key[0], key[1])


def _task_key(ev: NpuEvent) -> Tuple[Optional[int], Any, Any]:
    return ev.dev, _hashable(ev.args.get("stream")), _hashable(ev.args.get("task"))


def _hashable(value: Any) -> Any:
    """A task id as a key: itself, or its text when it is a list or a map (an array or struct field where the
    profile expects an integer: a damaged or unusual format)."""
    return repr(value) if isinstance(value, (list, dict)) else value
