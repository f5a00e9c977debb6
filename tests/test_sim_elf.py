"""The ELF64 reader against the built simulator, compared with `nm` (and a run of the executor, unprivileged)."""

from __future__ import annotations

import collections
import shutil
import subprocess
from typing import Dict

import pytest

from npu_trace.device import hal
from npu_trace.elf import Elf, Segment
from npu_trace.errors import SimulatorError
from npu_trace.sim import build
from npu_trace.sim.runner import start
from npu_trace.sim.threads import SINGLE


@pytest.fixture(scope="module")
def binary() -> str:
    if not (shutil.which("gcc") or shutil.which("cc")):
        pytest.skip("no C compiler")
    return build.ensure_built()


def _nm(path: str) -> Dict[str, int]:
    if not shutil.which("nm"):
        pytest.skip("no nm")
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            syms[parts[2]] = int(parts[0], 16)
    return syms


def test_functions_match_nm(binary: str) -> None:
    ours, theirs = Elf.open(binary).functions(), _nm(binary)
    for name in (f.name for f in hal.FUNCS):
        assert ours[name] == theirs[name]
    common = set(ours) & set(theirs)
    assert len(common) >= len(hal.FUNCS)
    assert all(ours[n] == theirs[n] for n in common)


def test_file_offsets_point_at_code(binary: str) -> None:
    elf = Elf.open(binary)
    offsets = elf.function_offsets(tuple(f.name for f in hal.FUNCS))
    funcs = elf.functions()
    for name, off in offsets.items():
        seg = next(s for s in elf.segments if s.vaddr <= funcs[name] < s.vaddr + s.filesz)
        assert off == funcs[name] - seg.vaddr + seg.offset
        assert 0 < off < len(elf.data)
    with pytest.raises(SimulatorError):
        elf.function_offsets(("no_such_function",))


def test_offset_with_shifted_segment() -> None:
    elf = Elf.__new__(Elf)
    elf.segments = [
        Segment(vaddr=0x400000, offset=0x0, filesz=0x1000, memsz=0x1000),
        Segment(vaddr=0x601000, offset=0x1000, filesz=0x200, memsz=0x400),
    ]
    assert elf.file_offset(0x400123) == 0x123
    assert elf.file_offset(0x601010) == 0x1010
    with pytest.raises(SimulatorError):
        elf.file_offset(0x601300)  # bss: in memory only


def test_not_elf() -> None:
    with pytest.raises(SimulatorError):
        Elf(b"#!/bin/sh\n")


def test_build_is_cached(binary: str) -> None:
    assert build.ensure_built() == binary
    assert build.source_hash() in binary


@pytest.mark.host  # its calls would land in the trace of a privileged test beside it (tests/conftest.py)
def test_executor_runs_plan_and_times_calls(binary: str) -> None:
    run = start("spikes", 3, 0.3, 400, 2, binary=binary, host=SINGLE)  # one thread: the calls one after another
    truth = run.wait(timeout=30)
    acts = truth["actions"]
    assert truth["counts"] == dict(sorted(collections.Counter(a["func"] for a in acts).items()))
    assert all(a["start_ns"] <= a["end_ns"] for a in acts)
    assert all(x["end_ns"] <= y["start_ns"] for x, y in zip(acts, acts[1:]))
    for a in acts:
        if a["delay_ns"]:
            assert a["end_ns"] - a["start_ns"] >= a["delay_ns"]
    spikes = [a for a in acts if a["kind"] == "spike" and a["ret"] is not None]
    assert spikes and all(a["end_ns"] - a["start_ns"] >= 5_000_000 for a in spikes)
