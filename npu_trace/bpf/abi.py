"""Which argument layout (ABI) the HAL uprobes read in a given file: chosen from the file's symbols, never guessed.

- `real`: libascend_hal.so as the Ascend driver package ships it (prototypes and struct layouts with their public
  sources in docs/architecture.md, "HAL ABIs"): `halMemAlloc(void **pp, u64 size, u64 flag)` with the device in
  flag bits 0-9 and the address written through `pp` (read at return), `halMemFree(void *pp)` (its device is the
  one the traced allocation of that address had, else NPU_DEV_UNKNOWN), `halSqTaskSend(u32 devId, struct
  halTaskSendInfo *)` and `halCqReportRecv(u32 devId, struct halReportRecvInfo *)` read field by field, and
  where the file has them `halSqMemGet` / `halSqMsgSend` (the task path of the 910's and 310P's runtime).
- `sim`: the simulator's executor (npu_trace/sim/npu_sim.c), whose HAL functions take their values in registers
  (`halMemAlloc(dev, size, flag)` ...). It exports the marker function `npu_sim_hal_abi`; a file without that
  marker gets the real ABI. The simulator's own libascend_hal.so (npu_trace/sim/hal_real.c) has the real ABI and
  no marker, so the real-ABI programs run against it in the tests.

`--hal-abi` (BpfConfig.hal_abi) overrides the choice for every file.
"""

from __future__ import annotations

from typing import Dict, Optional

from npu_trace.elf import Elf
from npu_trace.errors import InputError, SimulatorError

REAL = "real"
SIM = "sim"
ABIS = (REAL, SIM)
SIM_MARKER = "npu_sim_hal_abi"
# per ABI: HAL symbol -> the entry program of bpf/hal_uprobes.bpf.c (the return program is hal_return for all)
ENTRY_FUNCS: Dict[str, Dict[str, str]] = {
    SIM: {
        "halMemAlloc": "hal_mem_alloc_entry",
        "halMemFree": "hal_mem_free_entry",
        "halSqTaskSend": "hal_sq_task_send_entry",
        "halCqReportRecv": "hal_cq_report_recv_entry",
    },
    REAL: {
        "halMemAlloc": "real_mem_alloc_entry",
        "halMemFree": "real_mem_free_entry",
        "halSqTaskSend": "real_sq_task_send_entry",
        "halCqReportRecv": "real_cq_report_recv_entry",
        "halSqMemGet": "real_sq_mem_get_entry",
        "halSqMsgSend": "real_sq_msg_send_entry",
    },
}
DESCRIPTIONS = {
    REAL: "real HAL ABI (libascend_hal.so prototypes: device in halMemAlloc's flag, structs read in place)",
    SIM: f"the simulator's ABI (marker {SIM_MARKER}: arguments in registers)",
}


def abi_of_symbols(functions: Dict[str, int]) -> str:
    return SIM if SIM_MARKER in functions else REAL


def detect(path: str, override: Optional[str] = None) -> str:
    """The ABI of the HAL file at `path` (`override` when given)."""
    if override is not None:
        if override not in ABIS:
            raise InputError(f"unknown HAL ABI {override!r} (one of {', '.join(ABIS)})")
        return override
    try:
        return abi_of_symbols(Elf.open(path).functions())
    except (OSError, SimulatorError) as exc:
        raise InputError(f"cannot read ELF symbols of {path}: {exc}") from None


def describe(abi: str) -> str:
    return DESCRIPTIONS[abi]
