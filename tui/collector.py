"""The worker-side state: raw items in, the same `Analysis` as `check`, a bounded `FeedUpdate` out per interval.

Pure apart from the clock it is given: the worker thread owns it; the UI never sees it, only its updates.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from npu_trace.detectors.base import Finding
from npu_trace.detectors.pipeline import Analysis
from npu_trace.detectors.reset import ResetDetector
from npu_trace.model import NpuEvent
from npu_trace.profiles import Profile
from tui.model import (
    Counters,
    DeviceState,
    FeedUpdate,
    MemoryView,
    OpRow,
    ResetView,
    SpikeView,
)

ROWS_PER_UPDATE = 1000  # events carried to the log per update (the newest)
RING = 20_000  # recent events kept for spike context
CONTEXT_NS = 5_000_000  # a spike's context: events within 5 ms of the slow call
CONTEXT_MAX = 40
SPARK = 40
BIN_NS = 100_000_000  # sparklines: one bar per 100 ms of event time (deterministic, whatever the UI's pace)
MAX_RESETS = 50
MAX_FAILURES = 20
CALL_KINDS = frozenset(("call", "submit", "free"))
STATE_KINDS = frozenset(("timeout", "reset_step", "alloc_fail"))
OFFLINE_STEPS = frozenset(("remove", "reset_begin", "bus_remove"))

CommOf = Callable[[int], str]


class Collector:
    def __init__(self, profile: Profile, comm_of: CommOf, rows_per_update: int = ROWS_PER_UPDATE) -> None:
        self.analysis = Analysis(profile)
        self.comm_of = comm_of
        self.end_steps = frozenset(profile.reset.get("end", ()))
        self.ring: Deque[NpuEvent] = deque(maxlen=RING)
        self.rows: Deque[NpuEvent] = deque(maxlen=rows_per_update)
        self.interval_events = 0
        self.total = 0
        self.devices: Dict[int, DeviceState] = {}
        self.dev_counts: Counter[int] = Counter()
        self.lat_bins: Dict[int, Deque[List[int]]] = {}  # dev -> [bin, max latency]
        self.findings: List[Finding] = []
        self.pending_spikes: List[Finding] = []
        self.closed_resets: Deque[ResetView] = deque(maxlen=MAX_RESETS)
        self.failures: Deque[Finding] = deque(maxlen=MAX_FAILURES)
        self.mem_bins: Dict[int, Deque[List[int]]] = {}  # dev -> [bin, live bytes]
        self.op_counts: Dict[Any, int] = {}
        self.last_ts = 0

    # ---- in ------------------------------------------------------------------------------------
    def add(self, items: Sequence[Any]) -> None:
        if not items:
            return
        events = self.analysis.normalizer.feed(items)
        self._note(self.analysis.feed_events(events))
        self.ring.extend(events)
        self.rows.extend(events)
        self.interval_events += len(events)
        self.total += len(events)
        self.last_ts = max(self.last_ts, events[-1].ts_ns)
        self.dev_counts.update(ev.dev for ev in events if ev.dev is not None)
        for ev in events:
            if ev.kind in STATE_KINDS:
                self._state_event(ev)
        self._latencies(events)
        self._memory_bins()

    def finish(self) -> None:
        self.analysis.finish()
        self._note([f for f in self.analysis.findings if f.kind in ("leak", "reset_sequence", "loss")])

    def _latencies(self, events: List[NpuEvent]) -> None:
        for ev in events:
            if ev.kind in CALL_KINDS and ev.dev is not None:
                value = ev.args.get("latency_ns")
                if isinstance(value, int):
                    _bin(self.lat_bins, ev.dev, ev.ts_ns // BIN_NS, value, max)

    def _memory_bins(self) -> None:
        mem: Any = self.analysis.detectors["memory"]
        for dev, live in mem.dev_bytes.items():
            _bin(self.mem_bins, dev, self.last_ts // BIN_NS, live, lambda _old, new: new)

    def _device(self, dev: int) -> DeviceState:
        state = self.devices.get(dev)
        if state is None:
            state = self.devices[dev] = DeviceState(dev)
        return state

    def _state_event(self, ev: NpuEvent) -> None:
        if ev.dev is None:
            return
        st = self._device(ev.dev)
        if ev.kind == "timeout":
            st.last_error = f"timeout {ev.op}"
            if st.state == "ok":
                st.state = "degraded"
        elif ev.kind == "alloc_fail":
            st.last_error = f"alloc failed: {ev.args.get('size')} bytes"
        else:
            step = str(ev.args.get("step", ev.op))
            ret = ev.args.get("ret", 0)
            st.state = "ok" if step in self.end_steps else "offline" if step in OFFLINE_STEPS else "resetting"
            if isinstance(ret, int) and ret != 0:
                st.state, st.last_error = "offline", f"reset step {step} failed ({ret})"

    def _note(self, findings: List[Finding]) -> None:
        for f in findings:
            self.findings.append(f)
            if f.kind == "spike":
                self.pending_spikes.append(f)
            elif f.kind == "reset_sequence":
                self._closed_reset(f)
            elif f.kind == "alloc_fail":
                self.failures.append(f)

    def _closed_reset(self, f: Finding) -> None:
        d = f.details
        steps = [(s["step"], s["ts_ns"], s["ret"]) for s in d.get("steps", [])]
        dev = -1 if f.device is None else f.device
        view = ResetView(dev, d["status"], f.ts_ns, steps, d.get("precursor", {}), d.get("trigger"),
                         d.get("waiting_for"))  # fmt: skip
        self.closed_resets.append(view)
        if d["status"] != "complete":
            st = self._device(dev)
            st.state, st.last_error = "offline", f"reset {d['status']}: {d.get('reason')}"

    # ---- out -----------------------------------------------------------------------------------
    def update(self, seq: int, dt: float, counters: Counters, ended: bool = False) -> FeedUpdate:
        counters.events, counters.ended = self.total, ended
        counters.rate = 0.0 if ended or dt <= 0 else self.interval_events / dt
        rows = [(ev, self.comm_of(ev.pid)) for ev in self.rows]
        skipped = max(0, self.interval_events - len(rows))
        findings, self.findings = self.findings, []
        out = FeedUpdate(seq, rows, skipped, findings, self._spikes(ended), self._devices(dt, ended),
                         self._ops(dt, ended), self._resets(), self._memory(), counters)  # fmt: skip
        self.rows.clear()
        self.interval_events = 0
        return out

    def _devices(self, dt: float, ended: bool) -> List[DeviceState]:
        for dev in self.dev_counts:
            self._device(dev)
        for dev, st in self.devices.items():
            n = self.dev_counts.get(dev, 0)
            st.events += n
            st.rate = 0.0 if ended or dt <= 0 else n / dt
            st.spark = [v for _, v in self.lat_bins.get(dev, ())]
        self.dev_counts.clear()
        return [_copy_state(self.devices[d]) for d in sorted(self.devices)]

    def _ops(self, dt: float, ended: bool) -> List[OpRow]:
        stats = self.analysis.latency.stats
        rows = []
        for key in sorted(stats, key=lambda k: (-1 if k[0] is None else k[0], k[1])):
            st, h = stats[key], stats[key].hist
            before = self.op_counts.get(key, 0)
            self.op_counts[key] = h.count
            rate = 0.0 if ended or dt <= 0 else (h.count - before) / dt
            rows.append(OpRow(key[0], key[1], h.count, rate, h.percentile(0.5), h.percentile(0.99), h.max or 0,
                              st.spikes))  # fmt: skip
        return rows

    def _spikes(self, ended: bool) -> List[SpikeView]:
        ready = [f for f in self.pending_spikes if ended or _end(f) + CONTEXT_NS <= self.last_ts]
        if not ready:
            return []
        self.pending_spikes = [f for f in self.pending_spikes if f not in ready]
        return [self._context(f) for f in ready]

    def _context(self, f: Finding) -> SpikeView:
        lo, hi = f.ts_ns - CONTEXT_NS, _end(f) + CONTEXT_NS
        near = [ev for ev in self.ring if lo <= ev.ts_ns <= hi]
        shown = near[:CONTEXT_MAX]
        return SpikeView(f, [(ev, self.comm_of(ev.pid)) for ev in shown], len(near) - len(shown))

    def _resets(self) -> List[ResetView]:
        detector = self.analysis.detectors["reset"]
        out = list(self.closed_resets)
        if isinstance(detector, ResetDetector):
            for dev in sorted(detector.open):
                run = detector.open[dev]
                trigger = None if run.trigger is None else {"kind": run.trigger.kind, "op": run.trigger.op,
                                                            "ts_ns": run.trigger.ts_ns}  # fmt: skip
                out.append(ResetView(dev, "in progress", run.first_ts, list(run.steps), dict(run.precursor), trigger))
        return out

    def _memory(self) -> MemoryView:
        mem: Any = self.analysis.detectors["memory"]
        devices = [(d, n, mem.peak.get(d, 0)) for d, n in sorted(mem.dev_bytes.items())]
        top = sorted(((n, d, p) for (d, p), n in mem.pid_bytes.items() if n), reverse=True)[:8]
        procs = [(d, p, self.comm_of(p), n) for n, d, p in top]
        sparks = {d: [v for _, v in bins] for d, bins in self.mem_bins.items()}
        return MemoryView(devices, procs, list(self.failures), sparks)


def _bin(bins: Dict[int, Deque[List[int]]], dev: int, index: int, value: int, merge: Callable[[int, int], int]) -> None:
    series = bins.get(dev)
    if series is None:
        series = bins[dev] = deque(maxlen=SPARK)
    if series and series[-1][0] == index:
        series[-1][1] = merge(series[-1][1], value)
    else:
        series.append([index, value])


def _end(f: Finding) -> int:
    end = f.details.get("end_ts_ns")
    return int(end) if isinstance(end, int) else f.ts_ns


def _copy_state(st: DeviceState) -> DeviceState:
    return DeviceState(st.dev, st.state, st.events, st.rate, st.last_error, list(st.spark))


def fresh_counters(source: Any, label: Optional[str] = None) -> Counters:
    """The source's side of the counters: loss, recording, its label and detail."""
    ledger = source.ledger
    rec = source.recording()
    return Counters(
        loss=ledger.total, loss_flagged=ledger.incomplete(), loss_text=ledger.summary(),
        recording=None if rec is None else rec[0], recording_bytes=0 if rec is None else rec[1],
        source=label or source.label, detail=source.detail(),
    )  # fmt: skip
