"""Offline: the HAL ABI choice (npu_trace.bpf.abi), the real-ABI offsets of bpf/hal_uprobes.bpf.c against the
C compiler's layout of the same structs (LP64), and the decoding of hand-built records of real-ABI calls."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest

from npu_trace.bpf import abi, layout
from npu_trace.bpf.config import OPTIONAL_HAL_SYMBOLS, BpfConfig
from npu_trace.bpf.records import Decoder
from npu_trace.device import chips
from npu_trace.errors import InputError, UsageError
from npu_trace.sim import build

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = (ROOT / "bpf" / "hal_uprobes.bpf.c").read_text()


def record(op: int, args: Tuple[int, ...], dev: int, ret: int = 0) -> bytes:
    padded = (*args, *(0,) * (layout.NPU_HAL_ARGS - len(args)))
    return layout.HAL_CALL.pack(5000, 10, 11, layout.NPU_EV_HAL_CALL, 1, 0, 4000, 1000, *padded, dev, ret, op, 0, 0)


def decoded(rec: bytes) -> Tuple[str, Dict[str, int]]:
    ev = Decoder().decode(rec)
    assert ev is not None
    return ev.event, {k: v for k, v in ev.fields().items() if k not in ("latency_ns", "entry_ts_ns")}


# ---- which ABI -------------------------------------------------------------------------------------------------
def test_the_simulator_executor_has_its_own_abi_and_its_library_the_real_one() -> None:
    assert abi.detect(build.ensure_built()) == abi.SIM
    assert abi.detect(build.ensure_hal_library()) == abi.REAL
    assert abi.detect(build.ensure_built(), "real") == abi.REAL  # --hal-abi forces it


def test_abi_of_symbols_needs_the_marker() -> None:
    assert abi.abi_of_symbols({"halMemAlloc": 1, "npu_sim_hal_abi": 2}) == abi.SIM
    assert abi.abi_of_symbols({"halMemAlloc": 1, "devmm_alloc_done": 2}) == abi.REAL


def test_unreadable_file_and_unknown_abi_are_errors(tmp_path: Path) -> None:
    (tmp_path / "libascend_hal.so").write_bytes(b"not an elf")
    with pytest.raises(InputError, match=r"cannot read ELF symbols of .*libascend_hal\.so: not an ELF file"):
        abi.detect(str(tmp_path / "libascend_hal.so"))
    with pytest.raises(InputError, match="unknown HAL ABI 'v2'"):
        abi.detect(str(tmp_path / "libascend_hal.so"), "v2")
    with pytest.raises(UsageError, match="unknown HAL ABI 'v2'"):
        BpfConfig(hal_abi="v2")


def test_every_entry_program_exists_in_the_bpf_source() -> None:
    assert set(abi.ENTRY_FUNCS[abi.SIM]) == set(BpfConfig().hal_symbols)
    assert set(abi.ENTRY_FUNCS[abi.REAL]) == {*BpfConfig().hal_symbols, *OPTIONAL_HAL_SYMBOLS}
    for funcs in abi.ENTRY_FUNCS.values():
        for name in funcs.values():
            assert re.search(rf"^int {name}\(struct pt_regs \*ctx\)$", PROGRAM, re.M), name


# ---- the real layouts ------------------------------------------------------------------------------------------
def program_offsets() -> Dict[str, int]:
    return {
        m[1]: int(m[2], 0)
        for m in re.finditer(r"^#define ((?:TSI|RRI|SMI|SMO|SQM|HAL_FLAG)_\w+)\s+(\w+?)(?:ULL)?\b", PROGRAM, re.M)
    }


@pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc")
def test_bpf_offsets_are_the_compilers_layout_of_the_real_structs(tmp_path: Path) -> None:
    exe = tmp_path / "offsets"
    src = ROOT / "tests" / "data" / "hal_abi" / "offsets.c"
    subprocess.run(["gcc", "-Wall", "-I", str(ROOT / "npu_trace" / "sim"), "-o", str(exe), str(src)], check=True)
    out = dict(
        line.split()
        for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    )
    compiled = {k: int(v) for k, v in out.items()}
    sizes = {k: compiled.pop(k) for k in list(compiled) if k.startswith("sizeof_")}
    assert sizes == {"sizeof_task_send_info": 64, "sizeof_report_recv_info": 72, "sizeof_sq_mem_get_input": 48,
                     "sizeof_sq_mem_get_output": 48, "sizeof_sq_msg_info": 52}  # fmt: skip
    layouts = {k: compiled.pop(k) for k in list(compiled) if k.startswith("layout_")}
    assert layouts == {"layout_stars_stream": chips.STARS.stream_off, "layout_stars_task": chips.STARS.task_off,
                       "layout_ts_stream": chips.TS.stream_off, "layout_ts_task": chips.TS.task_off}  # fmt: skip
    assert program_offsets() == compiled


# ---- decoding real-ABI records ---------------------------------------------------------------------------------
def test_real_alloc_carries_the_address_read_at_return_and_the_flag_whole() -> None:
    flag = 0x4400 | 5  # MEM_DEV | HBM, device 5 in bits 0-9
    assert decoded(record(layout.NPU_OP_MEM_ALLOC, (1 << 30, flag, 0x12_4000_0000), 5)) == (
        "bpf:halMemAlloc",
        {"dev": 5, "size": 1 << 30, "flag": flag, "va": 0x12_4000_0000, "ret": 0},
    )
    assert decoded(record(layout.NPU_OP_MEM_ALLOC, (4096, 5, 0), 5, ret=6))[1]["va"] == 0  # failed: nothing read


def test_real_free_of_an_address_never_seen_has_no_device() -> None:
    assert decoded(record(layout.NPU_OP_MEM_FREE, (0xDEAD_0000,), layout.NPU_DEV_UNKNOWN)) == (
        "bpf:halMemFree",
        {"dev": 4294967295, "va": 0xDEAD_0000, "ret": 0},
    )


def test_real_task_send_and_report_recv() -> None:
    assert decoded(record(layout.NPU_OP_SQ_TASK_SEND, (1, 100, 2000, 7, 1, 30), 3)) == (
        "bpf:halSqTaskSend",
        {"dev": 3, "ts": 1, "stream": 100, "task": 2000, "sq": 7, "sqe_num": 1, "pos": 30, "ret": 0},
    )
    timeout = (-1) & 0xFFFFFFFFFFFFFFFF  # an int timeout, sign-extended by the program
    assert decoded(record(layout.NPU_OP_CQ_REPORT_RECV, (1, 100, timeout, 2000, 40, 2), 3)) == (
        "bpf:halCqReportRecv",
        {"dev": 3, "ts": 1, "stream": 100, "timeout_ms": -1, "task": 2000, "cq": 40, "report_cqe_num": 2, "ret": 0},
    )
