"""Tracepoints read by field offsets (`bpf/trs_tracepoints.bpf.c`): what each program slot reads, resolved
against the tracepoint's tracefs format file at run time and handed to the program as `-D` constants. Pure: no
bcc and no tracefs here (format texts come in as text, through `read_format`).

The Ascend driver's tracepoints (trs_chan:*, trs_core:*) are made of struct-typed fields
(`field:struct trs_id_inst inst; offset:12; size:8;`): the format file gives a struct field's offset and size,
the profile's struct layouts (`npu_trace.device.profiles.ASCEND_LAYOUTS`) give its members, packed in declaration
order as the ftrace decoder reads them. A `TpSpec` names, for each event value it fills (`ROLES`, the
NPU_TPV_* of npu_trace.h: dev, ts, stream, task, sq, cq, err, aux), the field path it comes from:

    inst.devid     member `devid` of the struct-typed field `inst` (offset: the layout's members before it)
    args[2]        element 2 of an integer array field
    id             an integer field

`plan(names, specs, read_format, layouts)` resolves every path of every named tracepoint to (offset, size,
signed) and refuses, in one line naming the tracepoint and the field, a tracepoint that does not exist
(KernelFeatureError, exit 3), a field that is missing, or one that is not what the program reads: an integer
of 1, 2, 4 or 8 bytes, a `__data_loc char[]` string, or a struct member when the struct's size in the format
is the size of the profile's layout of it (a different size means the running driver's struct is not the one
the profile describes: reading it by offset would read the wrong bytes).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from npu_trace.bpf import layout
from npu_trace.errors import FormatError, KernelFeatureError, UsageError
from npu_trace.ftrace.format import ARRAY, BYTES, DATA_LOC, INT, EventFormat, Field, parse_format

# the event's values in NPU_TPV_* order
ROLES: Tuple[str, ...] = ("dev", "ts", "stream", "task", "sq", "cq", "err", "aux")
INT_SIZES = (1, 2, 4, 8)
_INT_CODES = frozenset("bBhHiIqQ")
_INDEX_RE = re.compile(r"^(\w+)\[(\d+)\]$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+:[A-Za-z0-9_]+$")

StructLayouts = Mapping[str, Sequence[Tuple[str, str]]]
FormatReader = Callable[[str], Optional[str]]  # "system:name" -> its format text, None: no such tracepoint


class TpValue(NamedTuple):
    role: str  # one of ROLES: where the value goes in the event
    name: str  # its name in the decoded event
    path: str  # where it is in the record (see the module docstring)
    type: str = "u32"  # its type in the decoded event's synthetic format (npu_trace.bpf.formats)


@dataclass(frozen=True)
class TpSpec:
    """What one tracepoint's program reads: `values` (at most one per role) and, when `text` names a
    `__data_loc char[]` field, that string. `tp_id` is the event's `tp` (NPU_TP_* for the driver's five);
    `hint` says what to do when the tracepoint does not exist."""

    tracepoint: str  # "system:name"
    tp_id: int
    values: Tuple[TpValue, ...]
    text: str = ""
    hint: str = ""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.tracepoint):
            raise UsageError(f"bad tracepoint name {self.tracepoint!r} (system:name)")
        if not 0 < self.tp_id < 1 << 16:
            raise UsageError(f"{self.tracepoint}: tracepoint id {self.tp_id} not in 1..65535")
        roles = [v.role for v in self.values]
        unknown = sorted(set(roles) - set(ROLES))
        if unknown or len(set(roles)) != len(roles):
            raise UsageError(f"{self.tracepoint}: roles {roles} must be distinct, among {', '.join(ROLES)}")

    @property
    def event(self) -> str:
        """The decoded event's name in the `bpf` system: "trs_chan_sqe"."""
        return self.tracepoint.replace(":", "_")

    @property
    def field_names(self) -> Tuple[str, ...]:
        """The decoded event's fields: the values in role order, then the text."""
        return (*(v.name for v in self.ordered()), *((self.text,) if self.text else ()))

    def ordered(self) -> Tuple[TpValue, ...]:
        return tuple(sorted(self.values, key=lambda v: ROLES.index(v.role)))


