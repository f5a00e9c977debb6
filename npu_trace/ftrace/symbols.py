"""Kernel symbols from `/proc/kallsyms` text: an address -> the function it lies in, as the kernel prints it.

Pure: text in, lookups out. A symbol spans from its address to the next higher address of the table (the
kernel's `kallsyms_lookup_size_offset`); of several symbols at one address the first listed is the one shown
(as the kernel's lookup goes back to the first alias). Absolute symbols (type `a`/`A`: x86-64's per-CPU offsets)
and ARM's mapping symbols (`$a`, `$d`) name no code and are left out, as trace-cmd leaves them out; so are symbols
at address 0 (a kallsyms read where the kernel hides its addresses, kptr_restrict: every address 0): the first of
them would span every address.

`only`: a table cut to a few functions (the recording of a session without stacks keeps the trace_marker's
writer, `npu_trace.sources.host_symbols`): an address resolves only inside one of them.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

MAX_KALLSYMS_BYTES = 32 << 20  # a kallsyms text larger than this is refused (distro kernels: 10-20 MiB)


class Symbol(NamedTuple):
    """The function an address lies in: its name, the address's offset in it, its size, its module ("" for
    the kernel itself)."""

    name: str
    offset: int
    size: int
    module: str


def parse_lines(text: str) -> List[Tuple[int, str, str]]:
    """(address, name, module) of every code symbol of a kallsyms text, in the text's order; lines that are not
    `address type name [module]` are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not 3 <= len(parts) <= 4 or len(parts[1]) != 1 or parts[1] in "aA" or parts[2][:1] == "$":
            continue
        module = parts[3] if len(parts) == 4 else "[]"
        if len(parts[0]) > 16 or len(parts[2]) > 512 or module[:1] != "[" or module[-1:] != "]":
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError:
            continue
        out.append((addr, parts[2], module[1:-1]))
    return out


class Symbols:
    """A kallsyms table, sorted by address once."""

    def __init__(self, entries: Iterable[Tuple[int, str, str]], only: Optional[Iterable[str]] = None) -> None:
        known = (entry for entry in entries if entry[0])  # address 0: hidden (see the module docstring)
        ordered = sorted(enumerate(known), key=lambda e: (e[1][0], e[0]))  # aliases: the first listed first
        self.addrs = [addr for _, (addr, _, _) in ordered]
        self.names = [name for _, (_, name, _) in ordered]
        self.modules = [module for _, (_, _, module) in ordered]
        self.only: Optional[FrozenSet[str]] = frozenset(only) if only is not None else None
        self._first, self._end = self._spans()

    @classmethod
    def parse(cls, text: str, only: Optional[Iterable[str]] = None) -> Symbols:
        return cls(parse_lines(text), only)

    def __len__(self) -> int:
        return len(self.names)

    def _spans(self) -> Tuple[List[int], List[int]]:
        """Per entry: the index of the first entry at its address, and the next higher address (0: none, the
        last symbol: it spans to the end, its size unknown)."""
        first, end = [0] * len(self.addrs), [0] * len(self.addrs)
        nxt = 0
        for i in range(len(self.addrs) - 1, -1, -1):
            if i + 1 < len(self.addrs) and self.addrs[i + 1] > self.addrs[i]:
                nxt = self.addrs[i + 1]
            end[i] = nxt
        for i in range(1, len(self.addrs)):
            first[i] = first[i - 1] if self.addrs[i] == self.addrs[i - 1] else i
        return first, end

    def _index(self, addr: int) -> int:
        """The entry an address lies in (the first alias at its start), or -1."""
        at = bisect_right(self.addrs, addr) - 1
        if at < 0:
            return -1
        at = self._first[at]
        if self.only is not None and (self.names[at] not in self.only or not self._end[at]):
            return -1
        return at

    def lookup(self, addr: int) -> Optional[Symbol]:
        at = self._index(addr)
        if at < 0:
            return None
        start, end = self.addrs[at], self._end[at]
        return Symbol(self.names[at], addr - start, end - start if end else 0, self.modules[at])

    def name(self, addr: int) -> Optional[str]:
        """The function's name alone (the kernel's `%ps`), or None."""
        at = self._index(addr)
        return self.names[at] if at >= 0 else None


def sym_offset(symbols: Optional[Symbols], addr: int) -> str:
    """The kernel's `%pS`: `name+0xoff/0xsize`, ` [module]` after a module's (the last symbol of the table,
    whose size is not known: `name+0xoff`); `0x...` when unknown."""
    sym = symbols.lookup(addr) if symbols is not None else None
    if sym is None:
        return f"0x{addr:x}"
    size = f"/0x{sym.size:x}" if sym.size else ""
    module = f" [{sym.module}]" if sym.module else ""
    return f"{sym.name}+0x{sym.offset:x}{size}{module}"


def sym_name(symbols: Optional[Symbols], addr: int) -> str:
    """The kernel's `%ps` (trace-cmd's too): the name, `0x...` when unknown."""
    name = symbols.name(addr) if symbols is not None else None
    return name if name is not None else f"0x{addr:x}"
