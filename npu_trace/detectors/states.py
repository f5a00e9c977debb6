"""Device states: the one state machine of each NPU, from its events and its closed reset sequences.

    ok -> degraded     a timeout of any kind (a driver timeout, a wait ending in -ETIMEDOUT, heartbeat lost):
                       the precursors of a reset
    * -> resetting     a reset step
    * -> offline       a step after which the device is gone (the profile's `offline` steps: removed, in reset,
                       off the bus), a reset step that failed, or a reset that stopped: no step for the
                       definition's step_timeout_ns after the last (offline at that deadline, judged when time
                       passes it, as the reset detector judges the sequence incomplete), or none before the end
                       or the driver saying the device is dead or unreachable (a "fault" event naming it:
                       `Device is abnormal.`, `send_msg unsuccessful. (ret=-19; ...)`)
    * -> ok            a step after which the device is healthy again (the profile's `end` steps)

An allocation failure changes no state; it is the device's last error. Every change is a function of the
events and their stamps only (never of how they were batched). `states()` is the current view,
`take_transitions()` hands over every change since the last call (for exporters and live views), and
`summary()` gives, per device, its state, since when, its last error and how often it entered each state.
Time comes only from event timestamps; the same events always give the same states.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence

from npu_trace.detectors.base import Finding
from npu_trace.detectors.reset import DEFAULTS as RESET_DEFAULTS
from npu_trace.events import NpuEvent

STATES = ("ok", "degraded", "resetting", "offline")
DEFAULT_OFFLINE = ("remove", "reset_begin", "bus_remove")
MAX_TRANSITIONS = 10_000  # kept for take_transitions() when nobody takes them
_KINDS = frozenset(("timeout", "alloc_fail", "reset_step", "fault"))


class Transition(NamedTuple):
    ts_ns: int
    dev: int
    state: str
    why: str


@dataclass
class DeviceState:
    state: str = "ok"
    since_ns: Optional[int] = None
    last_error: str = ""
    entered: Dict[str, int] = field(default_factory=dict)


class DeviceStateDetector:
    def __init__(self, reset: Optional[Mapping[str, Any]] = None) -> None:
        definition = {**RESET_DEFAULTS, **(reset or {})}
        self.end = frozenset(definition.get("end", ()))
        self.offline = frozenset(definition.get("offline", DEFAULT_OFFLINE))
        self.step_timeout = int(definition["step_timeout_ns"])
        self.devices: Dict[int, DeviceState] = {}
        self.transitions: Deque[Transition] = deque(maxlen=MAX_TRANSITIONS)
        self._stalls: Dict[int, int] = {}  # device -> its reset's last step, while the reset is under way
        self._deadline = math.inf  # the earliest stall deadline

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        kinds = _KINDS
        for ev in events:
            if ev.ts_ns > self._deadline:
                self._expire(ev.ts_ns)
            if ev.kind in kinds and ev.dev is not None:
                self._event(ev)
        return []

    def advance(self, now: int) -> List[Finding]:
        if now > self._deadline:
            self._expire(now)
        return []

    def flush(self) -> List[Finding]:
        for dev, last in sorted(self._stalls.items()):
            self._enter(dev, "offline", last, "reset incomplete: session_end")
        self._stalls.clear()
        self._deadline = math.inf
        return []

    def _expire(self, now: int) -> None:
        for dev, last in sorted(self._stalls.items()):
            if now - last > self.step_timeout:
                del self._stalls[dev]
                self._enter(dev, "offline", last + self.step_timeout, "reset incomplete: step_timeout")
        self._deadline = min(self._stalls.values(), default=math.inf) + self.step_timeout

    # ---- views -------------------------------------------------------------------------------------------
    def states(self) -> Dict[int, DeviceState]:
        """Device -> its state now (copies: read-only for the caller)."""
        return {dev: DeviceState(s.state, s.since_ns, s.last_error, dict(s.entered)) for dev, s in self.devices.items()}

    def take_transitions(self) -> List[Transition]:
        out = list(self.transitions)
        self.transitions.clear()
        return out

    def summary(self) -> Dict[str, Any]:
        return {"devices": {str(dev): {"state": s.state, "since_ns": s.since_ns, "last_error": s.last_error,
                                       "entered": dict(sorted(s.entered.items()))}
                            for dev, s in sorted(self.devices.items())}}  # fmt: skip

    # ---- the machine -----------------------------------------------------------------------------------------
    def _event(self, ev: NpuEvent) -> None:
        dev = int(ev.dev)  # type: ignore[arg-type]
        st = self._device(dev)
        if ev.kind == "timeout":
            st.last_error = f"timeout {ev.op}"
            if st.state == "ok":
                self._enter(dev, "degraded", ev.ts_ns, st.last_error)
        elif ev.kind == "alloc_fail":
            st.last_error = f"alloc failed: {ev.args.get('size')} bytes"
        elif ev.kind == "fault":
            st.last_error = f"driver: {ev.op}" + (f" ({ev.args['ret']})" if "ret" in ev.args else "")
            self._enter(dev, "offline", ev.ts_ns, st.last_error)
        else:
            self._step(dev, st, ev)

    def _step(self, dev: int, st: DeviceState, ev: NpuEvent) -> None:
        step = str(ev.args.get("step", ev.op))
        ret = ev.args.get("ret", 0)
        failed = isinstance(ret, int) and ret != 0
        if failed or step in self.end:
            self._stalls.pop(dev, None)
        else:
            self._stalls[dev] = ev.ts_ns
        self._deadline = min(self._stalls.values(), default=math.inf) + self.step_timeout
        if failed:
            st.last_error = f"reset step {step} failed ({ret})"
            self._enter(dev, "offline", ev.ts_ns, st.last_error)
            return
        state = "ok" if step in self.end else "offline" if step in self.offline else "resetting"
        self._enter(dev, state, ev.ts_ns, f"reset step {step}")

    def _device(self, dev: int) -> DeviceState:
        st = self.devices.get(dev)
        if st is None:
            st = self.devices[dev] = DeviceState()
        return st

    def _enter(self, dev: int, state: str, ts: int, why: str) -> None:
        st = self._device(dev)
        if st.state == state:
            return
        st.state, st.since_ns = state, ts
        st.entered[state] = st.entered.get(state, 0) + 1
        self.transitions.append(Transition(ts, dev, state, why))
