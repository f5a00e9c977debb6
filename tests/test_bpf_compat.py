"""Privileged (bcc compiles, creates the programs' maps and attaches): the BPF programs as the field's kernels load
them (npu_trace.bpf.kernel; CentOS 7.6's 4.14 on aarch64, Kylin V10's and EulerOS 2.x's 4.19).

* Every program in the variant a 4.x kernel loads (bpf_probe_read, a perf event array) stays under the 4096
  instructions a 4.x verifier takes, compiled for this host and for arm64.
* arm64: bcc compiles against Debian's arm64 kernel headers (the arch/arm64 sources of the installed
  linux-headers-<ver>-common, the generated headers and config of linux-headers-<ver>-arm64, which scripts/setup
  unpacks under /var/cache/npu-trace/arm64-headers) with ARCH=arm64, which makes bcc define __TARGET_ARCH_arm64
  and take arch/arm64's include directories: the uprobe programs read their arguments from arm64's pt_regs
  (regs[0..3] at offsets 0, 8, 16, 24) where this host's x86-64 build reads di, si, dx, cx (112, 104, 96, 88).
* Forced onto this kernel (what `npu-trace bpf --compat 4.14` / `--compat 4.19` load), the old variants report
  every scenario's HAL calls as the default does: the three attached at once to the simulator's real-ABI
  library (its structs read from user memory, the reads the variants differ in), each scenario run in turn.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from npu_trace import sim
from npu_trace.bpf import abi, kernel
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource, tracepoint_cflags, with_variant
from npu_trace.bpf.tracepoints import TRS_SPECS, plan
from npu_trace.device.profiles import ASCEND_LAYOUTS, PROFILES
from npu_trace.events import Loss, TraceEvent
from test_bpf_tracepoints import DRIVER_TPS, data_format

HERE = Path(__file__).resolve().parent
ARM64_HEADERS = "/var/cache/npu-trace/arm64-headers"
OLD_VERIFIER_INSNS = 4096  # BPF_MAXINSNS: what a kernel before 5.2 verifies at most
X86_ARGS = [112, 104, 96, 88]  # struct pt_regs: di, si, dx, cx
ARM64_ARGS = [0, 8, 16, 24]  # struct user_pt_regs: regs[0..3]
HAL_FUNCTIONS = sorted({*abi.ENTRY_FUNCS[abi.SIM].values(), *abi.ENTRY_FUNCS[abi.REAL].values(), "hal_return"})


@pytest.fixture(scope="module")
def bcc_here() -> None:
    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")


def legacy(config: BpfConfig) -> BpfConfig:
    return with_variant(config, kernel.forced("4.14"))


def jobs() -> List[Dict[str, Any]]:
    """Every program the ascend profile loads, in the 4.x variant, with the functions each must have."""
    hal = legacy(BpfConfig(task_layout="stars")).hal_cflags()
    irq = legacy(BpfConfig(irq=True, irq_names=PROFILES["ascend"].bpf_irq_prefixes)).irq_cflags()
    plans = plan(DRIVER_TPS, TRS_SPECS, data_format, ASCEND_LAYOUTS)
    tps = tracepoint_cflags(legacy(BpfConfig(hal=False)), plans)
    return [
        {"program": "hal_uprobes", "cflags": hal, "functions": HAL_FUNCTIONS},
        {"program": "irq", "cflags": irq,
         "functions": ["tracepoint__irq__irq_handler_entry", "tracepoint__irq__irq_handler_exit"]},
        {"program": "trs_tracepoints", "cflags": tps, "functions": [p.function for p in plans]},
    ]  # fmt: skip


def compiled(env: Optional[Dict[str, str]] = None) -> List[Dict[str, Tuple[int, List[int]]]]:
    proc = subprocess.run([sys.executable, str(HERE / "bpf_sizes.py")], input=json.dumps(jobs()), text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def arm64_tree(tmp: Path) -> Path:
    """The arm64 build tree bcc reads: the common headers' arch/arm64 and include/, the arm64 package's generated
    headers and config, as Debian's linux-headers-<ver>-arm64 lays them out over -common."""
    packages = sorted(glob.glob(f"{ARM64_HEADERS}/usr/src/linux-headers-*-arm64"))
    common = packages[-1].removesuffix("-arm64") + "-common" if packages else ""
    common = common.replace(ARM64_HEADERS, "")
    if not packages or not os.path.isdir(common):
        pytest.skip(f"no arm64 kernel headers under {ARM64_HEADERS} with their -common (scripts/setup fetches them)")
    tree = tmp / "arm64"
    (tree / "include").mkdir(parents=True)
    (tree / "arch/arm64/include").mkdir(parents=True)
    for part in (*glob.glob(f"{common}/include/*"), *glob.glob(f"{packages[-1]}/include/*")):
        os.symlink(part, tree / "include" / os.path.basename(part))
    for part in ("asm", "uapi"):
        os.symlink(f"{common}/arch/arm64/include/{part}", tree / "arch/arm64/include" / part)
    os.symlink(f"{packages[-1]}/arch/arm64/include/generated", tree / "arch/arm64/include/generated")
    return tree


