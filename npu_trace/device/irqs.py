"""The NPU's own interrupts: the driver's IRQ names, and which IRQ numbers of a host are the NPU's, on which device.

All driver IRQs are MSI-X vectors requested with plain `request_irq(vector, handler, 0, name, ...)`; `name` is
what `/proc/interrupts` shows and `irq:irq_handler_entry` reports (reference: hicann/driver §4.2). The names
are not per device, except the TS mailbox's `trs-mbox-<dev>-<ts>`; the device of the others comes from the
PCI function whose `msi_irqs/` lists the vector, and that function's device id from the driver's sysfs
`dev_id` file (or from a mailbox IRQ of the same function).

`npu_irqs(interrupts_text, pci)` is pure: `/proc/interrupts` text and a snapshot of the PCI functions
(`PciFunction`, read by `npu_trace.sources.npu_irqs`) in, {irq: NpuIrq} out. An IRQ is the NPU's when its
name is one of the driver's, or when it is a vector of an Ascend PCI function (vendor 0x19e5, an NPU device
id: not the BMC's `lqdrv` card, which shares the vendor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Tuple

VENDOR = "0x19e5"
# drv_pcie_host's device table and DCMI's names (reference §6): 310, 310B, 310P (1P/2P), 910, 910B, 910_93/A3,
# CLOUD_V2 2P and VF, 950, CLOUD_V5, MINI_V4
NPU_DEVICE_IDS: FrozenSet[str] = frozenset(
    ("0xd100", "0xd105", "0xd500", "0xd501", "0xd801", "0xd802", "0xd803", "0xd804", "0xd805", "0xd806",
     "0xd807", "0xd808")
)  # fmt: skip

# IRQ names the driver requests (reference §4.2), exactly as /proc/interrupts shows them; the message channel's
# names contain a space.
NPU_IRQ_NAMES: FrozenSet[str] = frozenset(
    (
        # asdrv_trs / asdrv_trsbase: task completion, logic-CQ wakeups, the UIO doorbell, the TS's feature IRQs
        "cq_update_irq", "func_cq_irq", "cq_update_bind_thread_irq", "sq_send_trigger_irq", "mbox_ack_irq",
        "disp_nfe_irq", "stars_cdqm_irq", "stars_topic_irq", "prof_aicore_irq", "prof_hwts_log_irq",
        "tscpu_stars_irq", "tscpu_ffts_irq", "stars_sram_irq", "tscpu_hb_ack_irq", "stars_ast_irq",
        # drv_pcie_host: DMA, host<->device message channels, device boot
        "dma_done_irq", "dma_err_irq", "trans msg_chan_rx_msg_notify", "trans msg_chan_tx_finish_notify",
        "non-trans msg_chan_rx_msg_notify", "devdrv_load_irq", "devdrv_half_probe_irq",
        # asdrv_esched (AICPU events), asdrv_vmng (vNPU MSI injection)
        "topic_sched_aicpu", "msix_inject",
    )
)  # fmt: skip
MBOX_RE = re.compile(r"^trs-mbox-(\d+)-(\d+)$")  # the TS mailbox ACK of device <dev>, TS <ts>
_TRIGGER = re.compile(r"^(?:\d+(?:-\w+)?|\d+ \w+|[Ee]dge|[Ll]evel)$")  # "0-edge", "27 Level": not a name
_BDF_IN_CHIP = re.compile(r"(?:^|-)([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$")


@dataclass(frozen=True)
class PciFunction:
    """What sysfs says of one PCI function (`/sys/bus/pci/devices/<bdf>/`)."""

    bdf: str  # "0000:3b:00.0"
    vendor: str  # "0x19e5"
    device: str  # "0xd802"
    msi_irqs: Tuple[int, ...] = ()
    dev_id: Optional[int] = None  # the driver's `dev_id` file (absent without the driver)

    @property
    def is_npu(self) -> bool:
        return self.vendor.lower() == VENDOR and self.device.lower() in NPU_DEVICE_IDS


class IrqLine(NamedTuple):
    """One numbered line of /proc/interrupts: the IRQ, its chip column (e.g. "PCI-MSIX-0000:3b:00.0") and the
    names of its handlers (several for a shared line)."""

    irq: int
    chip: str
    names: Tuple[str, ...]


@dataclass(frozen=True)
class NpuIrq:
    irq: int
    name: str
    dev: Optional[int]  # None: the device could not be told
    bdf: str = ""


def parse_interrupts(text: str) -> List[IrqLine]:
    """The numbered lines of /proc/interrupts (NMI, LOC, ... are left out).

    A line is `IRQ: count x CPUs  chip  [hwirq[-trigger]]  name[, name...]`; the columns after the counts are
    separated by runs of spaces and a handler's name may contain single spaces ("trans msg_chan_rx_msg_notify"),
    so the names are the last run-of-spaces-separated column, split at ", " for a shared IRQ."""
    lines = text.splitlines()
    cpus = len(lines[0].split()) if lines else 0
    out = []
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        words = rest.split()
        if len(words) < cpus + 1 or not all(w.isdigit() for w in words[:cpus]):
            continue
        columns = [c.strip() for c in re.split(r" {2,}|\t", _after_counts(rest, cpus)) if c.strip()]
        if not columns:
            continue
        chip = columns[0].split()[0]
        names = tuple(n.strip() for n in columns[-1].split(", ")) if _has_names(columns) else ()
        out.append(IrqLine(int(head), chip, names))
    return out


def _has_names(columns: List[str]) -> bool:
    """Whether the last column names handlers (a line without one ends at its hwirq/trigger column)."""
    return len(columns) > 2 or (len(columns) == 2 and _TRIGGER.match(columns[1]) is None)


def _after_counts(rest: str, cpus: int) -> str:
    """The text after the per-CPU counts."""
    pos = 0
    for _ in range(cpus):
        match = re.compile(r"\s*\d+").match(rest, pos)
        if match is None:
            break
        pos = match.end()
    return rest[pos:]


def npu_irqs(interrupts_text: str, pci: Mapping[str, PciFunction]) -> Dict[int, NpuIrq]:
    """{irq: NpuIrq} of the NPU's interrupts on this host (see the module docstring); {} when it has none."""
    owner = {irq: fn for fn in pci.values() if fn.is_npu for irq in fn.msi_irqs}
    lines = parse_interrupts(interrupts_text)
    known = function_devices(pci, _mailbox_devices(lines, owner))
    out: Dict[int, NpuIrq] = {}
    for line in lines:
        fn = owner.get(line.irq) or _chip_function(line.chip, pci)
        name = next((n for n in line.names if is_npu_irq_name(n)), "")
        if not name and fn is None:
            continue
        dev = _device(name, fn, known)
        out[line.irq] = NpuIrq(line.irq, name or ", ".join(line.names), dev, fn.bdf if fn else "")
    return out


