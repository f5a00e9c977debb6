"""Uprobe definitions for the simulated NPU (pure data) and their registration in tracefs.

Entry probe per function:  p:ascend/ascend_<fn> BIN:0xOFFSET field=REG:type ...
Return probe per HAL call: r:ascend/ascend_<fn>_ret BIN:0xOFFSET ret=$retval:s32
"""

from __future__ import annotations

import contextlib
import glob
import os
import platform
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from npu_trace.device import hal
from npu_trace.elf import Elf
from npu_trace.errors import KernelFeatureError, SimulatorError, SourceError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import build

ARG_REGISTERS: Dict[str, Tuple[str, ...]] = {
    "x86_64": ("%di", "%si", "%dx", "%cx", "%r8", "%r9"),
    "aarch64": ("%x0", "%x1", "%x2", "%x3", "%x4", "%x5"),
}
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def arch_registers(machine: Optional[str] = None) -> Tuple[str, ...]:
    """Argument registers (in order) for `machine` (default: this host's platform.machine())."""
    m = (machine or platform.machine()).lower()
    m = _ARCH_ALIASES.get(m, m)
    if m not in ARG_REGISTERS:
        raise KernelFeatureError(f"the simulated NPU's uprobes support x86_64 and aarch64, not {m}")
    return ARG_REGISTERS[m]


def fetch_arg(param: hal.Param, reg: str) -> str:
    if param.type == "string":
        return f"{param.name}=+0({reg}):string"
    return f"{param.name}={reg}:{param.type}"


def definitions(binary: str, offsets: Mapping[str, int], machine: Optional[str] = None) -> List[str]:
    """Every uprobe_events line for the simulator at `binary` (function -> file offset)."""
    regs = arch_registers(machine)
    out = []
    for func in hal.FUNCS:
        loc = f"{binary}:{offsets[func.name]:#x}"
        args = " ".join(fetch_arg(p, regs[i]) for i, p in enumerate(func.params))
        out.append(f"p:{hal.GROUP}/{func.event} {loc} {args}")
        if func.hal:
            out.append(f"r:{hal.GROUP}/{func.ret_event} {loc} ret=$retval:s32")
    return out


@dataclass
class LoadedSim:
    """The simulator as registered: its binary and the uprobe events pointing at it."""

    binary: str
    definitions: List[str]
    events: List[str] = field(default_factory=lambda: list(hal.event_names()))
    changed: bool = False  # False when load() found everything already in place


def binary_definitions(binary: Optional[str] = None) -> Tuple[str, List[str]]:
    path = binary or build.ensure_built()
    offsets = Elf.open(path).function_offsets(tuple(f.name for f in hal.FUNCS))
    return path, definitions(path, offsets)


_LINE_RE = re.compile(r"^([pr]):(\S+)/(\S+)\s+(\S+):(0x[0-9a-fA-F]+)")


def _key(line: str) -> Optional[Tuple[str, str, str, str, int]]:
    """(kind, group, event, path, offset) of an uprobe_events line; args are left out (kernel respells)."""
    m = _LINE_RE.match(line.strip())
    if not m:
        return None
    return m.group(1), m.group(2), m.group(3), m.group(4), int(m.group(5), 16)


def registered(fs: Tracefs) -> List[str]:
    """Lines of uprobe_events in our group."""
    return [ln for ln in fs.uprobe_events() if (_key(ln) or ("", "", "", "", 0))[1] == hal.GROUP]


def is_loaded(fs: Tracefs, binary: Optional[str] = None) -> bool:
    """True when exactly our current definitions are registered."""
    _, wanted = binary_definitions(binary)
    have = {_key(ln) for ln in registered(fs)}
    return have == {_key(ln) for ln in wanted}


def load(fs: Tracefs, binary: Optional[str] = None) -> LoadedSim:
    """Register the simulator's uprobe events (idempotent; stale or foreign ascend/* events are replaced)."""
    path, wanted = binary_definitions(binary)
    if {_key(ln) for ln in registered(fs)} == {_key(ln) for ln in wanted}:
        return LoadedSim(path, wanted, changed=False)
    unload(fs)
    try:
        for line in wanted:
            fs.add_uprobe_event(line)
    except SourceError as exc:
        _quiet_unload(fs)
        raise SimulatorError(f"cannot register the simulator's uprobes: {exc}") from exc
    return LoadedSim(path, wanted, changed=True)


def _quiet_unload(fs: Tracefs) -> None:
    with contextlib.suppress(SimulatorError, SourceError):
        unload(fs)


def holders(fs: Tracefs) -> List[str]:
    """Where an ascend event is still enabled: "top-level" or "instance <name>"."""
    out = []
    if _any_enabled(fs.path(f"events/{hal.GROUP}")):
        out.append("top-level")
    for inst in glob.glob(fs.path("instances/*")):
        if _any_enabled(os.path.join(inst, "events", hal.GROUP)):
            out.append(f"instance {os.path.basename(inst)}")
    return out


def _any_enabled(group_dir: str) -> bool:
    for path in glob.glob(os.path.join(group_dir, "*", "enable")):
        try:
            with open(path) as f:
                if f.read().strip() not in ("0", ""):
                    return True
        except OSError:
            continue
    return False


def unload(fs: Tracefs) -> int:
    """Remove every ascend/* uprobe event; returns how many were removed."""
    lines = registered(fs)
    busy = holders(fs) if lines else []
    if busy:
        where = ", ".join(busy)
        raise SimulatorError(f"ascend events are still enabled in tracefs {where}: disable them first")
    for line in lines:
        key = _key(line)
        assert key is not None
        try:
            fs.remove_uprobe_event(key[1], key[2])
        except SourceError as exc:
            raise SimulatorError(
                f"cannot remove uprobe {key[1]}/{key[2]} (in use by perf/bpf or an instance?): {exc}"
            ) from exc
    return len(lines)
