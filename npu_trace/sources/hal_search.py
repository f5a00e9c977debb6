"""Finding the HAL library the host's processes really run, for --bpf's uprobes (npu_trace.device.hal_library).

`find_hal(explicit)`: `--hal PATH` when given; else the files mapped by running processes (through
`/proc/PID/root`, so a container's own copy is found as the container sees it), one per distinct file; else the
first of the driver's install paths that exists. Every place looked at is kept, for doctor and for the error
that names them when nothing is found.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from npu_trace.device.hal_library import INSTALL_PATHS, LIBRARY, is_stub, mapped_paths

Key = Tuple[int, int]  # (st_dev, st_ino): one file however it is reached


@dataclass(frozen=True)
class HalFile:
    path: str  # a path this process can open (through /proc/PID/root for another mount namespace)
    how: str  # "--hal", "mapped by N processes (pid ...)", "install path"
    pids: Tuple[int, ...] = ()


@dataclass
class HalSearch:
    files: List[HalFile] = field(default_factory=list)  # what uprobes are set on: distinct files
    stubs: List[str] = field(default_factory=list)  # the toolkit's link stubs seen (never chosen)
    looked: List[str] = field(default_factory=list)  # where it looked, for the message when nothing is found

    @property
    def paths(self) -> Tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def describe(self) -> str:
        if not self.files:
            return f"{LIBRARY} not found ({'; '.join(self.looked)})"
        return "; ".join(f"{f.path} ({f.how})" for f in self.files)


def find_hal(explicit: Optional[str] = None, proc: str = "/proc", root: str = "/") -> HalSearch:
    """Where the HAL is (see the module docstring). `proc` and `root`: the host's procfs and filesystem root
    (tests point them at a fake tree)."""
    search = HalSearch()
    if explicit is not None:
        search.files.append(HalFile(explicit, "--hal"))
        return search
    _mapped(search, proc)
    if not search.files:
        _installed(search, root)
    return search


def _mapped(search: HalSearch, proc: str) -> None:
    seen: Dict[Key, Tuple[str, List[int]]] = {}
    pids = _pids(proc)
    for pid in pids:
        for path in mapped_paths(_read(os.path.join(proc, str(pid), "maps"))):
            reach = os.path.join(proc, str(pid), "root") + path
            key = _key(reach)
            if key is None:
                continue
            if is_stub(path):
                search.stubs.append(path)
                continue
            first = seen.setdefault(key, (_plain(proc, pid, path, reach), []))
            first[1].append(pid)
    search.looked.append(f"the maps of {len(pids)} processes")
    for path, users in seen.values():
        shown = " ".join(map(str, users[:3])) + (" ..." if len(users) > 3 else "")
        how = f"mapped by {len(users)} process{'es' if len(users) > 1 else ''} (pid {shown})"
        search.files.append(HalFile(path, how, tuple(users)))


def _plain(proc: str, pid: int, path: str, reach: str) -> str:
    """The path as the host sees it when the process shares the host's root, else through /proc/PID/root."""
    try:
        same = os.readlink(os.path.join(proc, str(pid), "root")) == "/"
    except OSError:
        same = False
    return path if same and _key(path) == _key(reach) else reach


def _installed(search: HalSearch, root: str) -> None:
    for path in INSTALL_PATHS:
        search.looked.append(path)
        if os.path.isfile(os.path.join(root, path.lstrip("/"))):
            search.files.append(HalFile(os.path.join(root, path.lstrip("/")), "install path"))
            return


def _pids(proc: str) -> List[int]:
    try:
        return sorted(int(n) for n in os.listdir(proc) if n.isdigit())
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:  # the process ended, or its maps are not ours to read
        return ""


def _key(path: str) -> Optional[Key]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
