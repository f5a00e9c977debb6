"""Faults: kernel fault blocks and the driver's word that a device is dead or unreachable; application errors.

`FaultDetector` reads `fault` events. One of op "kernel_fault" (a multi-line block of the kernel log read as one
event by npu_trace.device.kfault) is a `kernel_fault` finding at once: op = its kind (soft_lockup, oops, ...),
details = the CPU and task, the call trace's functions and the NPU driver's among them, the block's text. Any
other op (`Device is abnormal.`, `... send_msg unsuccessful. (ret=-19; ...)`) is a `device_fault` finding on the
event's device: the reports of one (device, op) within `COALESCE_NS` of the first are one finding with their
count, released once time has passed that window (event stamps or `advance`), so its content depends only on
the events, never on when it was judged.

`AppErrorDetector` makes every `app_error` event (an application's log naming a driver-level error,
npu_trace.device.applog) an `app_error` finding; which driver-level finding explains it is decided when the
report is built (`npu_trace.detectors.links.explain`), when every finding is known.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

S = 1_000_000_000
COALESCE_NS = 60 * S
_KERNEL_KEYS = ("cpu", "comm", "functions", "driver_functions", "driver_modules", "lines", "text", "end_ts_ns",
                "source")  # fmt: skip
_APP_SKIP = frozenset(("source",))


class _Open:
    __slots__ = ("count", "ev", "last")

    def __init__(self, ev: NpuEvent) -> None:
        self.ev, self.last, self.count = ev, ev.ts_ns, 1


class FaultDetector:
    def __init__(self, coalesce_ns: int = COALESCE_NS) -> None:
        self.window = coalesce_ns
        self.open: Dict[Tuple[int, str], _Open] = {}
        self.counts: Dict[str, int] = {}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        for ev in events:
            if self.open:
                out += self._release(ev.ts_ns)
            if ev.kind != "fault":
                continue
            if ev.op == "kernel_fault":
                out.append(self._kernel(ev))
            else:
                self._device(ev)
        return out

    def advance(self, now: int) -> List[Finding]:
        return self._release(now) if self.open else []

    def flush(self) -> List[Finding]:
        return self._release(None)

    def summary(self) -> Dict[str, Any]:
        return {"total": sum(self.counts.values()), "by_kind": dict(sorted(self.counts.items()))}

    def _kernel(self, ev: NpuEvent) -> Finding:
        kind = str(ev.args.get("fault", "kernel_fault"))
        self.counts[f"kernel_fault:{kind}"] = self.counts.get(f"kernel_fault:{kind}", 0) + 1
        details = {k: ev.args[k] for k in _KERNEL_KEYS if k in ev.args}
        details["pid"] = ev.pid
        return Finding("kernel_fault", ev.dev, kind, ev.ts_ns, details)

    def _device(self, ev: NpuEvent) -> None:
        key = (-1 if ev.dev is None else ev.dev, ev.op)
        held = self.open.get(key)
        if held is None:
            self.open[key] = _Open(ev)
        else:
            held.count += 1
            held.last = max(held.last, ev.ts_ns)

    def _release(self, now: Any) -> List[Finding]:
        """The open device faults whose window ended before `now` (None: all), in time order."""
        due = [k for k, o in self.open.items() if now is None or now > o.ev.ts_ns + self.window]
        out = [self._device_finding(self.open.pop(k)) for k in sorted(due, key=lambda k: (self.open[k].ev.ts_ns, k))]
        return out

    def _device_finding(self, held: _Open) -> Finding:
        ev = held.ev
        self.counts[f"device_fault:{ev.op}"] = self.counts.get(f"device_fault:{ev.op}", 0) + 1
        details = {k: v for k, v in sorted(ev.args.items()) if isinstance(v, (int, str)) and k != "seq"}
        details.update(count=held.count, last_ts_ns=held.last, unreachable=_unreachable(ev))
        return Finding("device_fault", ev.dev, ev.op, ev.ts_ns, details)


def _unreachable(ev: NpuEvent) -> str:
    """What the driver's words mean: the device answered nothing (ENODEV) or is marked abnormal."""
    ret = ev.args.get("ret")
    if ret == -19:
        return "no such device (ENODEV): the host can no longer reach it"
    if ev.op == "device_abnormal":
        return "the driver marks the device abnormal and refuses to send it messages"
    return f"a message to the device failed (ret={ret})"


class AppErrorDetector:
    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        return [self._finding(ev) for ev in events if ev.kind == "app_error"]

    def _finding(self, ev: NpuEvent) -> Finding:
        self.counts[ev.op] = self.counts.get(ev.op, 0) + 1
        details = {k: v for k, v in sorted(ev.args.items()) if k not in _APP_SKIP}
        details["pid"] = ev.pid
        return Finding("app_error", ev.dev, ev.op, ev.ts_ns, details)

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        return {"total": sum(self.counts.values()), "by_class": dict(sorted(self.counts.items()))}
