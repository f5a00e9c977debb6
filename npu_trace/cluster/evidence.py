"""What check's analysis of one recording says of a fault, as evidence ranked by how much it tells. Pure.

Ranks (`FAULT` > `SIGN` > `WAIT`): a card that failed shows driver-level faults (an uncorrectable ECC error, a
device fault, a kernel fault, heartbeat lost, a reset sequence: the device gone from the bus and back); every
rank it took down shows only waits (timeouts of its completion queue, mailbox or HAL calls, and its application
reporting a collective or a stream that timed out). Between them, signs: corrected ECC errors, a degraded PCIe
link, npu-smi's health leaving OK, and an application saying its own device is gone (heartbeat lost, absent,
cannot be opened). A card's first evidence of any rank (its first corrected ECC report, for a card that then
failed) is where its story starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

FAULT, SIGN, WAIT = 3, 2, 1
RANK_NAMES = {FAULT: "driver-level fault", SIGN: "sign of a failing device", WAIT: "timeout"}
APP_SIGNS = ("heartbeat_lost", "device_absent", "device_open")
APP_WAITS = ("collective_timeout", "stream_sync_timeout", "driver_error")


@dataclass(frozen=True)
class Evidence:
    device: Optional[int]
    ts_ns: int  # the recording's trace clock
    kind: str  # uce, ecc, reset, heartbeat, device_fault, kernel_fault, link, health, timeout, app:<class>
    rank: int
    what: str  # one line

    def sort_key(self) -> Any:
        return (self.ts_ns, -self.rank, -1 if self.device is None else self.device, self.kind, self.what)


def evidence_of(findings: Sequence[Mapping[str, Any]], ecc_times: Mapping[int, Mapping[str, int]]) -> List[Evidence]:
    """The evidence of one recording: its findings (check's report, as dicts) and its devices' ECC times."""
    out = [ev for f in findings for ev in _finding(f)]
    for dev, times in ecc_times.items():
        if times.get("ecc_first_ns"):
            out.append(Evidence(int(dev), int(times["ecc_first_ns"]), "ecc", SIGN, "first ECC error reported"))
        if times.get("uce_first_ns"):
            out.append(Evidence(int(dev), int(times["uce_first_ns"]), "uce", FAULT, "uncorrectable ECC error"))
    return sorted(out, key=Evidence.sort_key)


def _finding(f: Mapping[str, Any]) -> List[Evidence]:
    kind, op, dev, ts = f.get("kind"), f.get("op") or "", f.get("device"), f.get("ts_ns")
    if not isinstance(ts, int) or not (dev is None or isinstance(dev, int)):
        return []
    entry = f.get("details")
    made = _classify(str(kind), str(op), entry if isinstance(entry, dict) else {})
    return [Evidence(dev, ts, made[0], made[1], made[2])] if made else []


def _classify(kind: str, op: str, details: Dict[str, Any]) -> Optional[Any]:
    """(kind, rank, one line) of a finding that is evidence; None for one that is not (spikes, leaks, loss)."""
    if kind == "reset_sequence":
        return "reset", FAULT, f"hot reset ({details.get('status', '?')})"
    if kind == "timeout":
        return ("heartbeat", FAULT, "heartbeat lost") if op == "heartbeat" else ("timeout", WAIT, f"{op} timeout")
    if kind in ("device_fault", "kernel_fault"):
        return kind, FAULT, f"{kind.replace('_', ' ')}: {op}"
    if kind == "link_degraded":
        return "link", SIGN, "PCIe link degraded"
    if kind == "health":
        return "health", SIGN, f"npu-smi health {details.get('health', '?')}"
    if kind == "app_error" and op in APP_SIGNS + APP_WAITS:
        rank = SIGN if op in APP_SIGNS else WAIT
        codes = ",".join([*map(str, details.get("codes") or []), *map(str, details.get("results") or [])])
        return f"app:{op}", rank, f"application: {op.replace('_', ' ')}" + (f" ({codes})" if codes else "")
    return None