class FieldRead(NamedTuple):
    role: str
    path: str
    offset: int  # from the start of the record (common_type at 0)
    size: int  # bytes: 1, 2, 4 or 8
    signed: bool


@dataclass(frozen=True)
class TpPlan:
    """One slot of the program: the tracepoint it is attached to and where each value is in its record."""

    slot: int  # on_tp_<slot>
    spec: TpSpec
    reads: Tuple[FieldRead, ...]  # in role order
    text_offset: int  # of the __data_loc field; -1: none

    @property
    def function(self) -> str:
        return f"on_tp_{self.slot}"

    def cflags(self) -> List[str]:
        n = self.slot
        flags = [f"-DTP{n}_ID={self.spec.tp_id}", f"-DTP{n}_TEXT_OFF={self.text_offset}"]
        by_role = {r.role: r for r in self.reads}
        for role in ROLES:
            r = by_role.get(role)
            off, size, signed = (r.offset, r.size, int(r.signed)) if r else (-1, 0, 0)
            v = role.upper()
            flags += [f"-DTP{n}_{v}_OFF={off}", f"-DTP{n}_{v}_SIZE={size}", f"-DTP{n}_{v}_SIGNED={signed}"]
        return flags


def _refuse(fmt: EventFormat, what: str) -> KernelFeatureError:
    return KernelFeatureError(f"tracepoint {fmt.full_name}: {what}; not reading it by offset")


def _field(fmt: EventFormat, name: str, path: str) -> Field:
    try:
        return fmt.field(name)
    except KeyError:
        have = ", ".join(fmt.field_names) or "none"
        raise _refuse(fmt, f"no field {name!r} (needed for {path}; its fields: {have})") from None


def resolve(fmt: EventFormat, path: str, layouts: StructLayouts) -> Tuple[int, int, bool]:
    """(offset, size, signed) of the integer at `path` in records of `fmt`."""
    m = _INDEX_RE.match(path)
    head = m.group(1) if m else path.split(".", 1)[0]
    field = _field(fmt, head, path)
    if m:
        index = int(m.group(2))
        if field.kind != ARRAY:
            raise _refuse(fmt, f"field {head} is {field.type} of {field.size} bytes, not an integer array ({path})")
        if index >= field.count:
            raise _refuse(fmt, f"{path} is beyond {head}[{field.count}]")
        return field.offset + index * field.elem_size, field.elem_size, field.signed
    if "." in path:
        member = path.split(".", 1)[1]
        members = layouts.get(field.type)
        if field.kind != BYTES or members is None:
            raise _refuse(fmt, f"field {head} ({field.type}, {field.size} bytes) has no struct layout in the profile "
                               f"(needed for {path})")  # fmt: skip
        total = struct.calcsize("<" + "".join(code for _, code in members))
        if total != field.size:
            raise _refuse(fmt, f"field {head} is {field.size} bytes but the profile's {field.type} is {total} "
                               f"(needed for {path})")  # fmt: skip
        off = 0
        for name, code in members:
            size = struct.calcsize("<" + code)
            if name == member:
                if code not in _INT_CODES:
                    raise _refuse(fmt, f"{path} is not an integer (code {code!r} in the profile's {field.type})")
                return field.offset + off, size, code.islower()
            off += size
        raise _refuse(fmt, f"the profile's {field.type} has no member {member!r} (needed for {path})")
    if field.kind != INT or field.size not in INT_SIZES:
        raise _refuse(fmt, f"field {head} is {field.type} of {field.size} bytes; the program reads integers of "
                           f"1, 2, 4 or 8 bytes")  # fmt: skip
    return field.offset, field.size, field.signed


def resolve_text(fmt: EventFormat, name: str) -> int:
    """Offset of the `__data_loc char[]` field `name` (its u32: length << 16 | offset of the string)."""
    field = _field(fmt, name, name)
    if field.kind != DATA_LOC or not field.is_string or field.size != 4:
        raise _refuse(fmt, f"field {name} is {field.type} of {field.size} bytes, not a __data_loc char[] string")
    return field.offset


def plan_one(slot: int, spec: TpSpec, fmt: EventFormat, layouts: StructLayouts) -> TpPlan:
    reads = []
    for value in spec.ordered():
        offset, size, signed = resolve(fmt, value.path, layouts)
        reads.append(FieldRead(value.role, value.path, offset, size, signed))
    text_offset = resolve_text(fmt, spec.text) if spec.text else -1
    return TpPlan(slot, spec, tuple(reads), text_offset)


