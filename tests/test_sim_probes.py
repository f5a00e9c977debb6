"""Pure tests of the uprobe definitions (both architectures) and of the uprobe_events line matching."""

from __future__ import annotations

import pytest

from npu_trace.device import hal
from npu_trace.errors import KernelFeatureError
from npu_trace.sim import probes

OFFSETS = {f.name: 0x1000 + 0x10 * i for i, f in enumerate(hal.FUNCS)}


def test_x86_64_definitions() -> None:
    defs = probes.definitions("/b/npu-sim", OFFSETS, machine="x86_64")
    assert len(defs) == len(hal.event_names()) == 16
    assert defs[0] == "p:ascend/ascend_halMemAlloc /b/npu-sim:0x1000 dev=%di:u32 size=%si:u64 flag=%dx:u64"
    assert defs[1] == "r:ascend/ascend_halMemAlloc_ret /b/npu-sim:0x1000 ret=$retval:s32"
    alloc_done = next(d for d in defs if "devmm_alloc_done" in d)
    assert alloc_done.endswith("ret=%cx:s32 free_bytes=%r8:u64 largest_free=%r9:u64")
    irq = next(d for d in defs if "ascend_irq_handler_entry" in d)
    assert irq.endswith("dev=%di:u32 irq=%si:u32 name=+0(%dx):string")
    assert "event_id=%si:x32" in next(d for d in defs if "dms_event_report" in d)


def test_aarch64_definitions() -> None:
    defs = probes.definitions("/b/npu-sim", OFFSETS, machine="aarch64")
    step = next(d for d in defs if "devdrv_reset_step" in d)
    assert step.endswith("dev=%x0:u32 step=%x1:u32 step_name=+0(%x2):string ret=%x3:s32")
    assert all("%d" not in d.split(" ", 2)[-1] for d in defs if d.startswith("p:"))
    assert probes.definitions("/b", OFFSETS, machine="arm64") == probes.definitions("/b", OFFSETS, "aarch64")


def test_only_hal_calls_have_return_probes() -> None:
    defs = probes.definitions("/b/npu-sim", OFFSETS, machine="x86_64")
    rets = sorted(d.split()[0] for d in defs if d.startswith("r:"))
    assert rets == sorted(f"r:ascend/ascend_{f.name}_ret" for f in hal.FUNCS if f.hal)
    assert len(rets) == 4


def test_unknown_arch() -> None:
    with pytest.raises(KernelFeatureError):
        probes.arch_registers("riscv64")
    assert probes.arch_registers("amd64") == probes.ARG_REGISTERS["x86_64"]


def test_key_matches_kernel_respelling() -> None:
    ours = "p:ascend/ascend_halMemFree /b/npu-sim:0x1770 dev=%di:u32 va=%si:x64"
    kernel = "p:ascend/ascend_halMemFree /b/npu-sim:0x0000000000001770 dev=%di:u32 va=%si:x64"
    assert probes._key(ours) == probes._key(kernel) == ("p", "ascend", "ascend_halMemFree", "/b/npu-sim", 0x1770)
    assert probes._key("garbage") is None


def test_event_names() -> None:
    names = hal.event_names()
    assert "ascend:ascend_halCqReportRecv_ret" in names
    assert "ascend:ascend_hb_report_heart_beat_lost_event" in names
    assert all(n.startswith("ascend:ascend_") for n in names)
