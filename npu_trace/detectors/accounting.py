"""Memory accounting: what npu-smi says a chip and its processes use, against what the trace saw allocated.

Inputs, from the health channel (npu_trace.device.npusmi_events, one poll's events share one stamp): the
process rows ("log" op "npu_smi_process": pid, name, memory_mb on a chip) and then the chip's reading ("log"
op "npu_smi": used_mb / total_mb as printed, and `processes`, the number of rows or None when the list was
not read whole); from the trace, the live bytes per (device, process) the memory detector counts from
allocations and frees (`MemoryDetector.process_bytes`, read at the reading's place in the trace: Analysis
feeds the memory detector up to it first, on both paths), and allocation failures ("alloc_fail").

At each reading of a chip on a known device, three numbers: the chip's memory used (npu-smi), the sum of its
process table (npu-smi), and the live bytes traced on the device. `accounting_mismatch` findings, each once
when its condition begins (it must end before it is said again):

* reason `counted_twice`: the process table adds up to more than the chip uses (beyond one MB of rounding per
  row): memory that several processes map (shared weights) is counted in each of them;
* reason `traced_differs`: a process the trace saw allocate on the chip is listed with memory that differs
  from its traced live bytes by more than the tolerance (TOLERANCE_MB, or TOLERANCE_SHARE of what npu-smi
  says, whichever is larger: npu-smi also counts the runtime's own context memory), at two readings of the
  chip in a row: npu-smi takes its numbers somewhere during its run (tens of milliseconds after the reading's
  stamp, later on a loaded host), so allocations made meanwhile are in its numbers and not yet in the trace
  at the stamp; such a difference is gone at the next reading, a real one is not. Only a process whose start
  the trace saw is compared (`whole_life`): one alive when tracing began (or before a flight dump's window)
  may hold memory allocated before, which its traced bytes cannot show.

The details name the processes (pid, name, memory_mb, traced_mb) and carry the three numbers.

An allocation failure while the chip's last reading shows enough free memory (total - used >= size) becomes
an `alloc_fail_explained` finding saying which explanation the data supports: `fragmentation` (the driver's
largest free block is smaller than the request though its free bytes suffice), `accounting` (the driver has
less free than npu-smi shows, or the traced live bytes leave no room: npu-smi's free memory is overstated),
or `unexplained`. A failure that carries no driver figures (a real HAL's halMemAlloc tells only its return
code) is `fragmentation` when npu-smi and the traced live bytes both leave room for it: the memory was there,
not in one piece; the details' `basis` says which figures decided ("driver" or "npu-smi and trace").

`chips()` is the read-only view of every chip's last reading (name, Bus-Id, health, temperature, power,
AICore, memory used/total, its process rows): what exporters show per chip (npu-exporter's `id`,
`model_name`, `pcie_bus_info` labels and its gauges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

READING = "npu_smi"  # npu_trace.device.npusmi_events.READING (detectors import no device module)
PROCESS = "npu_smi_process"
MIB = 1 << 20
TOLERANCE_MB = 256
TOLERANCE_SHARE = 0.1

ChipKey = Tuple[int, int]  # (npu id, chip index)
ProcessBytes = Callable[[int], Dict[Tuple[int, int], int]]  # device -> {(device, process): live bytes}


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    name: str
    memory_mb: Optional[int]


@dataclass(frozen=True)
class ChipReading:
    """A chip's last `npu-smi info` reading (values as npu-smi printed them; None where it printed NA or -)."""

    npu: int
    chip: int
    device: Optional[int]  # the device id the trace's events use (docs/npu-smi.md), None when unknown
    name: Optional[str]
    bus_id: Optional[str]
    health: Optional[str]
    temp_c: Optional[int]
    power_w: Optional[float]
    aicore_pct: Optional[int]
    used_mb: Optional[int]
    total_mb: Optional[int]
    memory: Optional[str]  # "hbm" or the device memory where the box has no HBM column
    ts_ns: int
    processes: Optional[Tuple[ProcessRow, ...]]  # None: the chip's process list was not read whole

    def as_dict(self) -> Dict[str, Any]:
        rows = None if self.processes is None else [vars(p).copy() for p in self.processes]
        return {**{k: v for k, v in vars(self).items() if k != "processes"}, "processes": rows}


