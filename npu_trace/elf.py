"""A tiny ELF64 reader: function symbols and their file offsets (what a uprobe wants), no external tools.

offset(sym) = st_value - p_vaddr + p_offset of the PT_LOAD segment containing st_value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, List, Tuple

from npu_trace.errors import SimulatorError

PT_LOAD = 1
SHT_SYMTAB = 2
SHT_DYNSYM = 11
STT_FUNC = 2
SHN_UNDEF = 0


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: int
    shndx: int


@dataclass(frozen=True)
class Section:
    name_off: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class Elf:
    """A parsed little- or big-endian ELF64 file."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF":
            raise SimulatorError("not an ELF file")
        if data[4] != 2:
            raise SimulatorError("only ELF64 is supported")
        self.data = data
        self.end = "<" if data[5] == 1 else ">"
        self.machine = self._u("H", 18)
        self.sections = self._sections()
        self.segments = self._segments()

    @classmethod
    def open(cls, path: str) -> Elf:
        try:
            with open(path, "rb") as f:
                return cls(f.read())
        except OSError as exc:
            raise SimulatorError(f"cannot read ELF {path}: {exc.strerror}") from exc

    def _u(self, fmt: str, off: int) -> int:
        return int(struct.unpack_from(self.end + fmt, self.data, off)[0])

    def _sections(self) -> List[Section]:
        shoff, shentsize, shnum = self._u("Q", 0x28), self._u("H", 0x3A), self._u("H", 0x3C)
        out = []
        for i in range(shnum):
            base = shoff + i * shentsize
            name, typ, _flags, _addr, off, size, link, _info, _align, entsize = struct.unpack_from(
                self.end + "IIQQQQIIQQ", self.data, base
            )
            out.append(Section(name, typ, off, size, link, entsize))
        return out

    def _segments(self) -> List[Segment]:
        phoff, phentsize, phnum = self._u("Q", 0x20), self._u("H", 0x36), self._u("H", 0x38)
        out = []
        for i in range(phnum):
            typ, _flags, off, vaddr, _paddr, filesz, memsz, _align = struct.unpack_from(
                self.end + "IIQQQQQQ", self.data, phoff + i * phentsize
            )
            if typ == PT_LOAD:
                out.append(Segment(vaddr, off, filesz, memsz))
        return out

    def _cstr(self, off: int) -> str:
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode("utf-8", "replace")

    def _symtab(self, sec: Section) -> List[Symbol]:
        strtab = self.sections[sec.link]
        out = []
        entsize = sec.entsize or 24
        for i in range(sec.size // entsize):
            name, info, _other, shndx, value, size = struct.unpack_from(
                self.end + "IBBHQQ", self.data, sec.offset + i * entsize
            )
            out.append(Symbol(self._cstr(strtab.offset + name), value, size, info & 0xF, shndx))
        return out

    def symbols(self) -> List[Symbol]:
        """Symbols of .symtab and .dynsym (defined ones only)."""
        out: List[Symbol] = []
        for sec in self.sections:
            if sec.type in (SHT_SYMTAB, SHT_DYNSYM):
                out.extend(s for s in self._symtab(sec) if s.shndx != SHN_UNDEF and s.name)
        return out

    def functions(self) -> Dict[str, int]:
        """Defined function name -> st_value (virtual address)."""
        return {s.name: s.value for s in self.symbols() if s.type == STT_FUNC}

    def file_offset(self, vaddr: int) -> int:
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        raise SimulatorError(f"address {vaddr:#x} is in no PT_LOAD segment")

    def function_offsets(self, names: Tuple[str, ...]) -> Dict[str, int]:
        """File offsets of the named functions (SimulatorError naming the first one missing)."""
        funcs = self.functions()
        missing = [n for n in names if n not in funcs]
        if missing:
            raise SimulatorError(f"symbol {missing[0]!r} not found in the simulator binary")
        return {n: self.file_offset(funcs[n]) for n in names}
