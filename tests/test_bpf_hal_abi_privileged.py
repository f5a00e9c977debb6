"""Privileged: the real-ABI HAL programs (bpf/hal_uprobes.bpf.c, real_*) on the simulator's real-ABI
libascend_hal.so, called by the executor (`npu-sim -H LIB`) from a plan: every call's device, size, address,
stream, task and the outputs read at return equal what the plan made the library see and write. Through
BpfSource and through `npu-trace bpf --hal LIB` (as a user runs it), with the 910B's task layout (STARS SQEs
through halSqTaskSend); the 910's and 310P's (TS commands through halSqMemGet and halSqMsgSend, `-T ts`) and an
unknown chip's (stream and task left empty) from one run seen by both."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from npu_trace.bpf import layout
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource
from npu_trace.events import Loss, TraceEvent
from proc_support import read_until

ROOT = Path(__file__).resolve().parents[1]
ENOMEM = 6
Expected = Tuple[str, Dict[str, int]]  # (event, fields the BPF program must report)


@pytest.fixture
def sim_hal() -> Iterator[Tuple[str, str]]:
    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")
    from npu_trace.sim import build

    yield build.ensure_built(), build.ensure_hal_library()


def plan() -> Tuple[List[str], List[Expected]]:
    """Plan lines for `npu-sim -H` (one thread, 0.2 ms each) and what each call must be reported as."""
    lines: List[str] = []
    want: List[Expected] = []

    def add(func: str, ret: int, args: Tuple[int, ...], event: Dict[str, int]) -> None:
        a = (*args, *(0,) * (6 - len(args)))
        lines.append(f"0 0 -1 0 {func} {ret} 200000 {' '.join(map(str, a))} -")
        want.append((f"bpf:{func}", event))

    for i in range(8):
        dev, size, va = i % 4, 4096 << i, 0x12_4000_0000 + i * 0x10_0000
        flag = 0x400 | (0x4000 if i % 2 else 0)  # MEM_DEV, HBM on odd ones: bits above the device's
        add("halMemAlloc", 0, (dev, size, flag, va), {"dev": dev, "size": size, "flag": flag | dev, "va": va, "ret": 0})
        add("halSqTaskSend", 0, (dev, 1, 100 + i, 2000 + i, 7 + i, 30 + i),
            {"dev": dev, "ts": 1, "stream": 100 + i, "task": 2000 + i, "sq": 7 + i, "sqe_num": 1, "pos": 30 + i,
             "ret": 0})  # fmt: skip
        add("halCqReportRecv", 1 + i % 3, (dev, 1, 100 + i, 500, 2000 + i, 40 + i),
            {"dev": dev, "ts": 1, "stream": 100 + i, "timeout_ms": 500, "task": 2000 + i, "cq": 40 + i,
             "report_cqe_num": 1 + i % 3, "ret": 0})  # fmt: skip
    add("halMemAlloc", ENOMEM, (2, 1 << 40, 0x400, 0x99), {"dev": 2, "size": 1 << 40, "va": 0, "ret": ENOMEM})
    add("halCqReportRecv", -110, (1, 0, 5, 10, 6, 3), {"dev": 1, "timeout_ms": 10, "report_cqe_num": 0, "ret": -110})
    for i in range(8):  # freed in another order than allocated: the device comes from each address's allocation
        j = (i * 3) % 8
        add(
            "halMemFree",
            0,
            (j % 4, 0x12_4000_0000 + j * 0x10_0000),
            {"dev": j % 4, "va": 0x12_4000_0000 + j * 0x10_0000},
        )
    add("halMemFree", 0, (3, 0xDEAD_0000), {"dev": layout.NPU_DEV_UNKNOWN, "va": 0xDEAD_0000, "ret": 0})
    return lines, want


def run_executor(binary: str, lib: str, tmp: Path, layout: str = "stars") -> int:
    """Runs the plan through the library, tasks sent as the chips of `layout` send them (`-T`); returns the
    executor's thread id (its one thread)."""
    lines, _ = plan()
    (tmp / "plan").write_text("\n".join(lines) + "\n")
    argv = [binary, "-H", lib, "-T", layout, str(tmp / "plan"), str(tmp / "out")]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = (tmp / "out").read_text().splitlines()[1:]
    assert len(rows) == len(lines)
    (tid,) = {int(r.split()[3]) for r in rows}
    return tid