class AccountingDetector:
    def __init__(self, process_bytes: ProcessBytes, whole_life: Callable[[int], bool] = lambda _pid: True) -> None:
        self.process_bytes = process_bytes  # the memory detector's view, at the current place in the trace
        self.whole_life = whole_life  # the trace saw the process start (npu_trace.detectors.processes)
        self.readings: Dict[ChipKey, ChipReading] = {}
        self.by_device: Dict[int, ChipKey] = {}
        self._rows: Dict[ChipKey, List[ProcessRow]] = {}  # the current poll's rows, before its readings
        self._rows_ts = -1
        self.open: Dict[Tuple[ChipKey, str], bool] = {}  # conditions that hold now (said once)
        self.differed: Dict[ChipKey, bool] = {}  # a process's row and traced bytes differed at the last reading
        self.counts = {"readings": 0, "mismatches": 0, "explained": 0}

    @staticmethod
    def needs_memory(ev: NpuEvent) -> bool:
        """Does this event read the memory detector's counts (Analysis feeds that detector up to it first)?"""
        return ev.kind == "alloc_fail" or (ev.kind == "log" and ev.op == READING)

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        for ev in events:
            if ev.kind == "log" and ev.op == PROCESS:
                self._row(ev)
            elif ev.kind == "log" and ev.op == READING:
                out += self._reading(ev)
            elif ev.kind == "alloc_fail":
                out += self._failure(ev)
        return out

    def _row(self, ev: NpuEvent) -> None:
        a = ev.args
        key = _key(a)
        if key is None or not _is_int(a.get("pid")):
            return
        self._poll(ev.ts_ns)
        name = a.get("name")
        self._rows.setdefault(key, []).append(ProcessRow(a["pid"], name if isinstance(name, str) else "",
                                                         _int(a.get("memory_mb"))))  # fmt: skip

    def _poll(self, ts: int) -> None:
        if ts != self._rows_ts:  # a new poll: rows of an earlier one left over belong to no reading
            self._rows, self._rows_ts = {}, ts

    def _reading(self, ev: NpuEvent) -> List[Finding]:
        a = ev.args
        key = _key(a)
        if key is None:
            return []
        self._poll(ev.ts_ns)
        rows = self._rows.pop(key, [])
        whole = _is_int(a.get("processes"))
        reading = ChipReading(
            key[0], key[1], ev.dev, _str(a.get("name")), _str(a.get("bus_id")), _str(a.get("health")),
            _int(a.get("temp_c")), _num(a.get("power_w")), _int(a.get("aicore_pct")), _int(a.get("used_mb")),
            _int(a.get("total_mb")), _str(a.get("memory")), ev.ts_ns, tuple(rows) if whole else None,
        )  # fmt: skip
        self.readings[key] = reading
        self.counts["readings"] += 1
        if ev.dev is None:
            return []
        self.by_device[ev.dev] = key
        return self._judge(reading, ev)

    def _judge(self, r: ChipReading, ev: NpuEvent) -> List[Finding]:
        assert r.device is not None
        traced = self.process_bytes(r.device)
        traced_bytes = sum(traced.values())
        rows = r.processes or ()
        listed = [_listed(p, traced.get((r.device, p.pid), 0)) for p in rows]
        proc_sum = sum(p.memory_mb or 0 for p in rows)
        numbers = {"npu": r.npu, "chip": r.chip, "used_mb": r.used_mb, "total_mb": r.total_mb,
                   "process_sum_mb": proc_sum if r.processes is not None else None,
                   "traced_bytes": traced_bytes, "traced_mb": _mb(traced_bytes)}  # fmt: skip
        twice = r.processes is not None and r.used_mb is not None and proc_sum > r.used_mb + len(rows)
        differs = [p for p, row in zip(listed, rows)
                   if self.whole_life(row.pid) and _differs(row, traced.get((r.device, row.pid), 0))]  # fmt: skip
        again = bool(differs) and self.differed.get((r.npu, r.chip), False)
        self.differed[(r.npu, r.chip)] = bool(differs)
        out = self._condition(r, "counted_twice", twice, ev, {**numbers, "processes": listed})
        out += self._condition(r, "traced_differs", again, ev, {**numbers, "processes": differs})
        return out

    def _condition(self, r: ChipReading, reason: str, holds: bool, ev: NpuEvent,
                   details: Dict[str, Any]) -> List[Finding]:  # fmt: skip
        key = ((r.npu, r.chip), reason)
        was, self.open[key] = self.open.get(key, False), holds
        if not holds or was:
            return []
        self.counts["mismatches"] += 1
        tolerance = {"tolerance_mb": TOLERANCE_MB, "tolerance_share": TOLERANCE_SHARE}
        return [Finding("accounting_mismatch", ev.dev, READING, ev.ts_ns, {"reason": reason, **details, **tolerance})]

    def _failure(self, ev: NpuEvent) -> List[Finding]:
        key = None if ev.dev is None else self.by_device.get(ev.dev)
        r = None if key is None else self.readings.get(key)
        size = _int(ev.args.get("size"))
        if r is None or r.device is None or size is None or r.used_mb is None or r.total_mb is None:
            return []
        smi_free = (r.total_mb - r.used_mb) * MIB
        if size > smi_free:
            return []  # npu-smi itself shows too little free: nothing to explain
        free, largest = _int(ev.args.get("free_bytes")), _int(ev.args.get("largest_free"))
        traced = sum(self.process_bytes(r.device).values())
        explanation = _explain(size, free, largest, traced, r.total_mb * MIB)
        self.counts["explained"] += 1
        details = {
            "explanation": explanation, "size": size, "npu_smi_free_bytes": smi_free, "npu_smi_used_mb": r.used_mb,
            "basis": "npu-smi and trace" if free is None and largest is None else "driver",
            "total_mb": r.total_mb, "reading_ts_ns": r.ts_ns, "free_bytes": free, "largest_free": largest,
            "traced_bytes": traced, "npu": r.npu, "chip": r.chip,
            "overstated_bytes": smi_free - free if explanation == "accounting" and free is not None else None,
        }  # fmt: skip
        return [Finding("alloc_fail_explained", ev.dev, ev.op, ev.ts_ns, details)]

    def chips(self) -> List[ChipReading]:
        """Every chip's last reading, by (npu, chip)."""
        return [self.readings[k] for k in sorted(self.readings)]

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        return []

    def summary(self) -> Dict[str, Any]:
        return {**self.counts, "chips": [r.as_dict() for r in self.chips()]}


