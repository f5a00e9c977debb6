"""The Python mirror of `bpf/npu_trace.h`: constants and every struct as a `struct.Struct` (little-endian, no
implicit padding: the header's padding is explicit). `tests/test_bpf_layout.py` parses the header and checks
names, sizes and offsets against `FIELDS`; change both together.
"""

from __future__ import annotations

import struct
from typing import Dict, Tuple

NPU_EV_HAL_CALL = 1
NPU_EV_IRQ = 2
NPU_EV_BENCH = 3
NPU_EV_TRACEPOINT = 4

NPU_OP_MEM_ALLOC = 0
NPU_OP_MEM_FREE = 1
NPU_OP_SQ_TASK_SEND = 2
NPU_OP_CQ_REPORT_RECV = 3
NPU_OP_SQ_MEM_GET = 4
NPU_OP_SQ_MSG_SEND = 5
NPU_OP_COUNT = 6
NPU_HAL_ARGS = 6
NPU_DEV_UNKNOWN = 4294967295
NPU_HAL_NO_TASK_IDS = 1

NPU_IRQ_NAME_LEN = 32
NPU_HIST_SLOTS = 64

NPU_TP_SLOTS = 5
NPU_TP_VALUES = 8
NPU_TP_TEXT_LEN = 24
NPU_TPV_DEV = 0
NPU_TPV_TS = 1
NPU_TPV_STREAM = 2
NPU_TPV_TASK = 3
NPU_TPV_SQ = 4
NPU_TPV_CQ = 5
NPU_TPV_ERR = 6
NPU_TPV_AUX = 7
NPU_TP_TRS_CHAN_SQE = 1
NPU_TP_TRS_CHAN_CQE = 2
NPU_TP_TRS_CHAN_RECV = 3
NPU_TP_TRS_CORE_LOGIC_CQE = 4
NPU_TP_TRS_CORE_LOGIC_CQ_RECV = 5

NPU_LOST_RESERVE = 0
NPU_LOST_PENDING = 1
NPU_LOST_SLOTS = 2

# every #define of the header, for the sync test
CONSTANTS: Dict[str, int] = {k: v for k, v in globals().items() if k.startswith("NPU_") and isinstance(v, int)}

Fields = Tuple[Tuple[str, str], ...]  # (C field name, struct code); nested structs flattened as "outer.inner"

_HEADER: Fields = (("ts_ns", "Q"), ("pid", "I"), ("tid", "I"), ("type", "H"), ("cpu", "H"), ("flags", "I"))


def _nested(prefix: str, fields: Fields) -> Fields:
    return tuple((f"{prefix}.{name}", code) for name, code in fields)


FIELDS: Dict[str, Fields] = {
    "npu_event_header": _HEADER,
    "hal_call_event": (
        *_nested("hdr", _HEADER), ("entry_ts_ns", "Q"), ("latency_ns", "Q"), ("args", f"{NPU_HAL_ARGS}Q"), ("dev", "I"),
        ("ret", "i"), ("op", "H"), ("pad0", "H"), ("pad1", "I"),
    ),
    "irq_event": (
        *_nested("hdr", _HEADER), ("entry_ts_ns", "Q"), ("duration_ns", "Q"), ("irq", "i"), ("ret", "i"),
        ("name", f"{NPU_IRQ_NAME_LEN}s"),
    ),
    "bench_event": (*_nested("hdr", _HEADER), ("seq", "Q")),
    "tp_event": (
        *_nested("hdr", _HEADER), ("values", f"{NPU_TP_VALUES}Q"), ("tp", "H"), ("slot", "H"), ("present", "B"),
        ("is_signed", "B"), ("pad0", "H"), ("text", f"{NPU_TP_TEXT_LEN}s"),
    ),
    "hal_entry": (
        ("ts_ns", "Q"), ("args", f"{NPU_HAL_ARGS}Q"), ("out_ptr", "Q"), ("dev", "I"), ("op", "H"), ("flags", "H"),
    ),
    "hist_key": (("dev", "I"), ("op", "H"), ("slot", "H")),
}  # fmt: skip


def compile_struct(name: str) -> struct.Struct:
    return struct.Struct("<" + "".join(code for _, code in FIELDS[name]))


HEADER = compile_struct("npu_event_header")
HAL_CALL = compile_struct("hal_call_event")
IRQ = compile_struct("irq_event")
BENCH = compile_struct("bench_event")
TP_EVENT = compile_struct("tp_event")
HIST_KEY = compile_struct("hist_key")
TYPE_OFFSET = 16  # npu_event_header.type
TYPE = struct.Struct("<H")


def offsets(name: str) -> Tuple[Tuple[str, int, int], ...]:
    """(field, offset, size) of each field of struct `name`, as the mirror lays it out."""
    out, off = [], 0
    for field, code in FIELDS[name]:
        size = struct.calcsize("<" + code)
        out.append((field, off, size))
        off += size
    return tuple(out)
