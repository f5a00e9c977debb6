"""Build the native executor (npu_sim.c) with gcc on demand into a cache dir keyed by the source hash.

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

from npu_trace.errors import SimulatorError

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npu_sim.c")
BINARY_NAME = "npu-sim"
CFLAGS = ("-O2", "-g", "-fno-inline", "-fno-omit-frame-pointer", "-Wall", "-pthread")


def source_hash() -> str:
    """sha256 (12 hex digits) of the source, the flags and the machine."""
    h = hashlib.sha256()
    try:
        with open(SOURCE, "rb") as f:
            h.update(f.read())
    except OSError as exc:
        raise SimulatorError(f"simulator source {SOURCE} is missing: {exc.strerror}") from exc
    h.update(" ".join(CFLAGS).encode())
    h.update(platform.machine().encode())
    return h.hexdigest()[:12]


def cache_root() -> str:
    if os.geteuid() == 0:
        return "/var/lib/npu-trace/sim"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "npu-trace", "sim")


def binary_path() -> str:
    return os.path.join(cache_root(), source_hash(), BINARY_NAME)


def ensure_built() -> str:
    """Path of the executor, compiling it first when the cache has none."""
    path = binary_path()
    if os.access(path, os.X_OK):
        return path
    _compile(path)
    return path


def _compile(path: str) -> None:
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
        _run_gcc(gcc, tmp)
        _publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _run_gcc(gcc: str, out: str) -> None:
    cmd = [gcc, *CFLAGS, "-o", out, SOURCE]
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
