"""Offline: the real HAL's calls, as the BPF programs report them, become the `ascend` profile's events
(npu_trace.device.bpf_rules.REAL_HAL_MAPPING over BPF_MAPPING: data only) and every detector works on them:
memory (allocations at their addresses, frees, failures), task latency (submits with their stream and task),
call latency (the allocation's own). Records are built as bpf/hal_uprobes.bpf.c writes them. Also the
simulator's side of `sim run --hal-abi real`: each halMemAlloc hands back its group's address."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from npu_trace.bpf import layout
from npu_trace.bpf.records import Decoder
from npu_trace.detectors import Analysis
from npu_trace.device.profiles import PROFILES
from npu_trace.events import NpuEvent
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sim import runner
from npu_trace.sim.scenarios import plan

MS = 1_000_000


def record(op: int, args: Tuple[int, ...], dev: int, ret: int = 0, ts: int = 5 * MS, lat: int = 20_000,
           flags: int = 0) -> bytes:  # fmt: skip
    padded = (*args, *(0,) * (layout.NPU_HAL_ARGS - len(args)))
    return layout.HAL_CALL.pack(ts, 10, 11, layout.NPU_EV_HAL_CALL, 1, flags, ts - lat, lat, *padded, dev, ret, op,
                                0, 0)  # fmt: skip


def normalized(records: List[bytes], profile: str = "ascend") -> List[NpuEvent]:
    decoder = Decoder()
    events = [decoder.decode(r) for r in records]
    return BlockNormalizer(Normalizer(PROFILES[profile].mapping)).events([e for e in events if e is not None])


def test_real_hal_calls_are_allocations_frees_failures_and_submits() -> None:
    va = 0x12_4000_0000
    got = normalized([
        record(layout.NPU_OP_MEM_ALLOC, (1 << 20, 0x400 | 3, va), 3),
        record(layout.NPU_OP_MEM_ALLOC, (1 << 40, 0x400 | 3, 0), 3, ret=6),
        record(layout.NPU_OP_MEM_FREE, (va,), 3),
        record(layout.NPU_OP_SQ_TASK_SEND, (0, 7, 42, 1, 1, 30), 3),
        record(layout.NPU_OP_SQ_MEM_GET, (0, 1, 1, 1, 0x5000, 30), 3),
        record(layout.NPU_OP_SQ_MSG_SEND, (0, 8, 43, 1, 1, 1), 3),
        record(layout.NPU_OP_SQ_MSG_SEND, (0, 8, 44, 1, 1, 1), 3, ret=7),
    ])  # fmt: skip
    assert [(e.kind, e.op, e.dev) for e in got] == [
        ("alloc", "halMemAlloc", 3), ("alloc_fail", "halMemAlloc", 3), ("free", "halMemFree", 3),
        ("submit", "halSqTaskSend", 3), ("call", "halSqMemGet", 3), ("submit", "halSqMsgSend", 3),
        ("call", "halSqMsgSend", 3),
    ]  # fmt: skip
    assert {k: got[0].args[k] for k in ("size", "va", "flag", "ret")} == {"size": 1 << 20, "va": va, "flag": 0x403,
                                                                          "ret": 0}  # fmt: skip
    assert (got[3].args["stream"], got[3].args["task"]) == (7, 42)
    # the simulator's profile keeps its allocation on the driver side (devmm_alloc_done): the HAL call is a call
    assert [e.kind for e in normalized([record(layout.NPU_OP_MEM_ALLOC, (4096, 3, va), 3)], "sim")] == ["call"]


def test_an_unknown_chips_task_calls_carry_no_ids() -> None:
    (ev,) = normalized([record(layout.NPU_OP_SQ_TASK_SEND, (0, 0, 0, 1, 1, 30), 3,
                               flags=layout.NPU_HAL_NO_TASK_IDS)])  # fmt: skip
    assert ev.kind == "submit" and (ev.args["stream"], ev.args["task"], ev.args["sq"]) == (None, None, 1)


def analysis_of(records: List[bytes]) -> Dict[str, Any]:
    a = Analysis(PROFILES["ascend"])
    a.feed_events(normalized(records))
    return a.finish()


def test_memory_leaks_and_a_slow_allocation_from_the_real_hal_alone() -> None:
    base = 0x12_4000_0000
    recs = [record(layout.NPU_OP_MEM_ALLOC, (1 << 20, 0x400 | 1, base + i * (1 << 20)), 1, ts=(i + 1) * MS)
            for i in range(4)]  # fmt: skip
    recs.append(record(layout.NPU_OP_MEM_FREE, (base,), 1, ts=10 * MS))
    recs.append(record(layout.NPU_OP_MEM_ALLOC, (1 << 30, 0x401, 0), 1, ret=6, ts=11 * MS))
    recs.append(record(layout.NPU_OP_MEM_ALLOC, (4096, 0x401, base + (8 << 20)), 1, ts=40 * MS, lat=30 * MS))
    report = analysis_of(recs)
    memory = report["summary"]["memory"]
    assert (memory["allocs"], memory["frees"], memory["failures"], memory["unknown_frees"]) == (5, 1, 1, 0)
    kinds = [(f["kind"], f["device"]) for f in report["findings"]]
    assert ("alloc_fail", 1) in kinds and ("spike", 1) in kinds  # the 30 ms allocation is a latency sample
    (leak,) = [f for f in report["findings"] if f["kind"] == "leak"]
    assert (leak["details"]["count"], leak["details"]["bytes"]) == (4, 3 * (1 << 20) + 4096)


def test_real_abi_allocations_hand_back_the_address_their_group_got() -> None:
    actions = plan("fragmentation", 1, 0.5, 200, 1)
    outs = runner.alloc_addresses(actions)
    for i, a in enumerate(actions):
        if a.func != "halMemAlloc":
            continue
        (done,) = [d for d in actions if d.func == "devmm_alloc_done" and d.group == a.group]
        assert outs[i] == done.args[2]  # 0 for a failed one
        fields = runner.plan_line(a, None, outs[i]).split()
        assert fields[4] == "halMemAlloc" and int(fields[10]) == outs[i]  # a3: what *pp receives
    assert any(v == 0 for v in outs.values()) and any(v for v in outs.values())
    recv = next(a for a in actions if a.func == "halCqReportRecv" and a.ret == 1)
    assert (runner.returned(recv, real=True), runner.returned(recv, real=False)) == (0, 1)
