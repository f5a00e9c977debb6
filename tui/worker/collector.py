"""The worker-side state: raw items in, the same `Analysis` as `check`, a bounded `FeedUpdate` out per interval.

Pure apart from the clock it is given: the worker process owns it; the UI never sees it, only its updates.
Every event is analysed and counted; what is bounded is only what is carried to the UI (the newest log rows
of an interval, spike context, closed resets, allocation failures).
"""

from __future__ import annotations

from collections import Counter, deque
from operator import itemgetter
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.detectors.links import AFTER_NS, CAUSES, explain
from npu_trace.device.profiles import Profile
from npu_trace.events import NpuEvent
from npu_trace.pipeline.blocks import Block, objects_block
from npu_trace.pipeline.order import member_of, sorted_distinct
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.pipeline.vnormalize import KIND_CODE, LOST, NormBlock, kind_in
from tui.fmt import log_row, row_plain
from tui.logfilter import LogFilter
from tui.messages import (
    CONTEXT_NS,
    ROWS_PER_UPDATE,
    Counters,
    DeviceState,
    FaultView,
    FeedUpdate,
    LogWindow,
    MemoryView,
    OpRow,
    ResetView,
    SpikeView,
)

RING = 50_000  # recent events kept for spike context and for a new log filter's first window
LOG_MAX = 10_000  # rows of a new filter's window (the UI's log holds as many)
CONTEXT_MAX = 40
SPARK = 40
BIN_NS = 100_000_000  # sparklines: one bar per 100 ms of event time (deterministic, whatever the UI's pace)
MAX_RESETS = 50
MAX_FAILURES = 20
MAX_FAULTS = 50  # kernel faults, device faults and application errors shown (the newest)
MAX_CAUSES = 200  # the newest driver-level findings an application's error is explained against
FAULT_KINDS = frozenset(("kernel_fault", "device_fault", "app_error"))
CAUSE_KINDS = frozenset(cause.split(":")[0] for causes in CAUSES.values() for cause in causes)
SETTLE_NS = AFTER_NS + 1_000_000_000  # an app error's explanation is made again this long after it (and its
# stamp's uncertainty): a driver finding that follows it within the link window is in by then
CALL_KINDS = frozenset(("call", "submit", "free"))
CALL_CODES = [KIND_CODE[k] for k in sorted(CALL_KINDS)]

CommOf = Callable[[int], str]


