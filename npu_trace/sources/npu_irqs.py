"""The I/O edge of IRQ discovery: `/proc/interrupts` and the PCI functions' sysfs files read into the values
`npu_trace.device.irqs.npu_irqs` decides on (which IRQs are the NPU's, and on which device)."""

from __future__ import annotations

import os
from typing import Dict, Optional

from npu_trace.device.irqs import NpuIrq, PciFunction, npu_irqs

PROC_INTERRUPTS = "/proc/interrupts"
PCI_ROOT = "/sys/bus/pci/devices"


def discover_npu_irqs(proc_interrupts: str = PROC_INTERRUPTS, pci_root: str = PCI_ROOT) -> Dict[int, NpuIrq]:
    """{irq: NpuIrq} of this host's NPU interrupts ({} without an NPU, or when /proc/interrupts is unreadable)."""
    text = _read(proc_interrupts) or ""
    return npu_irqs(text, read_pci_functions(pci_root))


def read_pci_functions(root: str = PCI_ROOT) -> Dict[str, PciFunction]:
    """bdf (lower case) -> PciFunction of every PCI function under `root`."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {}
    out = {}
    for name in names:
        fn = read_pci_function(os.path.join(root, name), name.lower())
        if fn is not None:
            out[fn.bdf] = fn
    return out


def read_pci_function(path: str, bdf: str) -> Optional[PciFunction]:
    vendor = _read(os.path.join(path, "vendor"))
    if vendor is None:
        return None
    try:
        irqs = tuple(sorted(int(n) for n in os.listdir(os.path.join(path, "msi_irqs")) if n.isdigit()))
    except OSError:  # no MSI vectors allocated (or no such directory)
        irqs = ()
    dev_id = _read(os.path.join(path, "dev_id"))
    device = _read(os.path.join(path, "device")) or ""
    return PciFunction(bdf, vendor, device, irqs, int(dev_id) if dev_id and dev_id.isdigit() else None)


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read(1 << 20).strip()
    except OSError:
        return None
