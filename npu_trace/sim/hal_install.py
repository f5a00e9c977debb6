"""The simulator's real-ABI libascend_hal.so (hal_real.c) installed where the Ascend driver installs its own
(`npu_trace.device.hal_library.INSTALL_PATHS[0]`, /usr/local/Ascend/driver/lib64/driver/libascend_hal.so), so
`--bpf` finds it as it finds a real HAL, and `sim run --hal-abi real` runs scenarios through that very file (the
uprobes are set on its inode: a copy elsewhere would not be traced).

Ownership is marked by a sidecar, `<library>.npu-trace-sim` (JSON: the sha256 of the file installed, the
directories made for it, where it was built). `install()` refuses to replace a file that has no sidecar, or whose
content no longer matches it (someone put their own library there since); `uninstall()` removes only a file whose
content matches its sidecar, then the sidecar and the directories it made, if they are empty: the host is left as
it was found. `root` points both at another tree (tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import List, Optional, Tuple

from npu_trace.device.hal_library import INSTALL_PATHS
from npu_trace.errors import SimulatorError

TARGET = INSTALL_PATHS[0]
SIDECAR_SUFFIX = ".npu-trace-sim"


@dataclass(frozen=True)
class Installed:
    path: str  # the library, as this process reaches it (under `root`)
    sha256: str
    made_dirs: Tuple[str, ...]  # directories made for it, deepest first
    source: str  # the build it is a copy of
    changed: bool = False  # install(): False when the same library was already there


def target(root: str = "/") -> str:
    return os.path.join(root, TARGET.lstrip("/"))


def sidecar(path: str) -> str:
    return path + SIDECAR_SUFFIX


def installed(root: str = "/") -> Optional[Installed]:
    """The simulator's library as its sidecar describes it, None when there is no sidecar."""
    path = target(root)
    try:
        with open(sidecar(path)) as f:
            data = json.load(f)
        return Installed(path, str(data["sha256"]), tuple(data["made_dirs"]), str(data["source"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SimulatorError(f"unreadable ownership mark {sidecar(path)}: {exc}") from None


def install(source: str, root: str = "/") -> Installed:
    """Put `source` (the built library) at the driver's install path; refuses a file that is not ours."""
    path, digest = target(root), file_sha256(source)
    mine = _owned_or_absent(path, root)
    if mine is not None and mine.sha256 == digest and os.path.isfile(path):
        return mine
    made = dict.fromkeys([*_make_dirs(os.path.dirname(path)), *(mine.made_dirs if mine else ())])
    info = Installed(path, digest, tuple(made), source, changed=True)
    _write_sidecar(info)
    _copy_atomic(source, path)
    return info


def uninstall(root: str = "/") -> Optional[str]:
    """Remove the simulator's library (and its mark, and the directories made for it); the path removed, None
    when it was not installed. A library that is not what was installed is left alone: a SimulatorError."""
    mine = installed(root)
    if mine is None:
        return None
    if os.path.exists(mine.path):
        if file_sha256(mine.path) != mine.sha256:
            raise SimulatorError(f"{mine.path} changed since the simulator installed it: not removing it (remove "
                                 f"{sidecar(mine.path)} to disown it)")  # fmt: skip
        os.unlink(mine.path)
    os.unlink(sidecar(mine.path))
    for folder in mine.made_dirs:
        try:
            os.rmdir(folder)
        except OSError:  # not empty (something else went there since), or gone: leave it
            break
    return mine.path


def _owned_or_absent(path: str, root: str) -> Optional[Installed]:
    mine = installed(root)
    if mine is None and os.path.lexists(path):
        raise SimulatorError(f"{path} exists and is not the simulator's (no {os.path.basename(sidecar(path))}): "
                             "refusing to replace it (is the Ascend driver installed here?)")  # fmt: skip
    if mine is not None and os.path.exists(path) and file_sha256(path) != mine.sha256:
        raise SimulatorError(f"{path} changed since the simulator installed it: refusing to replace it")
    return mine


def _make_dirs(folder: str) -> List[str]:
    """Create `folder` and its missing parents; the ones created, deepest first."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)
        except OSError as exc:
            raise SimulatorError(f"cannot create {d}: {exc.strerror}") from None
    return missing


def _write_sidecar(info: Installed) -> None:
    what = "the npu-trace simulator's libascend_hal.so (npu-trace sim unload removes it)"
    text = json.dumps({"sha256": info.sha256, "made_dirs": list(info.made_dirs), "source": info.source, "what": what})
    _write_atomic(sidecar(info.path), text.encode() + b"\n", 0o644)


def _copy_atomic(source: str, path: str) -> None:
    try:
        with open(source, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SimulatorError(f"cannot read {source}: {exc.strerror}") from None
    _write_atomic(path, data, 0o755)


def _write_atomic(path: str, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".npu-trace-sim.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise SimulatorError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise SimulatorError(f"cannot read {path}: {exc.strerror}") from None
    return h.hexdigest()
