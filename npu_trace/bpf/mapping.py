"""Mapping rules (see `npu_trace.model`) of the BPF events, merged into the sim profile's mapping.

The kernel already paired entry and return, so each event is a complete call carrying `ret`, `latency_ns`
and `entry_ts_ns` (what the Normalizer's pairing adds for tracefs events); no `pair` key here.
"""

from __future__ import annotations

from typing import Any, Dict

from npu_trace.sim.abi import ETIMEDOUT

BPF_MAPPING: Dict[str, Any] = {
    "bpf:halMemAlloc": {"kind": "call", "op": "halMemAlloc"},
    "bpf:halMemFree": {"kind": "free", "op": "halMemFree", "kind_if": [["ret", "!=", 0, "call"]]},
    "bpf:halSqTaskSend": {"kind": "submit", "op": "halSqTaskSend", "kind_if": [["ret", "!=", 0, "call"]]},
    "bpf:halCqReportRecv": {
        "kind": "call", "op": "halCqReportRecv", "kind_if": [["ret", "==", ETIMEDOUT, "timeout"]],
    },
    "bpf:irq": {"kind": "irq", "op": "irq", "dev": "", "set": {"edge": "handled"}},
}  # fmt: skip
