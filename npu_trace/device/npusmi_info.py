"""The `npu-smi info` table as real hosts print it, read line by line: what is whole is read, what is not is said.

Layouts seen in the field (tests/data/npusmi/field/ holds real pastes of each):

* the box is 98 columns wide (910B/A3, npu-smi 23-25), 106 (310P/310B: `Chip Device`, a wider Health cell,
  no HBM column) or 116 (26.x); only the `|` cells matter here, never their widths;
* a chip is two rows: `NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)` and
  `Chip [Phy-ID|Device] | Bus-Id | AICore(%) Memory-Usage(MB) [HBM-Usage(MB)]`; an A3 or 310P Duo card has two
  chips (two row pairs under one NPU id, a plain `+----+` line between them); NPU ids need not be 0..N;
* values: Power `NA` (310P) or `-` (the second chip of an A3, whose card reports the power once), Bus-Id `NA`,
  masked (`0000:xx:00.0`) or a VM's address; `used / total` pairs with or without spaces (`61609/ 65536`);
* the process section: `NPU Chip | Process id | Process name | Process memory(MB) [| Process id in container]`
  rows (names may be empty or cut), or `No running processes found in NPU <id>`;
* pastes cut anywhere (no closing border, a last row without its closing `|`), fragments that start mid-table
  without their header rows, prompt or environment lines around the table.

`parse_table(text)` -> `InfoTable` (chips, process rows, the NPUs whose process list was read whole, the
version, notes saying what was not read and why). Pure and total: any text gives a table (possibly empty),
never an exception. A row cut before its closing `|` is never trusted (its last number may be cut too).
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Set, Tuple

MAX_OUTPUT = 1 << 20  # characters of one output read at most
MAX_LINE = 4096  # characters of one line looked at
MAX_NOTES = 20
_BDF = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_PAIR = r"(\d{1,12})\s{0,8}/\s{0,8}(\d{1,12})"
_NUM = re.compile(r"^-?\d{1,12}(?:\.\d{1,6})?$")
_FIRST = re.compile(r"^(\d{1,10})\s+(\S.{0,80})$")  # "0     910B3", "32768   310P3"
_FIRST_VALUES = re.compile(r"^(\S{1,20})\s+(\S{1,20})(?:\s+" + _PAIR + r")?$")  # power temp [hugepages]
_SECOND_IDS = re.compile(r"^(\d{1,10})(?:\s+(\d{1,10}))?$")  # chip [phy-id | device]
_SECOND_VALUES = re.compile(r"^(\S{1,20})\s+" + _PAIR + r"(?:\s+" + _PAIR + r")?$")  # aicore mem [hbm]
_PROC_IDS = re.compile(r"^(\d{1,10})\s+(\d{1,10})$")
_IDLE = re.compile(r"^No running processes found in NPU (\d{1,10})$")
_VERSION = re.compile(r"Version:\s*(\S{1,40})|npu-smi\s+(\d\S{0,39})")


class ChipInfo(NamedTuple):
    """One chip of the table. Memory in MB as printed: `hbm_*` None where the box has no HBM column (310P,
    310B: their device memory is `Memory-Usage`, in `mem_*`)."""

    npu: int
    chip: int
    name: str
    health: str
    power_w: Optional[float]  # None: printed NA or -
    temp_c: Optional[int]
    bus_id: str  # as printed: 0000:9D:00.0, 0000:xx:00.0 (masked), NA
    aicore_pct: Optional[int]
    hbm_used_mb: Optional[int]
    hbm_total_mb: Optional[int]
    phy_id: Optional[int] = None  # A3's `Chip Phy-ID`: the physical chip id (the driver's dev_id)
    device_id: Optional[int] = None  # 310P's `Chip Device`: the logical device (/dev/davinci<N>)
    mem_used_mb: Optional[int] = None  # Memory-Usage(MB): device (DDR) memory
    mem_total_mb: Optional[int] = None
    hugepages_used: Optional[int] = None
    hugepages_total: Optional[int] = None
    line: int = 0  # of its first row, 1-based

    @property
    def memory(self) -> str:
        """Which memory `used_mb`/`total_mb` are: "hbm", or "device" where there is no HBM column."""
        return "hbm" if self.hbm_total_mb is not None else "device"

    @property
    def used_mb(self) -> Optional[int]:
        return self.hbm_used_mb if self.hbm_total_mb is not None else self.mem_used_mb

    @property
    def total_mb(self) -> Optional[int]:
        return self.hbm_total_mb if self.hbm_total_mb is not None else self.mem_total_mb

    @property
    def bdf(self) -> Optional[str]:
        """The Bus-Id as a PCI address (lower case), None when it is NA or masked."""
        return self.bus_id.lower() if _BDF.match(self.bus_id) else None


class ProcessInfo(NamedTuple):
    npu: int
    chip: int
    pid: int
    name: str  # may be empty or cut (python3.1)
    memory_mb: int
    container_pid: Optional[int] = None  # 26.x's `Process id in container` (None: no such column, or NA)
    line: int = 0


class InfoTable(NamedTuple):
    version: Optional[str]
    chips: List[ChipInfo]
    processes: List[ProcessInfo]
    process_npus: List[int]  # NPUs whose process list was read whole (rows, or "No running processes")
    notes: List[str]  # what was not read, and why


class _Header:
    """What the header rows said (None: not seen, a fragment)."""

    def __init__(self) -> None:
        self.ids: Optional[str] = None  # "phy", "device" or "" (910B: only `Chip`)
        self.hbm: Optional[bool] = None
        self.container_col = False


class _Reader:
    def __init__(self) -> None:
        self.header = _Header()
        self.version: Optional[str] = None
        self.chips: List[ChipInfo] = []
        self.processes: List[ProcessInfo] = []
        self.whole: Set[int] = set()  # NPUs whose process block ended (closed by a border)
        self.open_block: Optional[int] = None  # the NPU whose process rows are being read
        self.in_processes = False
        self.first: Optional[Tuple[int, int, str, str, List[str]]] = None  # (line, npu, name, health, values)
        self.notes: List[str] = []
        self.inferred = False
        self.dropped = 0
        self.clean = False  # the line before was a border or a header: a process block starting now is all there
        self.partial: Set[int] = set()  # NPUs whose process rows began before the text did (a fragment)

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self.dropped += 1

    # ---- lines ------------------------------------------------------------------------------------------
    def line(self, n: int, raw: str) -> None:
        s = raw[:MAX_LINE].strip()
        clean, self.clean = self.clean, False
        if s.startswith("+"):
            self.border(n)
            self.clean = True
        elif s.startswith("|"):
            self.row(n, s, clean)
        elif s:
            self.other(n)

    def border(self, n: int) -> None:
        self.lost_first(n)
        if self.open_block is not None:
            self.whole.add(self.open_block)
            self.open_block = None

    def other(self, n: int) -> None:
        self.lost_first(n)
        self.open_block = None  # a process block that text interrupts is not known whole

    def row(self, n: int, s: str, clean: bool) -> None:
        closed = len(s) > 1 and s.endswith("|")
        cells = [c.strip() for c in (s[1:-1] if closed else s[1:]).split("|")]
        if self.header_row(cells):
            self.clean = True
            return
        if not closed:
            self.lost_first(n)
            self.note(f"line {n}: cut before its closing '|': not read")
            self.open_block = None
            return
        if len(cells) == 3:
            self.chip_row(n, cells)
        elif len(cells) in (4, 5):
            self.process_row(n, cells, clean)
        elif len(cells) == 1:
            self.single_cell(n, cells[0])
        else:
            self.unknown(n)

    def header_row(self, cells: List[str]) -> bool:
        first = cells[0]
        if len(cells) == 1 and "npu-smi" in first:
            m = _VERSION.search(first)
            self.version = (m.group(1) or m.group(2)) if m else None
            return True
        if first.startswith("NPU") and "Name" in first:
            self.in_processes = False
            return True
        if first.startswith("Chip") and len(cells) >= 3 and "Bus-Id" in cells[1]:
            self.header.ids = "phy" if "Phy-ID" in first else "device" if "Device" in first else ""
            self.header.hbm = "HBM" in cells[2]
            return True
        if len(cells) >= 4 and "Process id" in cells[1]:
            self.in_processes = True
            self.header.container_col = len(cells) >= 5 and "container" in cells[4]
            return True
        return False

    def single_cell(self, n: int, cell: str) -> None:
        self.lost_first(n)
        m = _IDLE.match(cell)
        if m:
            self.whole.add(int(m.group(1)))
            self.in_processes = True
        else:
            self.unknown(n)

    def unknown(self, n: int) -> None:
        self.lost_first(n)
        self.note(f"line {n}: not a row of a known npu-smi layout: not read")

    # ---- chips ------------------------------------------------------------------------------------------
    def chip_row(self, n: int, cells: List[str]) -> None:
        first = _FIRST.match(cells[0])
        values = _FIRST_VALUES.match(cells[2])
        if first and values and cells[1] and " " not in cells[1] and not first.group(2).strip().isdigit():
            self.lost_first(n)
            self.first = (n, int(first.group(1)), first.group(2).strip(), cells[1], list(values.groups()))
            return
        ids, mem = _SECOND_IDS.match(cells[0]), _SECOND_VALUES.match(cells[2])
        if ids and mem and " " not in cells[1]:
            self.second_row(n, ids.groups(), cells[1], mem.groups())
        else:
            self.unknown(n)

    def lost_first(self, n: int) -> None:
        if self.first is not None:
            line, npu, name, _, _ = self.first
            self.note(f"line {line}: NPU {npu} ({name}): its second row (chip, Bus-Id, memory) is missing: not read")
            self.first = None

    def second_row(self, n: int, ids: Tuple[Optional[str], ...], bus: str, mem: Tuple[Optional[str], ...]) -> None:
        if self.first is None:
            self.note(f"line {n}: a chip row (chip {ids[0]}, Bus-Id {bus}) without its NPU row above: not read")
            return
        line, npu, name, health, (power, temp, hp_used, hp_total) = self.first
        self.first = None
        hbm = mem[3] is not None
        if self.header.hbm is not None and self.header.hbm != hbm:
            self.note(f"line {n}: NPU {npu}: {'two' if hbm else 'one'} memory columns under a header saying "
                      f"{'HBM' if self.header.hbm else 'no HBM'}: read as printed")  # fmt: skip
        kind = self.id_kind(hbm) if ids[1] is not None else ""
        extra = int(ids[1]) if ids[1] is not None else None
        self.chips.append(ChipInfo(
            npu=npu, chip=int(ids[0] or 0), name=name, health=health, power_w=_float(power), temp_c=_int(temp),
            bus_id=bus, aicore_pct=_int(mem[0] or ""), hbm_used_mb=_int(mem[3]), hbm_total_mb=_int(mem[4]),
            phy_id=extra if kind == "phy" else None, device_id=extra if kind == "device" else None,
            mem_used_mb=_int(mem[1]), mem_total_mb=_int(mem[2]), hugepages_used=_int(hp_used),
            hugepages_total=_int(hp_total), line=line,
        ))  # fmt: skip

    def id_kind(self, hbm: bool) -> str:
        """The second id column's meaning: from the header, or (a fragment) from the memory columns: the boxes
        with an HBM column print `Phy-ID` (A3), those without print `Device` (310P)."""
        if self.header.ids:
            return self.header.ids
        if self.header.ids is None and not self.inferred:
            self.inferred = True
            self.note(f"no header rows: the chips' second id read as {'Phy-ID' if hbm else 'Device'} "
                      f"(a box {'with' if hbm else 'without'} an HBM column)")  # fmt: skip
        return "phy" if hbm else "device"

    # ---- processes --------------------------------------------------------------------------------------
    def process_row(self, n: int, cells: List[str], clean: bool) -> None:
        self.lost_first(n)
        ids = _PROC_IDS.match(cells[0])
        pid, memory = _int(cells[1]), _int(cells[3])
        if ids is None or pid is None or memory is None:
            self.unknown(n)
            return
        npu = int(ids.group(1))
        if self.open_block != npu:
            if self.open_block is not None:  # the next NPU's rows without a border: the last one's ended
                self.whole.add(self.open_block)
            elif not clean:  # its first rows may be before the text began
                self.partial.add(npu)
        self.open_block = npu
        container = _int(cells[4]) if len(cells) == 5 else None
        self.processes.append(ProcessInfo(npu, int(ids.group(2)), pid, cells[2], memory, container, n))

    def finish(self) -> InfoTable:
        self.lost_first(0)
        if self.open_block is not None:
            self.note(f"NPU {self.open_block}: its process list is cut: its processes are not all known")
        if self.dropped:
            self.notes.append(f"... and {self.dropped} more such lines")
        whole = sorted(self.whole - {self.open_block} - self.partial)
        self.unlisted(whole)
        return InfoTable(self.version, self.chips, self.processes, whole, self.notes)

    def unlisted(self, whole: List[int]) -> None:
        """Say which chips' processes are not known (no process section, or one cut before their NPU)."""
        missing = sorted({c.npu for c in self.chips} - set(whole) - {self.open_block})
        if not missing:
            return
        if not self.in_processes and not self.processes and not whole:
            self.notes.append("no process section (the output ends after the chips): the processes are not known")
        else:
            listed = ", ".join(map(str, missing))
            self.notes.append(f"NPU {listed}: no process rows read (the process section is cut): not known")


def parse_table(text: str) -> InfoTable:
    """The whole `npu-smi info` output (or any paste of it) -> InfoTable."""
    reader = _Reader()
    for n, line in enumerate(text[:MAX_OUTPUT].splitlines(), 1):
        reader.line(n, line)
    return reader.finish()


def parse_info(text: str) -> List[ChipInfo]:
    """The chips of an `npu-smi info` output (see parse_table for the rest)."""
    return parse_table(text).chips


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and text.isdigit() and len(text) <= 12 else None


def _float(text: str) -> Optional[float]:
    return float(text) if _NUM.match(text) else None
