"""The events one `npu-smi info` table makes: per chip and poll a reading, per process row its memory on a chip.

    ("log", op "npu_smi")          one per chip: health, temp_c, power_w, aicore_pct, used_mb / total_mb (MB as
                                   printed: HBM, or device memory where the box has no HBM column, `memory`
                                   says which), bus_id, npu, chip, name, phy_id / device_id where printed, and
                                   `processes`: the chip's process rows, or None when its NPU's list was not
                                   read whole
    ("log", op "npu_smi_process")  one per process row: pid (the process: npu-smi lists thread groups), name,
                                   memory_mb, npu, chip, container_pid where printed

A chip's process rows come before its reading, all stamped alike (the time the `info` call started): whoever
reads the reading has its process table already.

Devices. npu-smi names a chip by its NPU (card) id and its chip index on the card; the driver's messages
(`dev_id=`, `device_id=` in kmsg) and the driver's tracepoints (`inst.devid`) name the physical device id
(udevid), and the HAL's calls (uprobes: `devId`) the logical id the process sees (in a container, an index
among its visible devices). `device_of` gives a chip the device the trace's events use, first of:

1. the `Phy-ID` column (A3: the physical chip id, what the driver prints);
2. the PCI function's `dev_id` in sysfs (`/sys/bus/pci/devices/<Bus-Id>/dev_id`, the driver's own id for it),
   when the Bus-Id is a real address that no other chip of the table shares (a 310P Duo's two chips share one);
3. the `Device` column (310P: the logical device, /dev/davinci<N>; the physical one on a bare-metal host);
4. the NPU id, for a card with one chip (910B: on a bare-metal host the card id is the device id);
otherwise None (the events still carry npu and chip).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Tuple

from npu_trace.device.npusmi_info import ChipInfo, InfoTable, ProcessInfo
from npu_trace.events import NpuEvent

READING = "npu_smi"
PROCESS = "npu_smi_process"
SOURCE = "npu-smi"


def device_of(chip: ChipInfo, table: InfoTable, bdf_dev: Mapping[str, int]) -> Optional[int]:
    """The device id of `chip` (see the module docstring); `bdf_dev`: sysfs dev_id per PCI address."""
    if chip.phy_id is not None:
        return chip.phy_id
    bdf = chip.bdf
    if bdf is not None and bdf in bdf_dev and sum(c.bdf == bdf for c in table.chips) == 1:
        return bdf_dev[bdf]
    if chip.device_id is not None:
        return chip.device_id
    if sum(c.npu == chip.npu for c in table.chips) == 1:
        return chip.npu
    return None


def devices(table: InfoTable, bdf_dev: Mapping[str, int]) -> Dict[Tuple[int, int], Optional[int]]:
    """(npu, chip) -> device of every chip of the table."""
    return {(c.npu, c.chip): device_of(c, table, bdf_dev) for c in table.chips}


def reading_args(chip: ChipInfo, processes: Optional[int]) -> Dict[str, Any]:
    args: Dict[str, Any] = {
        "source": SOURCE, "npu": chip.npu, "chip": chip.chip, "name": chip.name, "health": chip.health,
        "temp_c": chip.temp_c, "power_w": chip.power_w, "aicore_pct": chip.aicore_pct, "used_mb": chip.used_mb,
        "total_mb": chip.total_mb, "memory": chip.memory, "bus_id": chip.bus_id, "processes": processes,
    }  # fmt: skip
    if chip.phy_id is not None:
        args["phy_id"] = chip.phy_id
    if chip.device_id is not None:
        args["device_id"] = chip.device_id
    return args


def process_args(p: ProcessInfo) -> Dict[str, Any]:
    args: Dict[str, Any] = {"source": SOURCE, "npu": p.npu, "chip": p.chip, "pid": p.pid, "name": p.name,
                            "memory_mb": p.memory_mb}  # fmt: skip
    if p.container_pid is not None:
        args["container_pid"] = p.container_pid
    return args


def table_events(table: InfoTable, ts_ns: int, devs: Mapping[Tuple[int, int], Optional[int]]) -> List[NpuEvent]:
    """The table's events, chip by chip: its process rows, then its reading; `devs`: `devices(table, ...)`."""
    rows: Dict[Tuple[int, int], List[ProcessInfo]] = {}
    for p in table.processes:
        rows.setdefault((p.npu, p.chip), []).append(p)
    known = set(table.process_npus)
    out: List[NpuEvent] = []
    for chip in table.chips:
        key = (chip.npu, chip.chip)
        dev = devs[key]
        mine = rows.pop(key, [])
        out += [NpuEvent(ts_ns, "log", dev, PROCESS, -1, -1, process_args(p)) for p in mine]
        count = len(mine) if chip.npu in known else None
        out.append(NpuEvent(ts_ns, "log", dev, READING, -1, -1, reading_args(chip, count)))
    for key, left in sorted(rows.items()):  # rows of chips the table does not show (a cut paste)
        out += [NpuEvent(ts_ns, "log", devs.get(key), PROCESS, -1, -1, process_args(p)) for p in left]
    return out


def info_fields(chip: ChipInfo) -> Dict[str, Any]:
    """What the table says that the `-t` queries say too (their own values win): health and temperature."""
    out: Dict[str, Any] = {"health": chip.health}
    if chip.temp_c is not None:
        out["temperature_c"] = chip.temp_c
    return out


def shared_bus_ids(table: InfoTable) -> List[str]:
    """Bus-Ids printed for more than one chip (a 310P Duo card's two chips on one PCI function)."""
    counts = Counter(c.bdf for c in table.chips if c.bdf)
    return sorted(b for b, n in counts.items() if b is not None and n > 1)
