"""Build the native executor (npu_sim.c) and the simulator's real-ABI libascend_hal.so (hal_real.c) with gcc on
demand into a cache dir keyed by the sources' hash.

The build is atomic: compile to a temporary name, then hard-link it to the final name (never replacing an
existing binary, whose inode may carry registered uprobes), so concurrent builders agree on one file.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from typing import List

from npu_trace.errors import SimulatorError

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "npu_sim.c")
HAL_SOURCE = os.path.join(HERE, "hal_real.c")
HAL_HEADER = os.path.join(HERE, "hal_real.h")
BINARY_NAME = "npu-sim"
HAL_NAME = "libascend_hal.so"
CFLAGS = ("-O2", "-g", "-fno-inline", "-fno-omit-frame-pointer", "-Wall", "-pthread")
LIBS = ("-ldl",)
HAL_CFLAGS = ("-shared", "-fPIC")


def source_hash() -> str:
    """sha256 (12 hex digits) of the sources, the flags and the machine."""
    h = hashlib.sha256()
    for path in (SOURCE, HAL_SOURCE, HAL_HEADER):
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError as exc:
            raise SimulatorError(f"simulator source {path} is missing: {exc.strerror}") from exc
    h.update(" ".join((*CFLAGS, *LIBS, *HAL_CFLAGS)).encode())
    h.update(platform.machine().encode())
    return h.hexdigest()[:12]


def cache_root() -> str:
    if os.geteuid() == 0:
        return "/var/lib/npu-trace/sim"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "npu-trace", "sim")


def binary_path() -> str:
    return os.path.join(cache_root(), source_hash(), BINARY_NAME)


def hal_library_path() -> str:
    return os.path.join(cache_root(), source_hash(), HAL_NAME)


def ensure_built() -> str:
    """Path of the executor, compiling it first when the cache has none."""
    path = binary_path()
    if os.access(path, os.X_OK):
        return path
    _compile(path, [SOURCE, *LIBS])
    return path


def ensure_hal_library() -> str:
    """Path of the simulator's real-ABI libascend_hal.so (for `npu-sim -H`), compiling it when the cache has none."""
    path = hal_library_path()
    if os.access(path, os.R_OK):
        return path
    _compile(path, [*HAL_CFLAGS, HAL_SOURCE])
    return path


def _compile(path: str, args: List[str]) -> None:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise SimulatorError("cannot build the simulated NPU: no gcc/cc on PATH")
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise SimulatorError(f"cannot create {folder}: {exc.strerror}") from exc
    fd, tmp = tempfile.mkstemp(prefix=".npu-sim.", dir=folder)
    os.close(fd)
    try:
        _run_gcc(gcc, tmp, args)
        _publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _run_gcc(gcc: str, out: str, args: List[str]) -> None:
    cmd = [gcc, *CFLAGS, "-o", out, *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stdout.strip().splitlines() or ["?"])[-1]
        raise SimulatorError(f"gcc failed building the simulated NPU: {last}")
    os.chmod(out, 0o755)


def _publish(tmp: str, path: str) -> None:
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another builder won: same source hash, same program
    except OSError as exc:
        raise SimulatorError(f"cannot install {path}: {exc.strerror}") from exc
