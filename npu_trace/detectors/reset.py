"""Reset sequences: a declarative per-device state machine, defined as data in the profile (`reset`).

Definition keys:
    steps                the expected step names, in order (reset_step events carry args["step"])
    end                  steps after which the device is healthy again: the sequence is complete
    triggers             [{"kind": k, "op": o}, ...] ("op" optional): events that may start a reset (timeouts,
                         heartbeat lost); the last one within `trigger_window_ns` before the first step is
                         the sequence's trigger
    step_timeout_ns      the longest wait for the next step; longer: the sequence is incomplete
    precursor_window_ns  how far before the trigger (or the first step, without one) precursors are summarised
    merge_ns             (default 0) a step already in the open sequence, seen again within this time (the same
                         step told by another channel: ftrace, kmsg, a uevent), is merged into it: one step
                         with the channels that told it (`sources`). A sequence that reached an `end` step
                         stays open this long for the other channels' copies.

Events come in time order (the timeline's). A sequence opens at the first reset step of a device with none
open. It closes complete (an `end` step), failed (a step with ret != 0), or incomplete (no step for
step_timeout_ns, judged when time passes that deadline: at the next event of any device, or at `advance(now)`,
the timeline's watermark while the host is quiet, or the session's end). Each closed sequence is one
`reset_sequence` finding at its first step's time; its content does not depend on when it was judged.

Precursors (per device, within the window): timeout counts (total and per op), ECC counts (first/last of
ce_count and uce_count and their deltas; the baseline is the last report before the window when known, else
the first in it) and the highest temperature (temp_c of ecc/thermal events).
History is bounded: entries older than precursor + trigger window are pruned, at most MAX_HISTORY kept.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

S = 1_000_000_000
MAX_HISTORY = 10_000
DEFAULTS: Dict[str, Any] = {
    "steps": [], "end": [], "triggers": [{"kind": "timeout"}], "trigger_window_ns": 600 * S,
    "step_timeout_ns": 120 * S, "precursor_window_ns": 600 * S, "merge_ns": 0,
}  # fmt: skip

Ecc = Tuple[int, int, int]  # (ts, ce_count, uce_count)


@dataclass
class ResetRun:
    dev: int
    steps: List[Tuple[str, int, int, List[str]]]  # (name, ts, ret, channels that told it)
    trigger: Optional[NpuEvent]
    precursor: Dict[str, Any]
    ended_at: Optional[int] = None  # ts of its `end` step, while it waits merge_ns for other channels' copies

    @property
    def first_ts(self) -> int:
        return self.steps[0][1]

    @property
    def last_ts(self) -> int:
        return self.steps[-1][1]


@dataclass
class DeviceHistory:
    timeouts: Deque[Tuple[int, str, str]] = field(default_factory=deque)  # (ts, op, channel)
    ecc: Deque[Ecc] = field(default_factory=deque)
    temps: Deque[Tuple[int, int]] = field(default_factory=deque)
    ecc_before: Optional[Ecc] = None  # the last ECC report pruned from `ecc`
    trigger: Optional[NpuEvent] = None

    def prune(self, oldest: int) -> None:
        for queue in (self.timeouts, self.ecc, self.temps):
            while queue and (queue[0][0] < oldest or len(queue) > MAX_HISTORY):
                item = queue.popleft()
                if queue is self.ecc:
                    self.ecc_before = item  # type: ignore[assignment]


class ResetDetector:
    def __init__(self, definition: Optional[Mapping[str, Any]] = None) -> None:
        cfg = {**DEFAULTS, **(definition or {})}
        self.enabled = bool(definition)
        self.steps: List[str] = list(cfg["steps"])
        self.end = frozenset(cfg["end"])
        self.triggers = [(t["kind"], t.get("op")) for t in cfg["triggers"]]
        self.trigger_window = int(cfg["trigger_window_ns"])
        self.step_timeout = int(cfg["step_timeout_ns"])
        self.window = int(cfg["precursor_window_ns"])
        self.merge = int(cfg["merge_ns"])
        self.merged = 0  # steps merged into one told by another channel
        self._deadline = math.inf  # the earliest time an open sequence can expire (inf: none open)
        self.relevant = frozenset(("timeout", "ecc", "thermal", "reset_step", *(k for k, _ in self.triggers)))
        self.history: Dict[int, DeviceHistory] = {}
        self.open: Dict[int, ResetRun] = {}
        self.last_status: Dict[int, str] = {}
        self.counts: Dict[str, int] = {"complete": 0, "failed": 0, "incomplete": 0}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        if not self.enabled:
            return out
        relevant = self.relevant
        for ev in events:
            if ev.ts_ns > self._deadline:  # an open sequence may have expired (checked only when one can)
                self._expire(ev.ts_ns, out)
            if ev.dev is not None and ev.kind in relevant:
                self._event(ev, out)
                self._deadline = self._next_deadline()
        return out

    def advance(self, now: int) -> List[Finding]:
        """Time has reached `now` (nothing earlier is still to come): close what expired by then."""
        out: List[Finding] = []
        if now > self._deadline:
            self._expire(now, out)
        return out

    def _next_deadline(self) -> float:
        """The earliest time after which _expire can close an open sequence (inf: none open)."""
        return min(
            (s.ended_at + self.merge if s.ended_at is not None else s.last_ts + self.step_timeout
             for s in self.open.values()),
            default=math.inf,
        )  # fmt: skip

    def flush(self) -> List[Finding]:
        out = [self._close(seq, "complete", None) for seq in self._take_open(lambda s: s.ended_at is not None)]
        out.extend(self._close(seq, "incomplete", "session_end") for seq in self._take_open(lambda s: True))
        self._deadline = math.inf
        return out

    def summary(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"sequences": sum(self.counts.values()), **self.counts}
        if self.merge:
            out["merged_steps"] = self.merged
        return out

    def open_sequences(self) -> List[OpenSequence]:
        """The sequences still open (read-only values, by device): a reset as it happens."""
        return [_open_view(run) for _, run in sorted(self.open.items())]

    # ---- per event ----------------------------------------------------------------------------------
    def _event(self, ev: NpuEvent, out: List[Finding]) -> None:
        dev = int(ev.dev)  # type: ignore[arg-type]
        hist = self.history.setdefault(dev, DeviceHistory())
        hist.prune(ev.ts_ns - self.window - self.trigger_window)
        if ev.kind == "timeout" and not self._told_before(hist, ev):
            hist.timeouts.append((ev.ts_ns, ev.op, str(ev.args.get("source", "ftrace"))))
        if ev.kind == "ecc" and isinstance(ev.args.get("ce_count"), int):
            uce = ev.args.get("uce_count", 0)
            hist.ecc.append((ev.ts_ns, int(ev.args["ce_count"]), int(uce) if isinstance(uce, int) else 0))
        if ev.kind in ("ecc", "thermal") and isinstance(ev.args.get("temp_c"), int):
            hist.temps.append((ev.ts_ns, int(ev.args["temp_c"])))
        if any(ev.kind == k and (o is None or ev.op == o) for k, o in self.triggers):
            hist.trigger = ev
        if ev.kind == "reset_step":
            self._step(dev, ev, hist, out)

    def _told_before(self, hist: DeviceHistory, ev: NpuEvent) -> bool:
        """The same timeout already told by another channel within merge_ns (counted once in precursors)."""
        if not self.merge:
            return False
        source = str(ev.args.get("source", "ftrace"))
        for ts, op, told_by in reversed(hist.timeouts):
            if ev.ts_ns - ts > self.merge:
                return False
            if op == ev.op and told_by != source:
                return True
        return False

    def _step(self, dev: int, ev: NpuEvent, hist: DeviceHistory, out: List[Finding]) -> None:
        name = str(ev.args.get("step", ev.op))
        raw_ret = ev.args.get("ret", 0)
        ret = int(raw_ret) if isinstance(raw_ret, int) else 0
        channel = str(ev.args.get("source", "ftrace"))
        seq = self.open.get(dev)
        if seq is not None and self._merge(seq, name, ev.ts_ns, ret, channel):
            if ret != 0:
                out.append(self._close(self.open.pop(dev), "failed", "step_failed"))
            return
        if seq is not None and seq.ended_at is not None:  # a new step after the end: that sequence is over
            out.append(self._close(self.open.pop(dev), "complete", None))
            seq = None
        if seq is None:
            seq = self.open[dev] = self._start(dev, ev.ts_ns, hist)
        seq.steps.append((name, ev.ts_ns, ret, [channel]))
        if ret != 0:
            out.append(self._close(self.open.pop(dev), "failed", "step_failed"))
        elif name in self.end:
            if self.merge:
                seq.ended_at = ev.ts_ns
            else:
                out.append(self._close(self.open.pop(dev), "complete", None))

    def _merge(self, seq: ResetRun, name: str, ts: int, ret: int, channel: str) -> bool:
        """Merge a step another channel already told (same name, within merge_ns) into it."""
        if not self.merge:
            return False
        for i in range(len(seq.steps) - 1, -1, -1):
            told, told_ts, told_ret, channels = seq.steps[i]
            if told == name and abs(ts - told_ts) <= self.merge:
                if channel not in channels:
                    channels.append(channel)
                seq.steps[i] = (told, min(ts, told_ts), told_ret or ret, channels)
                self.merged += 1
                return True
        return False

    def _start(self, dev: int, ts: int, hist: DeviceHistory) -> ResetRun:
        trigger = hist.trigger
        if trigger is not None and ts - trigger.ts_ns > self.trigger_window:
            trigger = None
        hist.trigger = None
        ref = ts if trigger is None else trigger.ts_ns
        return ResetRun(dev, [], trigger, self._precursor(hist, ref))

    def _expire(self, now: int, out: List[Finding]) -> None:
        for seq in self._take_open(lambda s: s.ended_at is not None and now - s.ended_at > self.merge):
            out.append(self._close(seq, "complete", None))
        for seq in self._take_open(lambda s: now - s.last_ts > self.step_timeout):
            out.append(self._close(seq, "incomplete", "step_timeout"))
        self._deadline = self._next_deadline()

    def _take_open(self, pred: Callable[[ResetRun], bool]) -> List[ResetRun]:
        done = [self.open.pop(d) for d in sorted(self.open) if pred(self.open[d])]
        return done

    # ---- findings -----------------------------------------------------------------------------------
    def _close(self, seq: ResetRun, status: str, reason: Optional[str]) -> Finding:
        self.counts[status] += 1
        self.last_status[seq.dev] = status
        names = [step[0] for step in seq.steps]
        details = {
            "status": status, "reason": reason, "steps": _steps(seq),
            "missing": [s for s in self.steps if s not in names],
            "out_of_order": self._out_of_order(names), "duration_ns": seq.last_ts - seq.first_ts,
            "failed_step": names[-1] if status == "failed" else None,
            "waiting_for": self._next(names) if status == "incomplete" else None,
            "trigger": _trigger(seq.trigger), "precursor": seq.precursor,
            "since_trigger_ns": None if seq.trigger is None else seq.last_ts - seq.trigger.ts_ns,
        }  # fmt: skip
        return Finding("reset_sequence", seq.dev, "reset", seq.first_ts, details)

    def _out_of_order(self, names: List[str]) -> bool:
        idx = [self.steps.index(n) for n in names if n in self.steps]
        return any(b < a for a, b in zip(idx, idx[1:]))

    def _next(self, names: List[str]) -> Optional[str]:
        known = [self.steps.index(n) for n in names if n in self.steps]
        after = max(known) + 1 if known else 0
        return self.steps[after] if after < len(self.steps) else None

    def _precursor(self, hist: DeviceHistory, ref: int) -> Dict[str, Any]:
        lo = ref - self.window
        timeouts = [op for ts, op, _ in hist.timeouts if lo <= ts <= ref]
        by_op: Dict[str, int] = {}
        for op in timeouts:
            by_op[op] = by_op.get(op, 0) + 1
        temps = [t for ts, t in hist.temps if lo <= ts <= ref]
        return {
            "window_ns": self.window, "from_ns": lo, "to_ns": ref, "timeouts": len(timeouts),
            "timeouts_by_op": dict(sorted(by_op.items())), "ecc": _ecc(hist, lo, ref),
            "max_temp_c": max(temps) if temps else None,
        }  # fmt: skip


def _ecc(hist: DeviceHistory, lo: int, ref: int) -> Dict[str, Any]:
    inside = [e for e in hist.ecc if lo <= e[0] <= ref]
    before = [e for e in hist.ecc if e[0] < lo]
    base = before[-1] if before else hist.ecc_before
    if not inside:
        return {"reports": 0, "ce_first": None, "ce_last": None, "ce_delta": 0, "uce_first": None, "uce_last": None,
                "uce_delta": 0}  # fmt: skip
    first = base if base is not None else inside[0]
    last = inside[-1]
    return {
        "reports": len(inside), "ce_first": first[1], "ce_last": last[1], "ce_delta": last[1] - first[1],
        "uce_first": first[2], "uce_last": last[2], "uce_delta": last[2] - first[2],
    }  # fmt: skip


def _steps(seq: ResetRun) -> List[Dict[str, Any]]:
    return [{"step": n, "ts_ns": ts, "ret": ret, "since_start_ns": ts - seq.first_ts, "sources": sorted(channels)}
            for n, ts, ret, channels in seq.steps]  # fmt: skip


class OpenSequence(NamedTuple):
    dev: int
    first_ts: int
    steps: List[Tuple[str, int, int]]  # (step, ts, ret)
    precursor: Dict[str, Any]
    trigger: Optional[Dict[str, Any]]  # kind, op, ts_ns


def _open_view(run: ResetRun) -> OpenSequence:
    trigger = None if run.trigger is None else {"kind": run.trigger.kind, "op": run.trigger.op,
                                                "ts_ns": run.trigger.ts_ns}  # fmt: skip
    steps = [(name, ts, ret) for name, ts, ret, _ in run.steps]
    return OpenSequence(run.dev, run.first_ts, steps, dict(run.precursor), trigger)


def _trigger(ev: Optional[NpuEvent]) -> Optional[Dict[str, Any]]:
    if ev is None:
        return None
    args = {k: v for k, v in sorted(ev.args.items()) if isinstance(v, (int, str)) and k != "entry_ts_ns"}
    return {"kind": ev.kind, "op": ev.op, "ts_ns": ev.ts_ns, "args": args}
