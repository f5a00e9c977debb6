"""Which Ascend chip a host has, and where the tasks its runtime submits carry their stream and task ids: the
task layout the real-ABI HAL programs read (bpf/hal_uprobes.bpf.c, -DTASK_STREAM_OFF / -DTASK_TASK_OFF).

The chips, as the driver names them (hicann/driver `src/ascend_hal/inc/devdrv_hardware_version.h`, `enum
devdrv_chip_type`: CHIP_CLOUD "Ascend910", CHIP_DC "Ascend310P", CHIP_CLOUD_V2 "Ascend910B & Ascend910_93"),
told apart by their PCI device ids (`src/sdk_driver/comm/pcie/host/devdrv_pci.h`, the driver's table
`g_devdrv_tbl` in `src/sdk_driver/comm/pcie/dc/host/devdrv_adapt.c`) or by the model npu-smi prints.

The task layouts (hicann/runtime at 681ef761, the runtime that calls the HAL):

- `stars` (910B, 910_93): the runtime's STARS chips (`src/runtime/config/910_B_93/dev_info_reg.cc`:
  `.isStars = true`) send each task with `halSqTaskSend` as STARS SQEs at `info->sqe_addr`, which begin with
  `rtStarsSqeHeader_t` (`pkg_inc/runtime/rt_external_stars_define.h`): u8 type bits, u8 flag bits, u16
  blockDim, u16 rtStreamId at 4, u16 taskId at 6.
- `ts` (910, 310P): the others (`src/runtime/config/cloud/dev_info_reg.cc` and `config/dc/dev_info_reg.cc`:
  `.isStars = false`) write a TS command `rtCommand_t` (`src/runtime/core/src/task/inc/hwts.hpp`, struct
  `tagTsCommand`: u16 streamID at 0, u16 taskID at 2) into the slot `halSqMemGet` hands out and send it with
  `halSqMsgSend` (`src/runtime/core/src/task/task_submit/v100/task_submit.cc`); the driver's halSqMsgSend sends
  that slot, its SQ's one buffer (hicann/driver `src/ascend_hal/trs/core/trs_sqcq.c`).
- `unknown` (any other chip, or none found): the calls are timed, their stream and task left empty.

Both layouts are read from whichever call carries task descriptors (halSqTaskSend's SQEs, the slot halSqMsgSend
sends): the offsets are the chip's, not the call's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from npu_trace.device.irqs import PciFunction


@dataclass(frozen=True)
class TaskLayout:
    name: str
    stream_off: Optional[int]  # where the u16 stream id sits in a task descriptor; None: unknown
    task_off: Optional[int]
    source: str  # the runtime file and struct it is read from

    @property
    def known(self) -> bool:
        return self.stream_off is not None and self.task_off is not None

    def cflags(self) -> List[str]:
        if not self.known:
            return []
        return [f"-DTASK_STREAM_OFF={self.stream_off}", f"-DTASK_TASK_OFF={self.task_off}"]

    def describe(self) -> str:
        if not self.known:
            return "unknown: HAL task calls timed, their stream and task left empty"
        return f"{self.name}: stream id (u16) at {self.stream_off}, task id (u16) at {self.task_off} ({self.source})"


STARS = TaskLayout("stars", 4, 6, "rtStarsSqeHeader_t, hicann/runtime pkg_inc/runtime/rt_external_stars_define.h")
TS = TaskLayout("ts", 0, 2, "rtCommand_t, hicann/runtime src/runtime/core/src/task/inc/hwts.hpp")
UNKNOWN = TaskLayout("unknown", None, None, "")
LAYOUTS: Dict[str, TaskLayout] = {lay.name: lay for lay in (STARS, TS, UNKNOWN)}

# chip -> its task layout
CHIPS: Dict[str, TaskLayout] = {"910": TS, "910B": STARS, "910_93": STARS, "310P": TS}

HUAWEI = 0x19E5
# (vendor, device) -> chip, as g_devdrv_tbl lists them: Huawei's ids, and the partners' vendor ids it accepts
# for the 310P (MINI_V2) and 910B (CLOUD_V2) cards
_PCI: Dict[Tuple[int, int], str] = {
    (HUAWEI, 0xD801): "910",  # CLOUD_V1_DEVICE
    (HUAWEI, 0xD802): "910B",  # CLOUD_V2_DEVICE
    (HUAWEI, 0xD804): "910B",  # CLOUD_V2_2P_DEVICE
    (HUAWEI, 0xD805): "910B",  # CLOUD_V2_VF_DEVICE
    (HUAWEI, 0xD803): "910_93",  # CLOUD_V2_HCCS_IEP_DEVICE
    (HUAWEI, 0xD500): "310P",  # MINI_V2_DEVICE
    (HUAWEI, 0xD501): "310P",  # MINI_V2_2P_DEVICE
    **{(vendor, 0xD500): "310P" for vendor in (0xFFFF, 0x20C6, 0x203F, 0x20E9)},
    **{(vendor, 0xD802): "910B" for vendor in (0x20C6, 0x203F, 0x20E9)},
}  # fmt: skip


def chip_of_pci(vendor: str, device: str) -> Optional[str]:
    """The chip of a PCI function ("0x19e5", "0xd802" as sysfs writes them), None when it is none of ours."""
    try:
        return _PCI.get((int(vendor, 16), int(device, 16)))
    except ValueError:
        return None


_B = re.compile(r"^910B\d")  # 910B1..910B4, 910B2C: a bare "910B" is also an old 910's bin: not told
_OLD_910 = re.compile(r"^910(Pro|Premium)?[AB]$")  # the first 910's boards: 910A, 910ProA, 910ProB, 910PremiumA


def chip_of_model(name: str, phy_id_column: bool = False) -> Optional[str]:
    """The chip of a model name as npu-smi prints it, None when it cannot be told: "910B3", "910B2C" (910B);
    "310P3", "310Pvir02" (310P, whole or a vNPU of it); "910ProB", "910PremiumA" (910); "Ascend910" in a table
    with the `Chip Phy-ID` column, which only the A3 box prints (910_93). Field samples in
    tests/data/npusmi/field."""
    model = name.strip()
    if _B.match(model):
        return "910B"
    if model.startswith("310P"):
        return "310P"
    if _OLD_910.match(model) and model != "910B":
        return "910"
    if model == "Ascend910" and phy_id_column:
        return "910_93"
    return None


@dataclass(frozen=True)
class ChipFinding:
    """What was found: the chips (each once), how, and the layout that follows."""

    chips: Tuple[str, ...]
    how: str  # "PCI 19e5:d802 (0000:c1:00.0)", "npu-smi model 910B3", "--chip", "nothing found"

    @property
    def layout(self) -> TaskLayout:
        layouts = {CHIPS[c].name for c in self.chips}
        return CHIPS[self.chips[0]] if len(layouts) == 1 else UNKNOWN

    def describe(self) -> str:
        if not self.chips:
            return f"chip unknown ({self.how}): {UNKNOWN.describe()}"
        mixed = "; chips with different layouts: " if len({CHIPS[c].name for c in self.chips}) > 1 else ""
        return f"{'/'.join(self.chips)} ({self.how}){mixed}: task layout {self.layout.describe()}"


def from_pci(functions: Iterable[PciFunction]) -> ChipFinding:
    found: List[str] = []
    seen: List[str] = []
    for fn in functions:
        chip = chip_of_pci(fn.vendor, fn.device)
        if chip is not None:
            seen.append(f"{fn.vendor[2:]}:{fn.device[2:]} ({fn.bdf})")
            found.append(chip)
    chips = tuple(dict.fromkeys(found))
    return ChipFinding(chips, f"PCI {', '.join(seen[:2])}{' ...' if len(seen) > 2 else ''}" if chips else "no PCI id")


def from_models(rows: Sequence[Tuple[str, bool]]) -> ChipFinding:
    """From npu-smi's chip rows: (model name, whether the table has the Chip Phy-ID column)."""
    chips = tuple(dict.fromkeys(c for c in (chip_of_model(n, p) for n, p in rows) if c is not None))
    shown = ", ".join(dict.fromkeys(n for n, _ in rows))
    if not chips:
        return ChipFinding((), f"npu-smi model {shown} unknown" if shown else "npu-smi listed no chip")
    return ChipFinding(chips, f"npu-smi model {shown}")


def named(chip: str) -> ChipFinding:
    """--chip NAME ("unknown" too)."""
    return ChipFinding((chip,) if chip in CHIPS else (), f"--chip {chip}")
