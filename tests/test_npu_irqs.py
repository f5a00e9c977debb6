"""Which interrupts are the NPU's, and on which device: /proc/interrupts goldens and a fake sysfs tree."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from goldens import DATA, read
from npu_trace.device.irqs import IrqLine, NpuIrq, PciFunction, is_npu_irq_name, npu_irqs, parse_interrupts
from npu_trace.sources.npu_irqs import discover_npu_irqs, read_pci_functions

IRQ = os.path.join(DATA, "irq")
HOST = read(os.path.join(IRQ, "interrupts.firecracker-6.18"))
ASCEND = read(os.path.join(IRQ, "interrupts.ascend-910b-2npu"))


def fake_sysfs(root: Any, spec: Dict[str, Any]) -> str:
    """The PCI functions of `spec` as /sys/bus/pci/devices/<bdf>/ files (msi_irqs/<n> entries)."""
    base = os.path.join(str(root), "devices")
    for bdf, files in spec.items():
        if bdf == "comment":
            continue
        os.makedirs(os.path.join(base, bdf, "msi_irqs"))
        for key, value in files.items():
            if key == "msi_irqs":
                for irq in value:
                    open(os.path.join(base, bdf, "msi_irqs", str(irq)), "w").close()
            else:
                with open(os.path.join(base, bdf, key), "w") as f:
                    f.write(f"{value}\n")
    return base


def ascend_tree(tmp_path: Any) -> str:
    with open(os.path.join(IRQ, "pci.ascend-910b-2npu.json")) as f:
        return fake_sysfs(tmp_path, json.load(f))


def test_parse_interrupts_takes_the_name_column_with_its_spaces_and_shared_lines() -> None:
    lines = {line.irq: line for line in parse_interrupts(ASCEND)}
    assert lines[136] == IrqLine(136, "IR-PCI-MSIX-0000:3b:00.0", ("trans msg_chan_rx_msg_notify",))
    assert lines[137].names == ("non-trans msg_chan_rx_msg_notify",)
    assert lines[163].names == ("dma_done_irq", "topic_sched_aicpu")
    assert lines[139].names == ()  # a vector without a handler: its line ends at the trigger column
    assert lines[0] == IrqLine(0, "IO-APIC", ("timer",))
    assert max(lines) == 170  # NMI, LOC ...: not numbered, left out


def test_the_development_vm_has_no_npu_interrupt() -> None:
    host_lines = parse_interrupts(HOST)
    assert [line.names for line in host_lines if line.irq == 36] == [("virtio1-req.0",)]
    assert npu_irqs(HOST, {}) == {}


def test_npu_interrupts_of_a_two_npu_host_with_their_devices(tmp_path: Any) -> None:
    pci = read_pci_functions(ascend_tree(tmp_path))
    assert pci["0000:3b:00.0"] == PciFunction("0000:3b:00.0", "0x19e5", "0xd802", tuple(range(130, 140)), 0)
    got = npu_irqs(ASCEND, pci)
    assert sorted(got) == [*range(130, 140), 160, 161, 162, 163]  # not the NIC's, not the BMC card's (170)
    assert got[136] == NpuIrq(136, "trans msg_chan_rx_msg_notify", 0, "0000:3b:00.0")
    assert got[139] == NpuIrq(139, "", 0, "0000:3b:00.0")  # no handler yet, but one of the NPU's vectors
    # the second NPU has no dev_id file: its mailbox vector trs-mbox-1-0 tells its device
    assert {irq: got[irq].dev for irq in (160, 161, 162, 163)} == {160: 1, 161: 1, 162: 1, 163: 1}
    assert got[163].name == "dma_done_irq"


def test_without_sysfs_the_driver_names_still_tell_the_npu_interrupts() -> None:
    """A guest (vNPU) or a host whose PCI tree is not readable: the names alone, the mailbox's device."""
    got = npu_irqs(ASCEND, {})
    assert set(got) == {130, 131, 132, 133, 134, 135, 136, 137, 138, 160, 161, 162, 163}
    assert (got[133].dev, got[162].dev, got[130].dev) == (0, 1, None)


def test_a_function_without_dev_id_or_mailbox_is_numbered_by_address(tmp_path: Any) -> None:
    spec = {"0000:3b:00.0": {"vendor": "0x19e5", "device": "0xd802", "msi_irqs": [130]},
            "0000:86:00.0": {"vendor": "0x19e5", "device": "0xd802", "msi_irqs": [160]}}  # fmt: skip
    text = ("   CPU0\n 130:  1  IR-PCI-MSIX-0000:3b:00.0  0-edge  cq_update_irq\n"
            " 160:  1  IR-PCI-MSIX-0000:86:00.0  0-edge  cq_update_irq\n")
    got = npu_irqs(text, read_pci_functions(fake_sysfs(tmp_path, spec)))
    assert (got[130].dev, got[160].dev) == (0, 1)


def test_driver_irq_names() -> None:
    assert is_npu_irq_name("trs-mbox-3-1") and is_npu_irq_name("cq_update_irq")
    assert not is_npu_irq_name("trs-mbox-x-1") and not is_npu_irq_name("virtio0-config")


def test_discovery_reads_the_files_it_is_given(tmp_path: Any) -> None:
    proc = tmp_path / "interrupts"
    proc.write_text(ASCEND)
    got = discover_npu_irqs(str(proc), ascend_tree(tmp_path))
    assert len(got) == 14 and got[162].dev == 1
    assert discover_npu_irqs(str(tmp_path / "absent"), str(tmp_path / "nothing")) == {}
