"""Compile BPF programs with bcc and say what came out, for tests/test_bpf_compat.py (run as a child process, so
that ARCH and BCC_KERNEL_SOURCE, which bcc reads when it compiles, can name another architecture's headers).

stdin: a JSON list of jobs `{"program": "hal_uprobes", "cflags": [...], "functions": [...]}` (programs of the
repository's bpf/ folder); stdout: a JSON list, per job, of {function: [instructions, [offsets of the 64-bit
loads from the context register r1]]}. Nothing is loaded into the kernel: bcc compiles and creates the maps.
"""

from __future__ import annotations

import ctypes
import json
import struct
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

BPF_DIR = Path(__file__).resolve().parents[1] / "bpf"
LDX_DW = 0x79  # BPF_LDX | BPF_MEM | BPF_DW
CTX_REG = 1


def function(bcc: Any, obj: Any, name: str) -> Tuple[int, List[int]]:
    size = bcc.lib.bpf_function_size(obj.module, name.encode())
    if not size:
        raise SystemExit(f"no function {name}")
    code = ctypes.string_at(bcc.lib.bpf_function_start(obj.module, name.encode()), size)
    loads = []
    for at in range(0, size, 8):
        op, regs, off, _ = struct.unpack_from("<BBhi", code, at)
        if op == LDX_DW and regs >> 4 == CTX_REG:
            loads.append(off)
    return size // 8, loads


def main() -> None:
    import bcc

    out: List[Dict[str, Tuple[int, List[int]]]] = []
    for job in json.load(sys.stdin):
        src = BPF_DIR / f"{job['program']}.bpf.c"
        obj = bcc.BPF(src_file=str(src).encode(), cflags=[f"-I{BPF_DIR}", *job["cflags"]])
        try:
            out.append({name: function(bcc, obj, name) for name in job["functions"]})
        finally:
            obj.cleanup()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
