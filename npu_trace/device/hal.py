"""The simulated NPU's function table: one source of truth for the C executor, the planner and the probes.

Each exported C function takes its parameters in this order (the n-th parameter sits in the n-th argument
register); a parameter's `type` is the uprobe fetch type, so name and type are exactly the tracefs field.
HAL functions (`hal=True`) also get a return probe `ascend_<name>_ret` with one field `ret` (s32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

GROUP = "ascend"
EVENT_PREFIX = "ascend_"
RET_SUFFIX = "_ret"


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # u32 / u64 / s32 / x32 / x64 / string


@dataclass(frozen=True)
class Func:
    name: str
    params: Tuple[Param, ...]
    hal: bool = False

    @property
    def event(self) -> str:
        return EVENT_PREFIX + self.name

    @property
    def ret_event(self) -> str:
        return self.event + RET_SUFFIX

    @property
    def field_names(self) -> Tuple[str, ...]:
        return tuple(p.name for p in self.params)


def _f(name: str, spec: str, hal: bool = False) -> Func:
    params = tuple(Param(*item.split(":")) for item in spec.split())
    return Func(name, params, hal)


FUNCS: Tuple[Func, ...] = (
    _f("halMemAlloc", "dev:u32 size:u64 flag:u64", hal=True),
    _f("halMemFree", "dev:u32 va:x64", hal=True),
    _f("halSqTaskSend", "dev:u32 ts:u32 stream:u32 task:u32", hal=True),
    _f("halCqReportRecv", "dev:u32 ts:u32 stream:u32 timeout_ms:s32", hal=True),
    _f("devmm_alloc_done", "dev:u32 size:u64 va:x64 ret:s32 free_bytes:u64 largest_free:u64"),
    _f("trs_logic_cq_enque", "dev:u32 stream:u32 task:u32 errcode:u32"),
    _f("irq_handler_entry", "dev:u32 irq:u32 name:string"),
    _f("irq_handler_exit", "dev:u32 irq:u32 ret:s32"),
    _f("drv_timeout", "dev:u32 kind:u32 chan:u32 wait_us:u64"),
    _f("hb_report_heart_beat_lost_event", "dev:u32 lost_count:u32"),
    _f("dms_event_report", "dev:u32 event_id:x32 ce_count:u32 uce_count:u32 temp_c:s32"),
    _f("devdrv_reset_step", "dev:u32 step:u32 step_name:string ret:s32"),
)
FUNC_BY_NAME: Dict[str, Func] = {f.name: f for f in FUNCS}


def event_names() -> Tuple[str, ...]:
    """Every event the simulator's probes create, as "ascend:<event>" (entry and return probes)."""
    out = []
    for f in FUNCS:
        out.append(f"{GROUP}:{f.event}")
        if f.hal:
            out.append(f"{GROUP}:{f.ret_event}")
    return tuple(out)


def render_value(ptype: str, value: object) -> str:
    """How the kernel's text rendering (`trace` file) prints a field of this type."""
    if ptype == "string":
        return f'"{value}"'
    iv = int(value)  # type: ignore[call-overload]
    if ptype in ("x32", "x64"):
        return hex(iv & (0xFFFFFFFF if ptype == "x32" else 0xFFFFFFFFFFFFFFFF))
    return str(iv)


# Constants shared by scenarios and the truth file.
ENOMEM = 6  # halMemAlloc: out of device memory (DRV_ERROR_OUT_OF_MEMORY)
ETIMEDOUT = -110  # halCqReportRecv: no completion before the timeout
IRQ_HANDLED = 1
ECC_CE_EVENT = 0x80E01800  # sensor 0x0C (memory) state 0: correctable ECC
ECC_UCE_EVENT = 0x80E01801  # state 1: uncorrectable ECC
ECC_SCRUB_UCE_EVENT = 0x80E01809  # state 9: multi-bit ECC during HBM patrol
TIMEOUT_KINDS = {1: "cq_wait", 2: "mbox", 3: "dma", 4: "msg_chan"}
RESET_STEPS: Tuple[str, ...] = (
    "ready_for_hotreset",
    "unbind",
    "remove",
    "reset_begin",
    "bus_remove",
    "rescan",
    "probe",
    "hot_reset_success",
    "os_load_success",
    "half_probe_finish",
    "heartbeat_resume",
)