def check(got: List[Tuple[str, Dict[str, Any]]]) -> None:
    _, want = plan()
    assert [event for event, _ in got] == [event for event, _ in want]
    for (event, fields), (_, expected) in zip(got, want):
        assert {k: fields[k] for k in expected} == expected, event
        assert fields["latency_ns"] >= 200_000


@pytest.mark.privileged
def test_real_abi_calls_read_as_the_library_saw_them(sim_hal: Tuple[str, str], tmp_path: Path) -> None:
    binary, lib = sim_hal
    with BpfSource(BpfConfig(binary=lib, task_layout="stars")) as src:
        assert src.hal_abis == {lib: "real"}
        tid = run_executor(binary, lib, tmp_path)
        items: List[Any] = []
        src.read(items)
    assert [i for i in items if isinstance(i, Loss)] == []
    mine = [e for e in items if isinstance(e, TraceEvent) and e.pid == tid]
    check([(e.event, e.fields()) for e in sorted(mine, key=lambda e: e.ts_ns)])


@pytest.mark.privileged
def test_npu_trace_bpf_on_the_real_abi_library(sim_hal: Tuple[str, str], tmp_path: Path) -> None:
    binary, lib = sim_hal
    cmd = [sys.executable, "-m", "npu_trace", "bpf", "--hal", lib, "--chip", "910B", "--format", "ndjson"]
    tracer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        read_until(tracer, "BPF programs attached")  # attached before the executor's first call
        tid = run_executor(binary, lib, tmp_path)
        time.sleep(0.05)  # a few of its 10 ms polls
        tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=60)
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()
    assert tracer.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    mine = [r for r in rows if r.get("pid") == tid]
    check([(r["event"], r["fields"]) for r in mine])


def ts_expected() -> List[Expected]:
    """plan()'s calls as the TS layout's runtime makes them: each halSqTaskSend a halSqMemGet (its slot at the
    plan's pos) and a halSqMsgSend of the TS command written there."""
    out: List[Expected] = []
    for event, fields in plan()[1]:
        if event != "bpf:halSqTaskSend":
            out.append((event, fields))
            continue
        dev, ts, sq = fields["dev"], fields["ts"], fields["sq"]
        out.append(("bpf:halSqMemGet", {"dev": dev, "ts": ts, "sq": sq, "cmd_count": 1, "granted": 1,
                                        "pos": fields["pos"], "ret": 0}))  # fmt: skip
        out.append(("bpf:halSqMsgSend", {"dev": dev, "ts": ts, "stream": fields["stream"], "task": fields["task"],
                                         "sq": sq, "cmd_count": 1, "report_count": 1, "ret": 0}))  # fmt: skip
    return out


@pytest.mark.privileged
def test_ts_layout_and_unknown_chip_from_one_run(sim_hal: Tuple[str, str], tmp_path: Path) -> None:
    binary, lib = sim_hal
    with BpfSource(BpfConfig(binary=lib, task_layout="ts")) as ts, BpfSource(BpfConfig(binary=lib)) as unknown:
        assert ts.hal_symbols[lib][-2:] == ("halSqMemGet", "halSqMsgSend")
        tid = run_executor(binary, lib, tmp_path, "ts")
        got: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
        for name, src in (("ts", ts), ("unknown", unknown)):
            items: List[Any] = []
            src.read(items)
            assert [i for i in items if isinstance(i, Loss)] == []
            mine = sorted((e for e in items if isinstance(e, TraceEvent) and e.pid == tid), key=lambda e: e.ts_ns)
            got[name] = [(e.event, e.fields()) for e in mine]
    want = ts_expected()
    assert [event for event, _ in got["ts"]] == [event for event, _ in want]
    for (event, fields), (_, expected) in zip(got["ts"], want):
        assert {k: fields[k] for k in expected} == expected, event
    blanked = [(e, {**f, "stream": None, "task": None} if e == "bpf:halSqMsgSend" else f) for e, f in got["ts"]]
    without_times = [[(e, {k: v for k, v in f.items() if k not in ("entry_ts_ns", "latency_ns")}) for e, f in run]
                     for run in (blanked, got["unknown"])]  # fmt: skip
    assert without_times[0] == without_times[1]  # the unknown chip: the same calls, no stream nor task
