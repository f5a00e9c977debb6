"""Profiles are data: which events make up a target, and how to read the struct-typed fields of its records.

`ascend` describes the real driver (its five tracepoints, hicann/driver `chan_trace_event.h` and
`trs_core_trace_event.h`, plus the IRQ tracepoints); `sim` describes the simulated NPU (uprobe events in the
`ascend` group). Detectors and sinks never ask where an event came from; they see the decoded fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Sequence, Tuple

from npu_trace.errors import UsageError

# Struct layouts of the real driver's struct-typed tracepoint fields (their format files only say
# `struct trs_chan_sq_trace sq_trace; size:40`): member names as in C (nested structs as "outer.inner")
# and struct codes, in declaration order.
# Sources: ascend_kernel_hal.h (trs_id_inst, trs_chan_type, trs_chan_sq_trace, trs_chan_cq_trace),
# chan_trace.h (trs_chan_recv_trace), trs_core_trace.h (trs_logic_cqe_trace, trs_logic_cq_recv_trace_t).
_U32 = "I"
_CHAN_TYPES = (("types.type", _U32), ("types.sub_type", _U32))  # struct trs_chan_type, inlined
ASCEND_LAYOUTS: Dict[str, Sequence[Tuple[str, str]]] = {
    "struct trs_id_inst": (("devid", _U32), ("tsid", _U32)),
    "struct trs_chan_sq_trace": (
        ("sqid", _U32), ("status", _U32), ("sq_head", _U32), ("sq_tail", _U32), ("chan_id", _U32), *_CHAN_TYPES,
        ("type", _U32), ("task_id", _U32), ("stream_id", _U32),
    ),
    "struct trs_chan_cq_trace": (
        ("cqid", _U32), ("cq_head", _U32), ("round", _U32), ("chan_id", _U32), *_CHAN_TYPES,
        ("task_id", _U32), ("sq_id", _U32), ("sq_head", _U32), ("stream_id", _U32),
    ),
    "struct trs_chan_recv_trace": (
        ("chan_id", _U32), *_CHAN_TYPES, ("cqid", _U32), ("cq_head", _U32), ("cqe_num", _U32),
        ("recv_cqe_num", _U32), ("timeout", "i"),
    ),
    "struct trs_logic_cqe_trace": (
        ("logic_cqid", _U32), ("head", _U32), ("tail", _U32), ("task_id", _U32), ("stream_id", _U32),
        ("sqid", _U32), ("sq_head", _U32), ("sqe_type", _U32), ("match_flag", _U32), ("errcode", _U32),
        ("errtype", _U32), ("drop_flag", _U32), ("timestamp", "Q"),
    ),
    "struct trs_logic_cq_recv_trace_t": (("logic_cqid", _U32), ("report_cqe_num", _U32), ("timeout", "i")),
    # struct timespec64 {time64_t tv_sec; long tv_nsec;} on 64-bit kernels (ktime_get_ts64: CLOCK_MONOTONIC)
    "ka_timespec64_t": (("tv_sec", "q"), ("tv_nsec", "q")),
    "struct timespec64": (("tv_sec", "q"), ("tv_nsec", "q")),
}  # fmt: skip


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    events: Tuple[str, ...]  # globs; those of a profile are optional one by one, but at least one must exist
    layouts: Mapping[str, Sequence[Tuple[str, str]]] = field(default_factory=dict)
    hint: str = ""  # what to do when none of the events exists


PROFILES: Dict[str, Profile] = {
    "sim": Profile(
        "sim",
        "the simulated NPU: uprobe events ascend:ascend_* on its HAL and driver-side functions",
        ("ascend:*",),
        ASCEND_LAYOUTS,
        "load the simulated NPU first: npu-trace sim load",
    ),
    "ascend": Profile(
        "ascend",
        "the real Ascend driver: trs_chan/trs_core tracepoints and the NPU's interrupts",
        ("trs_chan:*", "trs_core:*", "irq:irq_handler_entry", "irq:irq_handler_exit"),
        ASCEND_LAYOUTS,
        "load the Ascend driver (asdrv_trs, asdrv_trsbase) and enable /proc/trs_*/.../trace_enable",
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None