def _explain(size: int, free: Optional[int], largest: Optional[int], traced: int, total: int) -> str:
    if largest is not None and largest < size and (free is None or free >= size):
        return "fragmentation"
    if (free is not None and free < size) or traced + size > total:
        return "accounting"
    if free is None and largest is None:  # no driver figures: npu-smi and the trace both left room
        return "fragmentation"
    return "unexplained"


def _differs(row: ProcessRow, traced: int) -> bool:
    if not traced or row.memory_mb is None:
        return False  # the trace saw none of its allocations (it may predate the trace): nothing to compare
    return abs(row.memory_mb - _mb(traced)) > max(TOLERANCE_MB, TOLERANCE_SHARE * row.memory_mb)


def _listed(p: ProcessRow, traced: int) -> Dict[str, Any]:
    return {"pid": p.pid, "name": p.name, "memory_mb": p.memory_mb, "traced_mb": _mb(traced)}


def _mb(n: int) -> int:
    return (n + MIB // 2) // MIB


def _key(args: Dict[str, Any]) -> Optional[ChipKey]:
    npu, chip = _int(args.get("npu")), _int(args.get("chip"))
    return None if npu is None or chip is None else (npu, chip)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(v: Any) -> Optional[int]:
    return v if _is_int(v) else None


def _num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None
