"""Parsers of `npu-smi` outputs (the formats of hicann/driver npucli, see the reference's §8) and the health
events their changes make. Pure: text in, values out.

* `parse_table(text)` / `parse_info(text)`: the `npu-smi info` table in every layout seen in the field
  (npu_trace.device.npusmi_info) -> chips, process rows and what was not whole.
* `parse_fields(text)`: the key/value outputs of `info -t ecc|temp|sensors|health|pcie-err|memory` (lines
  `\\t%-30s : %s`) -> {snake_case key: int | str}; "NA" stays a string.
* `HealthTracker.update(dev, fields, ts_ns)` -> the NpuEvents of what changed: "ecc" (ce_count/uce_count = HBM
  single/double-bit counts, with their deltas), "thermal" (temp_c), "log" op "health" (OK/Warning/Alarm/Critical/
  UNKNOWN), "link" op "pcie_err" (PCIe error counters).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from npu_trace.device.npusmi_info import ChipInfo, InfoTable, ProcessInfo, parse_info, parse_table
from npu_trace.events import NpuEvent

__all__ = ["ChipInfo", "HealthTracker", "InfoTable", "ProcessInfo", "error_codes", "number", "parse_fields",
           "parse_info", "parse_table", "snake", "temperature"]  # fmt: skip

MAX_OUTPUT = 1 << 20  # characters of one npu-smi output parsed at most
HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
_FIELD = re.compile(r"^\s{0,16}(?P<k>[A-Za-z][^:\n]{0,80}?)\s{0,60}:\s?(?P<v>[^\n]{0,512})$")
_NUM = re.compile(r"^-?\d{1,19}(?:\.\d{1,6})?$")
_KEY_CLEAN = re.compile(r"[^a-z0-9]+")

# npu-smi field -> the name events use
ECC_CE = "hbm_single_bit_error_count"
ECC_UCE = "hbm_double_bit_error_count"
TEMP_KEYS = ("npu_temperature_c", "temperature_c", "soc_max_temperature_c")
HBM_TEMP = ("hbm_temperature_c",)
# keys some versions print otherwise: "Health Status : OK" (MindCluster's 23.0.5 collection) is "Health : OK"
KEY_ALIASES = {"health_status": "health"}
PCIE_KEYS = ("tx_error_count", "rx_error_count", "lcrc_error_count", "ecrc_error_count", "retry_count",
             "pcs_rx_error_count", "phy_lane_error_count", "dl_lcrc_error_count", "dl_dcrc_error_count")  # fmt: skip


def snake(key: str) -> str:
    return _KEY_CLEAN.sub("_", key.strip().lower()).strip("_")


def number(text: str) -> Any:
    """int (or float) for a number, the stripped text otherwise."""
    text = text.strip()
    if _NUM.match(text):
        return float(text) if "." in text else int(text)
    return text


def parse_fields(text: str) -> Dict[str, Any]:
    """`\\tKey : value` lines -> {snake key: value}; other lines are ignored (the first of a repeated key wins)."""
    out: Dict[str, Any] = {}
    for line in text[:MAX_OUTPUT].splitlines():
        m = _FIELD.match(line)
        if m:
            key = snake(m.group("k"))
            out.setdefault(KEY_ALIASES.get(key, key), number(m.group("v")))
    return out


def temperature(fields: Dict[str, Any]) -> Optional[int]:
    for key in TEMP_KEYS:
        if isinstance(fields.get(key), (int, float)):
            return int(fields[key])
    return None


def error_codes(fields: Dict[str, Any]) -> List[str]:
    codes = fields.get("error_code")
    if not isinstance(codes, str) or codes in ("", "NA"):
        return [] if not isinstance(codes, int) else [str(codes)]
    return [c for c in re.split(r"[\s,]+", codes) if c]


class HealthTracker:
    """The last reading per device; update() -> events for what changed (the first reading counts as a change)."""

    def __init__(self) -> None:
        self.last: Dict[int, Dict[str, Any]] = {}

    def update(self, dev: int, fields: Dict[str, Any], ts_ns: int) -> List[NpuEvent]:
        old = self.last.setdefault(dev, {})
        out: List[NpuEvent] = []
        for make in (self._ecc, self._temp, self._health, self._pcie):
            ev = make(dev, fields, old, ts_ns)
            if ev is not None:
                out.append(ev)
        old.update(fields)
        return out

    @staticmethod
    def _ecc(dev: int, f: Dict[str, Any], old: Dict[str, Any], ts: int) -> Optional[NpuEvent]:
        ce, uce = f.get(ECC_CE), f.get(ECC_UCE)
        uce = uce if isinstance(uce, int) else 0
        prev_ce, prev_uce = old.get(ECC_CE), old.get(ECC_UCE)
        if not isinstance(ce, int) or (ce, uce) == (prev_ce, prev_uce if isinstance(prev_uce, int) else 0):
            return None
        args: Dict[str, Any] = {"source": "npu-smi", "ce_count": ce, "uce_count": uce,
                                "ce_delta": ce - prev_ce if isinstance(prev_ce, int) else 0,
                                "uce_delta": uce - prev_uce if isinstance(prev_uce, int) else 0}  # fmt: skip
        return NpuEvent(ts, "ecc", dev, "npu-smi", -1, -1, args)

    @staticmethod
    def _temp(dev: int, f: Dict[str, Any], old: Dict[str, Any], ts: int) -> Optional[NpuEvent]:
        temp = temperature(f)
        hbm = f.get(HBM_TEMP[0])
        if temp is None and isinstance(hbm, int):
            temp = hbm
        if temp is None or temp == temperature(old):
            return None
        args: Dict[str, Any] = {"source": "npu-smi", "temp_c": temp}
        if isinstance(hbm, int):
            args["hbm_temp_c"] = hbm
        return NpuEvent(ts, "thermal", dev, "npu-smi", -1, -1, args)

    @staticmethod
    def _health(dev: int, f: Dict[str, Any], old: Dict[str, Any], ts: int) -> Optional[NpuEvent]:
        health = f.get("health")
        if not isinstance(health, str) or health == old.get("health"):
            return None
        args = {"source": "npu-smi", "health": health, "previous": old.get("health"), "error_codes": error_codes(f)}
        return NpuEvent(ts, "log", dev, "health", -1, -1, args)

    @staticmethod
    def _pcie(dev: int, f: Dict[str, Any], old: Dict[str, Any], ts: int) -> Optional[NpuEvent]:
        now = {k: f[k] for k in PCIE_KEYS if isinstance(f.get(k), int)}
        if not now or all(old.get(k) == v for k, v in now.items()):
            return None
        deltas = {f"{k}_delta": v - old[k] for k, v in now.items() if isinstance(old.get(k), int)}
        return NpuEvent(ts, "link", dev, "pcie_err", -1, -1, {"source": "npu-smi", **now, **deltas})