def is_npu_irq_name(name: str) -> bool:
    return name in NPU_IRQ_NAMES or MBOX_RE.match(name) is not None


def _chip_function(chip: str, pci: Mapping[str, PciFunction]) -> Optional[PciFunction]:
    """The NPU function named in the chip column (x86's per-device MSI domains: "IR-PCI-MSIX-0000:3b:00.0")."""
    m = _BDF_IN_CHIP.search(chip)
    fn = pci.get(m.group(1).lower()) if m else None
    return fn if fn is not None and fn.is_npu else None


def _mailbox_devices(lines: List[IrqLine], owner: Mapping[int, PciFunction]) -> Dict[str, int]:
    """bdf -> device id told by a `trs-mbox-<dev>-<ts>` IRQ of that function."""
    out: Dict[str, int] = {}
    for line in lines:
        fn = owner.get(line.irq)
        for name in line.names:
            m = MBOX_RE.match(name)
            if m and fn is not None:
                out.setdefault(fn.bdf, int(m.group(1)))
    return out


def _device(name: str, fn: Optional[PciFunction], known: Mapping[str, int]) -> Optional[int]:
    m = MBOX_RE.match(name)
    if m:
        return int(m.group(1))
    return known.get(fn.bdf) if fn is not None else None


def function_devices(pci: Mapping[str, PciFunction], mbox_dev: Mapping[str, int]) -> Dict[str, int]:
    """bdf -> device id of every NPU function: its `dev_id` file, else a mailbox IRQ's name, else its index
    among the NPU functions in address order (as the health channel numbers them)."""
    npus = sorted(bdf for bdf, fn in pci.items() if fn.is_npu)
    out = {}
    for index, bdf in enumerate(npus):
        fn = pci[bdf]
        out[bdf] = fn.dev_id if fn.dev_id is not None else mbox_dev.get(bdf, index)
    return out
