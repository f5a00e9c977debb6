"""Which Ascend chip this host has, for the task layout the BPF HAL programs read (npu_trace.device.chips).

`find_chip(npu_smi)`: the PCI device ids of the NPU functions in sysfs; with none (a container without the
host's PCI tree, a box whose functions are hidden), the models `npu-smi info` prints (run once, bounded); else
nothing found: the layout is unknown and the task calls are timed with their stream and task left empty.
"""

from __future__ import annotations

import shutil

from npu_trace.device import chips
from npu_trace.device.npusmi_info import parse_info
from npu_trace.sources.npu_irqs import PCI_ROOT, read_pci_functions
from npu_trace.sources.npusmi_source import run_bounded

NPU_SMI_TIMEOUT_S = 10.0


def find_chip(npu_smi: str = "npu-smi", pci_root: str = PCI_ROOT) -> chips.ChipFinding:
    by_pci = chips.from_pci(read_pci_functions(pci_root).values())
    if by_pci.chips:
        return by_pci
    if shutil.which(npu_smi) is None:
        return chips.ChipFinding((), f"no NPU PCI id, no {npu_smi}")
    status, out = run_bounded([npu_smi, "info"], NPU_SMI_TIMEOUT_S)
    if status != "ok":
        return chips.ChipFinding((), f"no NPU PCI id; {npu_smi} info: {status}")
    return chips.from_models([(c.name, c.phy_id is not None) for c in parse_info(out)])
