"""Device health over the session: ECC counts, temperature, PCIe link, npu-smi health (per device).

Inputs: `ecc` events carrying `ce_count`/`uce_count` (the driver's DMS reports, npu-smi's ECC table),
`ecc`/`thermal` events carrying `temp_c`, `link` events from sysfs (`speed`, `width`, `max_speed`, `max_width`,
`degraded`) and the "health" log events of npu-smi (`health`, `previous`).

Findings: `link_degraded` when a link reports itself trained below its maximum (once per degradation: a link
back at full speed and width ends it), `health` when npu-smi's health leaves OK (and when it changes while not
OK). The summary holds per device the first and last ECC counts with their deltas, the highest temperature,
the last link state and health; `check` rules read them ("ECC delta below N", "link at full width").
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

OK_HEALTH = ("OK", "Healthy")
LOG_OPS = ("health", "npu_smi")  # the log events read: npu-smi's health changes, its table's chip readings
# what the agent reads of an npu_smi reading
READING_KEYS = ("name", "bus_id", "used_mb", "total_mb", "memory", "power_w", "aicore_pct", "health")


class DeviceHealth:
    __slots__ = ("ce", "degraded", "ecc_first_ns", "health", "link", "max_temp", "reading", "temp", "uce",
                 "uce_first_ns")  # fmt: skip

    def __init__(self) -> None:
        self.ce: List[int] = []  # [first, last]
        self.uce: List[int] = []
        self.max_temp: Optional[int] = None
        self.temp: Optional[int] = None  # the latest
        self.link: Dict[str, Any] = {}
        self.degraded = False
        self.health: Optional[str] = None
        self.reading: Dict[str, Any] = {}  # npu-smi's latest table values of the chip (READING_KEYS)
        self.ecc_first_ns: Optional[int] = None  # the first report counting any error (its time)
        self.uce_first_ns: Optional[int] = None  # the first counting an uncorrectable one

    def as_dict(self) -> Dict[str, Any]:
        return {
            "ce_first": self.ce[0] if self.ce else None, "ce_last": self.ce[-1] if self.ce else None,
            "ce_delta": self.ce[-1] - self.ce[0] if self.ce else 0,
            "uce_first": self.uce[0] if self.uce else None, "uce_last": self.uce[-1] if self.uce else None,
            "uce_delta": self.uce[-1] - self.uce[0] if self.uce else 0,
            "max_temp_c": self.max_temp, "link": dict(sorted(self.link.items())), "link_degraded": self.degraded,
            "health": self.health,
        }  # fmt: skip


class HealthDetector:
    def __init__(self) -> None:
        self.devices: Dict[int, DeviceHealth] = {}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        for ev in events:
            kind = ev.kind
            if ev.dev is None or kind not in ("ecc", "thermal", "link", "log"):
                continue
            if kind == "log" and ev.op not in LOG_OPS:
                continue
            dev = self.devices.get(ev.dev)
            if dev is None:
                dev = self.devices[ev.dev] = DeviceHealth()
            args = ev.args
            if kind == "ecc":
                _count(dev.ce, args.get("ce_count"))
                _count(dev.uce, args.get("uce_count"))
                _ecc_times(dev, ev)
            temp = args.get("temp_c")
            if kind in ("ecc", "thermal") and isinstance(temp, int):
                dev.max_temp = temp if dev.max_temp is None else max(dev.max_temp, temp)
                dev.temp = temp
            if kind == "link" and "degraded" in args:
                self._link(ev, dev, out)
            if kind == "log" and ev.op == "health":
                self._health(ev, dev, out)
            elif kind == "log":
                _reading(dev, args)
        return out

    def _link(self, ev: NpuEvent, dev: DeviceHealth, out: List[Finding]) -> None:
        keys = ("speed", "width", "max_speed", "max_width", "bdf")
        dev.link = {k: ev.args[k] for k in keys if k in ev.args}
        degraded = bool(ev.args.get("degraded"))
        if degraded and not dev.degraded:
            out.append(Finding("link_degraded", ev.dev, "pcie_link", ev.ts_ns, dict(sorted(dev.link.items()))))
        dev.degraded = degraded

    def _health(self, ev: NpuEvent, dev: DeviceHealth, out: List[Finding]) -> None:
        health = ev.args.get("health")
        if not isinstance(health, str):
            return
        previous, dev.health = dev.health, health
        if health not in OK_HEALTH and health != previous:
            codes = ev.args.get("error_codes")
            details = {"health": health, "previous": previous, "error_codes": codes if isinstance(codes, list) else []}
            out.append(Finding("health", ev.dev, "health", ev.ts_ns, details))

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        return {"devices": {str(d): h.as_dict() for d, h in sorted(self.devices.items())}}

    def ecc_times(self) -> Dict[int, Dict[str, int]]:
        """Device -> when its ECC reports first counted an error (`ecc_first_ns`) and an uncorrectable one
        (`uce_first_ns`), for the devices that had any: the first driver-level evidence of a failing card."""
        out: Dict[int, Dict[str, int]] = {}
        for dev, h in sorted(self.devices.items()):
            times = {k: v for k, v in (("ecc_first_ns", h.ecc_first_ns), ("uce_first_ns", h.uce_first_ns)) if v}
            if times:
                out[dev] = times
        return out

    def readings(self) -> Dict[int, Dict[str, Any]]:
        """Device -> its latest values (copies): temp_c, ce_count, uce_count, link {speed, width, max_speed,
        max_width, bdf}, link_degraded, health, and npu-smi's READING_KEYS where its table printed them."""
        return {dev: {"temp_c": h.temp, "ce_count": h.ce[-1] if h.ce else None,
                      "uce_count": h.uce[-1] if h.uce else None, "link": dict(h.link),
                      "link_degraded": h.degraded, "health": h.health, **h.reading}
                for dev, h in sorted(self.devices.items())}  # fmt: skip


def _reading(dev: DeviceHealth, args: Dict[str, Any]) -> None:
    """An npu-smi table reading of the chip: its values (None where printed NA) and its temperature. Its health
    is left to the "health" events (a change comes as one, with its finding): the summary and findings are
    the same with or without readings."""
    dev.reading = {k: args[k] for k in READING_KEYS if args.get(k) is not None}
    temp = args.get("temp_c")
    if isinstance(temp, int) and not isinstance(temp, bool):
        dev.temp = temp


def _ecc_times(dev: DeviceHealth, ev: NpuEvent) -> None:
    ce, uce = (ev.args.get(k) for k in ("ce_count", "uce_count"))
    counted = [v for v in (ce, uce) if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if counted and dev.ecc_first_ns is None:
        dev.ecc_first_ns = ev.ts_ns
    if isinstance(uce, int) and not isinstance(uce, bool) and uce > 0 and dev.uce_first_ns is None:
        dev.uce_first_ns = ev.ts_ns


def _count(series: List[int], value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        if len(series) < 2:
            series.append(value)
        else:
            series[1] = value
