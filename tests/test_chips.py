"""Offline: which chip a host has (npu_trace.device.chips, npu_trace.sources.chip_search) and the task layout
that follows: from the PCI device ids of the driver's table, else from the model npu-smi prints (the field
samples of tests/data/npusmi/field, real hosts' tables), else unknown."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from npu_trace.device import chips
from npu_trace.device.irqs import PciFunction
from npu_trace.device.npusmi_info import parse_info
from npu_trace.sources.chip_search import find_chip

FIELD = Path(__file__).parent / "data" / "npusmi" / "field"


def rows(sample: str) -> List[Tuple[str, bool]]:
    return [(c.name, c.phy_id is not None) for c in parse_info((FIELD / sample).read_text())]


@pytest.mark.parametrize(
    ("sample", "chip"),
    [
        ("info-02.txt", "910B"),  # 910B3
        ("vllm-ascend-4505-910b2c-x16.txt", "910B"),  # 910B2C
        ("hami-webui-47-910b4-1-masked.txt", "910B"),  # 910B4-1
        ("info-01.txt", "910_93"),  # Ascend910 with the Chip Phy-ID column: the A3 box
        ("vllm-ascend-12980-a3-116-head.txt", "910_93"),
        ("vllm-ascend-1047-910prob.txt", "910"),  # the first 910's board
        ("info-06.txt", "310P"),  # 310P3
        ("hami-vnpu-fragment-vir02.txt", "310P"),  # a vNPU of a 310P
        ("memory-07.txt", None),  # no chip table: not told
    ],
)
def test_the_chip_from_field_npu_smi_tables(sample: str, chip: Optional[str]) -> None:
    found = chips.from_models(rows(sample))
    assert found.chips == ((chip,) if chip else ())
    assert found.layout is (chips.CHIPS[chip] if chip else chips.UNKNOWN)


def test_model_names_that_cannot_be_told_apart_are_unknown() -> None:
    assert chips.chip_of_model("910B") is None  # the first 910 had a "910B" bin too
    assert chips.chip_of_model("Ascend910") is None  # without the A3's Phy-ID column
    assert chips.chip_of_model("950") is None and chips.chip_of_model("310B1") is None
    assert chips.chip_of_model("910PremiumA") == "910" and chips.chip_of_model("910A") == "910"


def pci(vendor: str, device: str, bdf: str = "0000:c1:00.0") -> PciFunction:
    return PciFunction(bdf, vendor, device)


def test_the_chip_from_pci_device_ids_of_the_drivers_table() -> None:
    assert chips.from_pci([pci("0x19e5", "0xd802")]).layout is chips.STARS
    assert chips.from_pci([pci("0x19e5", "0xd803")]).chips == ("910_93",)
    assert chips.from_pci([pci("0x19e5", "0xd801")]).layout is chips.TS
    assert chips.from_pci([pci("0x20c6", "0xd500")]).chips == ("310P",)  # a partner's 310P card
    assert chips.from_pci([pci("0x8086", "0xd802"), pci("0x19e5", "0xd806")]).chips == ()  # not ours / the 950
    found = chips.from_pci([pci("0x19e5", "0xd802", f"0000:{n:02x}:00.0") for n in range(4)])
    assert found.chips == ("910B",) and found.how == "PCI 19e5:d802 (0000:00:00.0), 19e5:d802 (0000:01:00.0) ..."


def test_chips_of_different_layouts_give_no_layout() -> None:
    mixed = chips.from_pci([pci("0x19e5", "0xd802"), pci("0x19e5", "0xd500", "0000:c2:00.0")])
    assert mixed.chips == ("910B", "310P") and mixed.layout is chips.UNKNOWN
    assert "chips with different layouts" in mixed.describe()
    assert chips.from_pci([pci("0x19e5", "0xd802"), pci("0x19e5", "0xd803")]).layout is chips.STARS


def test_layout_flags_and_what_an_unknown_chip_says() -> None:
    assert chips.STARS.cflags() == ["-DTASK_STREAM_OFF=4", "-DTASK_TASK_OFF=6"]
    assert chips.TS.cflags() == ["-DTASK_STREAM_OFF=0", "-DTASK_TASK_OFF=2"]
    assert chips.UNKNOWN.cflags() == []
    assert chips.named("unknown").describe() == (
        "chip unknown (--chip unknown): unknown: HAL task calls timed, their stream and task left empty"
    )
    assert chips.named("310P").describe().startswith("310P (--chip 310P): task layout ts: stream id (u16) at 0")


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_find_chip_reads_pci_first_then_npu_smi(tmp_path: Path) -> None:
    smi = tmp_path / "npu-smi"
    smi.write_text(f"#!/bin/sh\ncat {FIELD / 'info-06.txt'}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    assert find_chip(str(smi), str(tmp_path / "pci")).chips == ("310P",)  # no PCI tree: npu-smi's model
    write(tmp_path, "pci/0000:c1:00.0/vendor", "0x19e5\n")
    write(tmp_path, "pci/0000:c1:00.0/device", "0xd802\n")
    found = find_chip(str(smi), str(tmp_path / "pci"))
    assert found.chips == ("910B",) and found.how == "PCI 19e5:d802 (0000:c1:00.0)"


def test_find_chip_without_pci_nor_npu_smi_is_unknown(tmp_path: Path) -> None:
    found = find_chip(str(tmp_path / "no-npu-smi"), str(tmp_path / "pci"))
    assert found.layout is chips.UNKNOWN and "no NPU PCI id, no" in found.how
    failing = tmp_path / "npu-smi"
    failing.write_text("#!/bin/sh\nexit 3\n")
    os.chmod(failing, 0o755)
    assert find_chip(str(failing), str(tmp_path / "pci")).how == f"no NPU PCI id; {failing} info: failed:3"