def check_sizes(out: List[Dict[str, Tuple[int, List[int]]]]) -> None:
    for job, functions in zip(jobs(), out):
        assert set(functions) == set(job["functions"]), job["program"]
        big = {f: n for f, (n, _) in functions.items() if n >= OLD_VERIFIER_INSNS}
        assert big == {}, f"{job['program']}: over a 4.x verifier's {OLD_VERIFIER_INSNS} instructions"


@pytest.mark.privileged
def test_the_4x_variant_compiles_small_enough_here_and_for_arm64(bcc_here: None, tmp_path: Path) -> None:
    here = compiled()
    arm64 = compiled({"ARCH": "arm64", "BCC_KERNEL_SOURCE": str(arm64_tree(tmp_path))})
    check_sizes(here)
    check_sizes(arm64)
    hal_here, hal_arm64 = here[0], arm64[0]
    if platform.machine() == "x86_64":  # dev, ts, stream, task: the first four argument registers
        assert sorted(hal_here["hal_sq_task_send_entry"][1]) == sorted(X86_ARGS)
    assert sorted(hal_arm64["hal_sq_task_send_entry"][1]) == ARM64_ARGS
    assert sorted(hal_arm64["real_mem_alloc_entry"][1]) == ARM64_ARGS[:3]  # pp, size, flag
    assert sorted(hal_arm64["real_sq_msg_send_entry"][1]) == ARM64_ARGS[:2]  # devId, info


# ---- forced onto this kernel: the same reports as the default -------------------------------------------------
VARIANTS = (None, "4.14", "4.19")


def calls_of(src: BpfSource, pids: List[int], tids: set) -> List[Tuple[str, Dict[str, Any]]]:
    """The HAL calls the source reported of these threads, in each thread's order, without their times."""
    items: List[Any] = []
    src.read(items)
    assert [i for i in items if isinstance(i, Loss)] == []
    mine = sorted((e for e in items if isinstance(e, TraceEvent) and e.pid in tids), key=lambda e: (e.pid, e.ts_ns))
    drop = ("entry_ts_ns", "latency_ns")
    return [(e.event, {k: v for k, v in e.fields().items() if k not in drop}) for e in mine]


@pytest.mark.privileged
def test_forced_old_variants_report_every_scenario_as_the_default(bcc_here: None) -> None:
    from npu_trace.sim import build

    lib = build.ensure_hal_library()
    with contextlib.ExitStack() as stack:
        sources = {v: stack.enter_context(BpfSource(BpfConfig(binary=lib, task_layout="stars", compat=v)))
                   for v in VARIANTS}  # fmt: skip
        assert [sources[v].readers["hal_uprobes"] for v in VARIANTS] == ["mmap", "perf buffer", "perf buffer"]
        assert [sources[v].variant.name for v in VARIANTS[1:]] == ["legacy (4.x)"] * 2  # type: ignore[union-attr]
        for name in sim.SCENARIOS:
            truth = sim.run_scenario(name, 11, 0.3, 300, 2, ensure_loaded=False, hal_lib=lib)
            tids = {a["tid"] for a in truth["actions"]}
            got = {v: calls_of(sources[v], truth["processes"], tids) for v in VARIANTS}
            hal = [a for a in truth["actions"] if a["func"].startswith("hal")]
            assert len(got[None]) == len(hal), name
            assert got["4.14"] == got[None] and got["4.19"] == got[None], name