class NewestRows:
    """The newest `limit` log rows matched since the last update, held as references (a block and its row
    numbers) and made into events only when an update carries them: a busy interval matches far more rows than
    it shows, and making each one an event would cost more than analysing it."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.parts: Deque[Tuple[Tuple[NormBlock, np.ndarray], int]] = deque()  # ((NormBlock, rows), row count)
        self.held = 0

    def add_block(self, nb: NormBlock, rows: np.ndarray) -> None:
        self._add((nb, rows), len(rows))

    def _add(self, part: Tuple[NormBlock, np.ndarray], n: int) -> None:
        if not n or not self.limit:
            return
        self.parts.append((part, n))
        self.held += n
        while self.held - self.parts[0][1] >= self.limit:  # the oldest part holds none of the newest rows
            self.held -= self.parts.popleft()[1]

    def take(self) -> List[NpuEvent]:
        """The newest rows, oldest first, as events; then empty."""
        out = self.events()
        self.clear()
        return out

    def __iter__(self) -> Iterator[NpuEvent]:
        return iter(self.events())

    def events(self) -> List[NpuEvent]:
        """The newest rows, oldest first, as events."""
        newest: List[List[NpuEvent]] = []
        need = self.limit
        for part, _ in reversed(self.parts):
            if need <= 0:
                break
            nb, rows = part
            got = [nb.event(i) for i in rows[-need:].tolist()]
            newest.append(got)
            need -= len(got)
        return [ev for got in reversed(newest) for ev in got]

    def clear(self) -> None:
        self.parts.clear()
        self.held = 0


class Collector:
    def __init__(
        self,
        profile: Profile,
        comm_of: CommOf,
        rows_per_update: int = ROWS_PER_UPDATE,
        scope: Optional[ScopeFilter] = None,
    ) -> None:
        self.analysis = Analysis(profile, scope)
        self.comm_of = comm_of
        self.ring = Ring(RING)
        self.rows = NewestRows(rows_per_update)
        self.filter = LogFilter()
        self.interval_events = 0
        self.interval_matched = 0
        self.total = 0
        self.devices: Dict[int, DeviceState] = {}
        self.dev_counts: Counter[Optional[int]] = Counter()
        self.lat_bins: Dict[int, Deque[List[int]]] = {}  # dev -> [bin, max latency]
        self.findings: List[Finding] = []
        self.pending_spikes: List[Finding] = []
        self.closed_resets: Deque[ResetView] = deque(maxlen=MAX_RESETS)
        self.failures: Deque[Finding] = deque(maxlen=MAX_FAILURES)
        self.accounting: Deque[Finding] = deque(maxlen=MAX_FAILURES)
        self.mem_bins: Dict[int, Deque[List[int]]] = {}  # dev -> [bin, live bytes]
        self.faults: Deque[FaultView] = deque(maxlen=MAX_FAULTS)
        self.causes: Deque[Finding] = deque(maxlen=MAX_CAUSES)
        self.unsettled: List[Tuple[int, FaultView]] = []  # (settle time, an app error's view still shown)
        self.new_causes = False  # driver-level findings came since the unsettled app errors were explained
        self.op_counts: Dict[Any, int] = {}
        self.last_ts = 0

    # ---- in ------------------------------------------------------------------------------------
    def add(self, items: Sequence[Any], now: Optional[int] = None) -> None:
        """Items as objects in time order (trace and channels together) and the timeline's watermark: as a
        block of objects (`add_block`)."""
        self.add_block(objects_block(items), now)

    def add_block(self, block: Block, now: Optional[int] = None) -> None:
        """The timeline's items as a columnar block, and its watermark: analysed (normalized and scoped by the
        analysis), its views updated, objects made only for what is carried to the UI."""
        if len(block):
            nb = self.analysis.normalize_block(block)
            self._note(self.analysis.feed_normalized(nb))
            if len(nb):  # not all out of scope
                self._block_views(nb)
        if now is not None:
            self._note(self.analysis.advance(now))
        self.analysis.findings.clear()

    def _block_views(self, nb: NormBlock) -> None:
        n = len(nb)
        self.ring.add_block(nb)
        rows = np.arange(n) if self.filter.empty() else select_rows(self.filter, nb, self.comm_of)
        self.rows.add_block(nb, rows)
        self.interval_matched += len(rows)
        self.interval_events += n
        self.total += n - int(np.count_nonzero(nb.kind == LOST))  # events, as replay counts them (losses apart)
        self.last_ts = max(self.last_ts, int(nb.block.ts[-1]))
        if int(nb.dev.max()) < 4096:  # devices are small numbers (-1: none): counted over their range
            per_dev = np.bincount(nb.dev + 1)
            at = np.flatnonzero(per_dev)
            devs, counts = at - 1, per_dev[at]
        else:  # a device number from some channel's text, however large
            devs, counts = np.unique(nb.dev, return_counts=True)
        self.dev_counts.update({(None if d < 0 else d): c for d, c in zip(devs.tolist(), counts.tolist())})
        self._scan_block(nb)
        self._memory_bins()

    def _scan_block(self, nb: NormBlock) -> None:
        """_scan on columns: each device's largest call latency per bin, bin runs in row order."""
        rows = np.flatnonzero(kind_in(nb.kind, CALL_CODES) & (nb.dev >= 0))
        if not len(rows):
            return
        pairing = nb.pairing_args(rows)  # the common case: the latencies are the pairing's
        got = nb.int_args(rows, "latency_ns") if pairing is None else (pairing[0], pairing[2])
        if got is None:  # an argument that is not an int64: row by row, as _scan
            self._scan([nb.event(i) for i in rows.tolist()])
            return
        values, present = got
        rows, values = rows[present], values[present]
        devs, index = nb.dev[rows], nb.block.ts[rows] // BIN_NS
        for dev in sorted_distinct(devs).tolist():
            mine = devs == dev
            idx, val = index[mine], values[mine]
            starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
            for i, v in zip(idx[starts].tolist(), np.maximum.reduceat(val, starts).tolist()):
                _bin(self.lat_bins, dev, i, v, max)

    def set_filter(self, query: str) -> LogWindow:
        """A new log filter: from now on it selects the rows carried; the answer is its first window, the
        newest matching events among the recent ones still held (the ring)."""
        self.filter = flt = LogFilter.parse(query)
        recent = self.ring.events()
        matched = recent if flt.empty() else flt.select(recent, self.comm_of)
        shown = matched[-LOG_MAX:]
        self.rows.clear()  # this interval's rows were chosen by the old filter: the window supersedes them
        self.interval_matched = 0
        rows = [log_row(ev, self.comm_of(ev.pid)) for ev in shown]
        return LogWindow(query, rows, len(matched) - len(shown), len(recent))

    def _scan(self, events: List[NpuEvent]) -> None:
        """One pass over the batch for what needs a look at single events: the latency bars."""
        lat_bins, call_kinds = self.lat_bins, CALL_KINDS
        for ev in events:
            kind = ev[1]
            if kind in call_kinds:
                value = ev[6].get("latency_ns")
                if value.__class__ is int and ev[2] is not None:
                    dev, index = ev[2], ev[0] // BIN_NS
                    series = lat_bins.get(dev)
                    if series is not None and series[-1][0] == index:
                        if value > series[-1][1]:
                            series[-1][1] = value
                    else:
                        _bin(lat_bins, dev, index, value, max)

    def finish(self) -> None:
        """The end of the source: flush the detectors (leaks, incomplete sequences); once."""
        before = len(self.analysis.findings)
        self.analysis.finish()
        self._note(self.analysis.findings[before:])  # only the flushed ones: the others were noted as they came
        self.analysis.findings.clear()

    def _memory_bins(self) -> None:
        for dev, live, _ in self.analysis.memory.devices():
            _bin(self.mem_bins, dev, self.last_ts // BIN_NS, live, lambda _old, new: new)

    def _device(self, dev: int) -> DeviceState:
        state = self.devices.get(dev)
        if state is None:
            state = self.devices[dev] = DeviceState(dev)
        return state

    def _note(self, findings: List[Finding]) -> None:
        for f in findings:
            self.findings.append(f)
            if f.kind == "spike":
                self.pending_spikes.append(f)
            elif f.kind == "reset_sequence":
                self._closed_reset(f)
            elif f.kind == "alloc_fail":
                self.failures.append(f)
            elif f.kind in ("accounting_mismatch", "alloc_fail_explained"):
                self.accounting.append(f)
            if f.kind in CAUSE_KINDS:
                self.causes.append(f)
                self.new_causes = True
            if f.kind in FAULT_KINDS:
                self._fault(f)

    def _fault(self, f: Finding) -> None:
        view = FaultView(f)
        self.faults.append(view)
        if f.kind == "app_error":
            self._explain(view)
            slack = sum(int(f.details.get(k) or 0) for k in ("time_resolution_ns", "clock_error_ns"))
            self.unsettled.append((f.ts_ns + SETTLE_NS + slack, view))

    def _explain(self, view: FaultView) -> None:
        explained = explain([*self.causes, view.finding])[-1]
        view.explanation = str(explained.details.get("explanation", ""))

    def _settle(self, ended: bool) -> None:
        """The app errors not settled yet (shown, their settle time not passed by the events) explained again
        when driver-level findings came since (a timeout reported after the application's error); those
        whose settle time has passed are settled."""
        shown = set(map(id, self.faults))
        self.unsettled = [(t, v) for t, v in self.unsettled if id(v) in shown]
        if self.new_causes:
            for _, view in self.unsettled:
                self._explain(view)
            self.new_causes = False
        self.unsettled = [(t, v) for t, v in self.unsettled if not (ended or t <= self.last_ts)]

    def _closed_reset(self, f: Finding) -> None:
        d = f.details
        steps = [(s["step"], s["ts_ns"], s["ret"]) for s in d.get("steps", [])]
        dev = -1 if f.device is None else f.device
        view = ResetView(dev, d["status"], f.ts_ns, steps, d.get("precursor", {}), d.get("trigger"),
                         d.get("waiting_for"))  # fmt: skip
        self.closed_resets.append(view)

    # ---- out -----------------------------------------------------------------------------------
    def update(self, seq: int, dt: float, counters: Counters, ended: bool = False) -> FeedUpdate:
        counters.events, counters.ended = self.total, ended
        counters.rate = 0.0 if ended or dt <= 0 else self.interval_events / dt
        rows = [log_row(ev, self.comm_of(ev.pid)) for ev in self.rows.take()]
        skipped = max(0, self.interval_matched - len(rows))
        findings, self.findings = self.findings, []
        self._settle(ended)
        out = FeedUpdate(seq, rows, skipped, findings, self._spikes(ended), self._devices(dt, ended),
                         self._ops(dt, ended), self._resets(), self._memory(), counters,
                         faults=[FaultView(v.finding, v.explanation) for v in self.faults])  # fmt: skip
        counters.pending_spikes = len(self.pending_spikes)
        self.rows.clear()
        self.interval_events = self.interval_matched = 0
        return out

    def _devices(self, dt: float, ended: bool) -> List[DeviceState]:
        for dev in self.dev_counts:
            if dev is not None:
                self._device(dev)
        for dev, known in self.analysis.states.states().items():  # the detectors' device state machine
            st = self._device(dev)
            st.state, st.last_error = known.state, known.last_error
        for dev, st in self.devices.items():
            n = self.dev_counts.get(dev, 0)
            st.events += n
            st.rate = 0.0 if ended or dt <= 0 else n / dt
            st.spark = [v for _, v in self.lat_bins.get(dev, ())]
        self.dev_counts.clear()
        return [_copy_state(self.devices[d]) for d in sorted(self.devices)]

    def _ops(self, dt: float, ended: bool) -> List[OpRow]:
        rows = []
        for op in self.analysis.latency.ops():
            key = (op.dev, op.op)
            before = self.op_counts.get(key, 0)
            self.op_counts[key] = op.calls
            rate = 0.0 if ended or dt <= 0 else (op.calls - before) / dt
            rows.append(OpRow(op.dev, op.op, op.calls, rate, op.p50_ns, op.p99_ns, op.max_ns, op.spikes))
        return rows

    def _spikes(self, ended: bool) -> List[SpikeView]:
        ready = [f for f in self.pending_spikes if ended or _end(f) + CONTEXT_NS <= self.last_ts]
        if not ready:
            return []
        self.pending_spikes = [f for f in self.pending_spikes if f not in ready]
        return [self._context(f) for f in ready]

    def _context(self, f: Finding) -> SpikeView:
        near, count = self.ring.around(f.ts_ns - CONTEXT_NS, _end(f) + CONTEXT_NS, CONTEXT_MAX)
        return SpikeView(f, [log_row(ev, self.comm_of(ev.pid)) for ev in near], count - len(near))

    def _resets(self) -> List[ResetView]:
        """Closed sequences, then the open ones with the steps seen so far, so that a reset shows as it
        happens."""
        out = list(self.closed_resets)
        for run in self.analysis.reset.open_sequences():
            out.append(ResetView(run.dev, "in progress", run.first_ts, run.steps, run.precursor, run.trigger))
        return out

    def _memory(self) -> MemoryView:
        mem = self.analysis.memory
        procs = [(d, p, self.comm_of(p), n) for d, p, n in mem.top_processes(8)]
        sparks = {d: [v for _, v in bins] for d, bins in self.mem_bins.items()}
        chips = [(c.device, c.npu, c.chip, c.used_mb, c.total_mb) for c in self.analysis.accounting.chips()]
        return MemoryView(mem.devices(), procs, list(self.failures), sparks, chips, list(self.accounting))


_ts_of = itemgetter(0)  # NpuEvent.ts_ns


class Ring:
    """The newest events (at least `limit`, at most one batch more), kept as the batches they came in (in time
    order: the timeline's), so that the events around a time are found without a walk over all of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.batches: Deque[_BlockEvents] = deque()  # oldest first
        self.size = 0

    def add_block(self, nb: NormBlock) -> None:
        """A normalized block: its events are made only when asked for (a filter's window, a spike's context)."""
        self._add(_BlockEvents(nb), len(nb))

    def _add(self, batch: Any, n: int) -> None:
        self.batches.append(batch)
        self.size += n
        while self.size - len(self.batches[0]) >= self.limit:
            self.size -= len(self.batches.popleft())

    def events(self) -> List[NpuEvent]:
        """All of them, oldest first (the newest `limit`)."""
        out: List[NpuEvent] = []
        for batch in reversed(self.batches):
            want = self.limit - len(out)
            if want <= 0:
                break
            out[:0] = batch.slice(max(0, len(batch) - want), len(batch))
        return out[-self.limit :]

    def around(self, lo: int, hi: int, most: int) -> Tuple[List[NpuEvent], int]:
        """Up to `most` events stamped in [lo, hi] (the earliest), and how many there are."""
        found: List[NpuEvent] = []
        count = 0
        for batch in reversed(self.batches):
            if not len(batch):
                continue
            if batch.last() < lo:
                break  # older batches end earlier still
            i, j = batch.span(lo, hi)
            if j > i:
                count += j - i
                found[:0] = batch.slice(i, min(j, i + most))
        return found[:most], count


class _BlockEvents:
    """A batch of the ring as a normalized block (events made on demand)."""

    __slots__ = ("nb",)

    def __init__(self, nb: NormBlock) -> None:
        self.nb = nb

    def __len__(self) -> int:
        return len(self.nb)

    def last(self) -> int:
        return int(self.nb.block.ts[-1])

    def span(self, lo: int, hi: int) -> Tuple[int, int]:
        ts = self.nb.block.ts
        return int(np.searchsorted(ts, lo, side="left")), int(np.searchsorted(ts, hi, side="right"))

    def slice(self, i: int, j: int) -> List[NpuEvent]:
        return [self.nb.event(k) for k in range(i, j)]




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


def select_rows(flt: LogFilter, nb: NormBlock, comm_of: Callable[[int], str]) -> np.ndarray:
    """`select` on a normalized block: the rows that match, in order (the device, kinds and pid on columns;
    the task name once per pid; the line text only for the rows left, as events)."""
    keep: np.ndarray = np.ones(len(nb), dtype=bool)
    if flt.dev is not None:
        keep &= nb.dev == flt.dev
    if flt.kinds:
        keep &= kind_in(nb.kind, [KIND_CODE[k] for k in flt.kinds if k in KIND_CODE])
    pids = nb.block.pid
    if flt.pid is not None:
        keep &= pids == flt.pid
    if flt.comm:
        named = [p for p in sorted_distinct(pids[keep]).tolist() if flt.comm in comm_of(p)]
        keep &= member_of(pids, np.array(named, dtype=np.int64))
    rows = np.flatnonzero(keep)
    if flt.text:
        events = [(r, nb.event(r)) for r in rows.tolist()]
        rows = np.array([r for r, ev in events if flt.text in row_plain(log_row(ev, comm_of(ev.pid))).lower()],
                        dtype=np.int64)  # fmt: skip
    return rows
