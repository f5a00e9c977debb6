"""Synthetic `EventFormat`s of the BPF events (built here, no tracefs): one per HAL operation
(`bpf:halMemAlloc` ...: the fields of `HAL_FIELDS`, the same whichever HAL ABI the call came through (the
simulator's leaves 0 what its calls do not carry: see `npu_trace.bpf.abi`), then `ret`, `latency_ns`,
`entry_ts_ns`), `bpf:irq`, `bpf:getpid` (benchmark) and one per tracepoint read by offsets
(`bpf:trs_chan_sqe` ...: the values its `TpSpec` names, then its string). Their ids sit far above tracefs
event ids.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

from npu_trace.bpf import layout
from npu_trace.bpf.tracepoints import TRS_SPECS, TpSpec
from npu_trace.ftrace.format import CHAR_ARRAY, INT, EventFormat, Field

SYSTEM = "bpf"
ID_BASE = 1 << 24
# NPU_OP_* -> HAL function name
OPS: Tuple[str, ...] = ("halMemAlloc", "halMemFree", "halSqTaskSend", "halCqReportRecv", "halSqMemGet", "halSqMsgSend")
# Per op: the device, then hal_call_event.args[0..] in this order (bpf/hal_uprobes.bpf.c fills them).
HAL_FIELDS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "halMemAlloc": (("dev", "u32"), ("size", "u64"), ("flag", "u64"), ("va", "x64")),
    "halMemFree": (("dev", "u32"), ("va", "x64")),
    "halSqTaskSend": (
        ("dev", "u32"), ("ts", "u32"), ("stream", "u32"), ("task", "u32"), ("sq", "u32"), ("sqe_num", "u32"),
        ("pos", "u32"),
    ),
    "halCqReportRecv": (
        ("dev", "u32"), ("ts", "u32"), ("stream", "u32"), ("timeout_ms", "s32"), ("task", "u32"), ("cq", "u32"),
        ("report_cqe_num", "u32"),
    ),
    # the real HAL's other way to send tasks (the 910's and 310P's runtime): a slot of the SQ, then its commands
    "halSqMemGet": (
        ("dev", "u32"), ("ts", "u32"), ("sq", "u32"), ("cmd_count", "u32"), ("granted", "u32"), ("slot", "x64"),
        ("pos", "u32"),
    ),
    "halSqMsgSend": (
        ("dev", "u32"), ("ts", "u32"), ("stream", "u32"), ("task", "u32"), ("sq", "u32"), ("cmd_count", "u32"),
        ("report_count", "u32"),
    ),
}  # fmt: skip
# the fields of a call that the chip's task layout gives (npu_trace.device.chips): None when it is unknown
TASK_ID_FIELDS: Tuple[str, ...] = ("stream", "task")
TASK_ID_OPS: Tuple[str, ...] = ("halSqTaskSend", "halSqMsgSend")
_SIZES = {"u32": 4, "s32": 4, "x32": 4, "u64": 8, "s64": 8, "x64": 8}
_CONV = {"u32": "%u", "s32": "%d", "x32": "0x%x", "u64": "%llu", "s64": "%lld", "x64": "0x%llx"}
_COMMON = (Field("common_type", "unsigned short", 0, 2, False, INT),)

Spec = Sequence[Tuple[str, str]]  # (field name, abi type)


def build_format(ev_id: int, name: str, spec: Spec) -> EventFormat:
    fields, off = [], 8
    for fname, ftype in spec:
        if ftype.startswith("char"):  # "char" (an IRQ name) or "char<N>"
            size = int(ftype[4:] or layout.NPU_IRQ_NAME_LEN)
            fields.append(Field(fname, "char", off, size, False, CHAR_ARRAY, size))
        else:
            size = _SIZES[ftype]
            fields.append(Field(fname, ftype.replace("x", "u"), off, size, ftype.startswith("s"), INT))
        off += size
    text = " ".join(f"{n}={_CONV.get(t, '%s')}" for n, t in spec)
    print_fmt = f'"{text}", ' + ", ".join(f"REC->{n}" for n, _ in spec)
    return EventFormat(ev_id, SYSTEM, name, _COMMON, tuple(fields), print_fmt)


def hal_spec(op: str) -> Spec:
    return (*HAL_FIELDS[op], ("ret", "s32"), ("latency_ns", "u64"), ("entry_ts_ns", "u64"))


def tp_format(spec: TpSpec) -> EventFormat:
    """The decoded event of a tracepoint read by offsets: its values in role order, then its string."""
    values = [(v.name, v.type) for v in spec.ordered()]
    text = [(spec.text, f"char{layout.NPU_TP_TEXT_LEN}")] if spec.text else []
    return build_format(ID_BASE + 200 + spec.tp_id, spec.event, (*values, *text))


IRQ_SPEC: Spec = (("irq", "s32"), ("name", "char"), ("ret", "s32"), ("duration_ns", "u64"), ("entry_ts_ns", "u64"))
BENCH_SPEC: Spec = (("seq", "u64"),)

HAL_FORMATS: Tuple[EventFormat, ...] = tuple(build_format(ID_BASE + i, op, hal_spec(op)) for i, op in enumerate(OPS))
IRQ_FORMAT = build_format(ID_BASE + 100, "irq", IRQ_SPEC)
BENCH_FORMAT = build_format(ID_BASE + 101, "getpid", BENCH_SPEC)
TRS_FORMATS: Tuple[EventFormat, ...] = tuple(tp_format(spec) for spec in TRS_SPECS.values())
ALL: Dict[str, EventFormat] = {f.full_name: f for f in (*HAL_FORMATS, IRQ_FORMAT, BENCH_FORMAT, *TRS_FORMATS)}