def plan(
    names: Sequence[str], specs: Mapping[str, TpSpec], read_format: FormatReader, layouts: StructLayouts
) -> Tuple[TpPlan, ...]:
    """One TpPlan per tracepoint of `names`, slot i for names[i]; raises before anything is compiled."""
    if len(names) > layout.NPU_TP_SLOTS:
        raise UsageError(f"at most {layout.NPU_TP_SLOTS} tracepoints at once, not {len(names)}")
    plans = []
    for slot, name in enumerate(names):
        spec = specs.get(name)
        if spec is None:
            raise UsageError(f"no field spec for tracepoint {name} (known: {', '.join(sorted(specs)) or 'none'})")
        text = read_format(name)
        if text is None:
            hint = f": {spec.hint}" if spec.hint else ""
            raise KernelFeatureError(f"tracepoint {name} does not exist on this kernel{hint}")
        try:
            fmt = parse_format(text, name.split(":", 1)[0])
        except FormatError as exc:
            raise KernelFeatureError(f"tracepoint {name}: cannot parse its format file ({exc})") from None
        if fmt.full_name != name:
            raise KernelFeatureError(f"tracepoint {name}: its format file names {fmt.full_name}")
        plans.append(plan_one(slot, spec, fmt, layouts))
    return tuple(plans)


def by_tracepoint(specs: Iterable[TpSpec]) -> Dict[str, TpSpec]:
    return {s.tracepoint: s for s in specs}


# ---- the real Ascend driver's five tracepoints (hicann/driver chan_trace_event.h, trs_core_trace_event.h) ----
TRS_HINT = "load the Ascend driver (trs_chan:* come with asdrv_trsbase, trs_core:* with asdrv_trs)"
_INST = (TpValue("dev", "dev", "inst.devid"), TpValue("ts", "ts", "inst.tsid"))

TRS_SPECS: Dict[str, TpSpec] = by_tracepoint((
    TpSpec("trs_chan:sqe", layout.NPU_TP_TRS_CHAN_SQE, (
        *_INST, TpValue("stream", "stream", "sq_trace.stream_id"), TpValue("task", "task", "sq_trace.task_id"),
        TpValue("sq", "sqid", "sq_trace.sqid"), TpValue("aux", "sqe_type", "sq_trace.type"),
    ), "str", TRS_HINT),
    TpSpec("trs_chan:cqe", layout.NPU_TP_TRS_CHAN_CQE, (
        *_INST, TpValue("stream", "stream", "cq_trace.stream_id"), TpValue("task", "task", "cq_trace.task_id"),
        TpValue("sq", "sqid", "cq_trace.sq_id"), TpValue("cq", "cqid", "cq_trace.cqid"),
    ), "str", TRS_HINT),
    TpSpec("trs_chan:recv", layout.NPU_TP_TRS_CHAN_RECV, (
        *_INST, TpValue("cq", "cqid", "recv_trace.cqid"), TpValue("aux", "recv_cqe_num", "recv_trace.recv_cqe_num"),
    ), "str", TRS_HINT),
    TpSpec("trs_core:logic_cqe", layout.NPU_TP_TRS_CORE_LOGIC_CQE, (
        *_INST, TpValue("stream", "stream", "cq_trace.stream_id"), TpValue("task", "task", "cq_trace.task_id"),
        TpValue("sq", "sqid", "cq_trace.sqid"), TpValue("cq", "logic_cqid", "cq_trace.logic_cqid"),
        TpValue("err", "errcode", "cq_trace.errcode"), TpValue("aux", "errtype", "cq_trace.errtype"),
    ), "str", TRS_HINT),
    TpSpec("trs_core:logic_cq_recv", layout.NPU_TP_TRS_CORE_LOGIC_CQ_RECV, (
        *_INST, TpValue("cq", "logic_cqid", "recv_trace.logic_cqid"),
        TpValue("aux", "report_cqe_num", "recv_trace.report_cqe_num"),
    ), "str", TRS_HINT),
))  # fmt: skip
