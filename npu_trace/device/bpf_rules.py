"""Mapping rules (see `npu_trace.pipeline.normalize`) of the BPF events, merged into the sim profile's mapping.

The kernel already paired entry and return, so each event is a complete call carrying `ret`, `latency_ns`
and `entry_ts_ns` (what the Normalizer's pairing adds for tracefs events); no `pair` key here.

The driver's tracepoints read by offsets (`bpf:trs_chan_sqe`, `bpf:trs_core_logic_cqe`) map as the profile's
ftrace rules map `trs_chan:sqe` and `trs_core:logic_cqe`: the same kind, op, device and args, so the latency
detector pairs a submit with its complete by (device, stream, task) whichever channel told them. The other
three (trs_chan:cqe/recv, trs_core:logic_cq_recv) stay unmapped, as their ftrace events do.

`REAL_HAL_MAPPING` is the `ascend` profile's on top: the real libascend_hal.so's halMemAlloc is the allocation
itself (one event: its size, flag, the address read at return, and `ret`: a failure is DRV_ERROR_OUT_OF_MEMORY
or another non-zero code), where the simulator tells the allocation apart (its driver side, devmm_alloc_done,
carries the address and the free memory). The device is the one in the flag's bits 0-9, or for a free the one
of the traced allocation of that address (docs/hal-abi.md).
"""

from __future__ import annotations

from typing import Any, Dict

from npu_trace.device.hal import ETIMEDOUT

BPF_MAPPING: Dict[str, Any] = {
    "bpf:halMemAlloc": {"kind": "call", "op": "halMemAlloc"},
    "bpf:halMemFree": {"kind": "free", "op": "halMemFree", "kind_if": [["ret", "!=", 0, "call"]]},
    "bpf:halSqTaskSend": {"kind": "submit", "op": "halSqTaskSend", "kind_if": [["ret", "!=", 0, "call"]]},
    "bpf:halCqReportRecv": {
        "kind": "call", "op": "halCqReportRecv", "kind_if": [["ret", "==", ETIMEDOUT, "timeout"]],
    },
    # the real HAL's task path of the 910 and the 310P: a slot of the SQ, then the commands written into it sent
    "bpf:halSqMemGet": {"kind": "call", "op": "halSqMemGet"},
    "bpf:halSqMsgSend": {"kind": "submit", "op": "halSqMsgSend", "kind_if": [["ret", "!=", 0, "call"]]},
    "bpf:irq": {"kind": "irq", "op": "irq", "dev": "", "set": {"edge": "handled"}},
    "bpf:trs_chan_sqe": [{
        "match": {"str": "Task Send"}, "kind": "submit", "op": "sqe", "dev": "dev",
        "args": {"ts": "ts", "stream": "stream", "task": "task", "sqid": "sqid"},
    }],
    "bpf:trs_core_logic_cqe": [{
        "match": {"str": "Logic Cq Enque"}, "kind": "complete", "op": "task", "dev": "dev",
        "args": {"ts": "ts", "stream": "stream", "task": "task", "errcode": "errcode", "errtype": "errtype"},
    }],
}  # fmt: skip

REAL_HAL_MAPPING: Dict[str, Any] = {
    "bpf:halMemAlloc": {"kind": "alloc", "op": "halMemAlloc", "kind_if": [["ret", "!=", 0, "alloc_fail"]]},
}
