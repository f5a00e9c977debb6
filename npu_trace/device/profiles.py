"""Profiles are data: which events make up a target, and how to read the struct-typed fields of its records.

`ascend` describes the real driver (its five tracepoints, hicann/driver `chan_trace_event.h` and
`trs_core_trace_event.h`, plus the IRQ tracepoints); `sim` describes the simulated NPU (uprobe events in the
`ascend` group). Detectors and sinks never ask where an event came from; they see the decoded fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Sequence, Tuple

from npu_trace.device.bpf_rules import BPF_MAPPING, REAL_HAL_MAPPING
from npu_trace.device.hal import ETIMEDOUT, RESET_STEPS, TIMEOUT_KINDS
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
    # raw event -> NpuEvent rules (npu_trace.pipeline.normalize documents the rule keys)
    mapping: Mapping[str, Any] = field(default_factory=dict)
    # reset-sequence state machine (npu_trace.detectors.reset documents the keys); empty: no reset detection
    reset: Mapping[str, Any] = field(default_factory=dict)
    # latency detector settings (npu_trace.detectors.latency documents the keys); empty: the detector's defaults
    latency: Mapping[str, Any] = field(default_factory=dict)
    # the other channels read beside the ftrace events (npu_trace.sources.host_channels): kmsg, uevent, health
    channels: Tuple[str, ...] = ()
    # False: a host where none of `events` exists still traces markers and the channels (the real driver may be
    # unloaded mid-incident); True: none of them is an error with `hint` (the simulator must be loaded)
    require_events: bool = True
    # one timeout told by several channels within this much time is one finding (npu_trace.detectors.timeouts)
    merge_ns: int = 0
    # --bpf: IRQ name prefixes whose handlers the BPF channel times (at most 4), and the ftrace events it
    # replaces (the same calls measured by ftrace uprobes would be counted twice)
    bpf_irq_prefixes: Tuple[str, ...] = ()
    bpf_replaces: Tuple[str, ...] = ()
    # --bpf: the driver's tracepoints the BPF channel reads by field offsets (those present on the host)
    bpf_tracepoints: Tuple[str, ...] = ()
    # the host's interrupt tracepoints among `events`: traced only for the NPU's own interrupts (filtered in the
    # kernel to the IRQ numbers npu_trace.device.irqs finds, each given its device), none when it has none
    irq_events: Tuple[str, ...] = ()


# ---- normalization: raw event -> NpuEvent kind (see npu_trace.pipeline.normalize for the rule keys) ------------------
_S = 1_000_000_000


def _hal(name: str, entry: Dict[str, Any], ret: Dict[str, Any]) -> Dict[str, Any]:
    """Entry and return probe rules of one HAL call; the return is paired with its entry by (pid, op)."""
    return {
        f"ascend:ascend_{name}": {"op": name, "pair": "entry", **entry},
        f"ascend:ascend_{name}_ret": {"op": name, "pair": "return", **ret},
    }


SIM_MAPPING: Dict[str, Any] = {
    **_hal("halMemAlloc", {"kind": "call"}, {"kind": "call"}),
    # a free takes effect when the call returns 0 (the return carries the entry's va)
    **_hal("halMemFree", {"kind": "call"}, {"kind": "free", "kind_if": [["ret", "!=", 0, "call"]]}),
    # a task is submitted when the send returns 0 (as trs_chan:sqe fires after the SQE is written)
    **_hal("halSqTaskSend", {"kind": "call"}, {"kind": "submit", "kind_if": [["ret", "!=", 0, "call"]]}),
    # a wait that ends in -ETIMEDOUT is a timeout, not a slow call
    **_hal("halCqReportRecv", {"kind": "call"}, {"kind": "call", "kind_if": [["ret", "==", ETIMEDOUT, "timeout"]]}),
    "ascend:ascend_devmm_alloc_done": {
        "kind": "alloc", "op": "halMemAlloc", "kind_if": [["ret", "!=", 0, "alloc_fail"]],
    },
    "ascend:ascend_trs_logic_cq_enque": {"kind": "complete", "op": "task"},
    "ascend:ascend_irq_handler_entry": {"kind": "irq", "op": "irq", "set": {"edge": "entry"}},
    "ascend:ascend_irq_handler_exit": {"kind": "irq", "op": "irq", "set": {"edge": "exit"}},
    "ascend:ascend_drv_timeout": {
        "kind": "timeout", "op_field": "kind", "op_names": {str(k): v for k, v in TIMEOUT_KINDS.items()},
        "args": {"code": "kind", "chan": "chan", "wait_us": "wait_us"},
    },
    "ascend:ascend_hb_report_heart_beat_lost_event": {"kind": "timeout", "op": "heartbeat"},
    "ascend:ascend_dms_event_report": {"kind": "ecc", "op": "dms_event"},
    "ascend:ascend_devdrv_reset_step": {
        "kind": "reset_step", "op": "reset", "args": {"step": "step_name", "index": "step", "ret": "ret"},
    },
}  # fmt: skip

_TRS_DEV = "inst.devid"
ASCEND_MAPPING: Dict[str, Any] = {
    "trs_chan:sqe": [{
        "match": {"str": "Task Send"}, "kind": "submit", "op": "sqe", "dev": _TRS_DEV,
        "args": {"ts": "inst.tsid", "stream": "sq_trace.stream_id", "task": "sq_trace.task_id",
                 "sqid": "sq_trace.sqid"},
    }],
    "trs_core:logic_cqe": [{
        "match": {"str": "Logic Cq Enque"}, "kind": "complete", "op": "task", "dev": _TRS_DEV,
        "args": {"ts": "inst.tsid", "stream": "cq_trace.stream_id", "task": "cq_trace.task_id",
                 "errcode": "cq_trace.errcode", "errtype": "cq_trace.errtype"},
    }],
    "irq:irq_handler_entry": {"kind": "irq", "op": "irq", "dev": "", "set": {"edge": "entry"}},
    "irq:irq_handler_exit": {"kind": "irq", "op": "irq", "dev": "", "set": {"edge": "exit"}},
}  # fmt: skip

# ---- reset sequences (see npu_trace.detectors.reset for the keys) ----------------------------------------
SIM_RESET: Dict[str, Any] = {
    "steps": list(RESET_STEPS),  # the expected order
    "start": ["ready_for_hotreset", "unbind", "remove", "reset_begin"],  # steps that may open a sequence
    "end": ["heartbeat_resume"],  # the device is healthy again
    "triggers": [{"kind": "timeout"}],  # the last one before the first step (driver timeout, heartbeat lost)
    "trigger_window_ns": 600 * _S,  # a trigger older than this before the first step is not attached
    "step_timeout_ns": 120 * _S,  # the real drain waits up to 120 s; rescan retries 20 x 3 s
    "precursor_window_ns": 600 * _S,
    # one step told by several channels (ftrace, kmsg, uevents) within 1 s is one step with its sources
    "merge_ns": 1 * _S,
}

# ---- latency (see npu_trace.detectors.latency for the keys) ----------------------------------------------
SIM_LATENCY: Dict[str, Any] = {
    # the simulated device completes tasks in order on one thread (the executor's only one, or its interrupt
    # thread, which waits for each task's submit): a slow call delays the completions queued behind it, so task
    # latency is measured (p50/p99/max) but never judged as a spike
    "ops": {"task": {"adaptive": False, "absolute_ns": None}},
    # the simulator's calls take tens of microseconds and its injected spikes 20-60 ms; 10 ms keeps a VM's
    # scheduling hiccups (several ms when the host steals the vCPU) from counting as spikes
    "floor_ns": 10_000_000,
    "thresholds_ns": {"halMemAlloc": 10_000_000, "halMemFree": 10_000_000, "halSqTaskSend": 10_000_000},
}


PROFILES: Dict[str, Profile] = {
    "sim": Profile(
        "sim",
        "the simulated NPU: uprobe events ascend:ascend_* on its HAL and driver-side functions",
        ("ascend:*",),
        ASCEND_LAYOUTS,
        "load the simulated NPU first: npu-trace sim load",
        mapping={**SIM_MAPPING, **BPF_MAPPING},  # events of the BPF source (npu_trace.bpf)
        reset=SIM_RESET,
        latency=SIM_LATENCY,
        channels=("kmsg", "uevent", "health"),
        merge_ns=SIM_RESET["merge_ns"],
        bpf_replaces=("ascend:ascend_hal*",),  # the simulator's HAL uprobe events
    ),
    "ascend": Profile(
        "ascend",
        "the real Ascend driver: trs_chan/trs_core tracepoints and the NPU's interrupts",
        ("trs_chan:*", "trs_core:*", "irq:irq_handler_entry", "irq:irq_handler_exit"),
        ASCEND_LAYOUTS,
        "load the Ascend driver (asdrv_trs, asdrv_trsbase) and enable /proc/trs_*/.../trace_enable",
        # libascend_hal.so's calls measured by the BPF channel: its allocations, frees, failures and task sends
        mapping={**ASCEND_MAPPING, **BPF_MAPPING, **REAL_HAL_MAPPING},
        reset=SIM_RESET,  # the same step names: the kmsg rules and uevents name the real driver's steps so
        channels=("kmsg", "uevent", "health"),
        require_events=False,
        merge_ns=SIM_RESET["merge_ns"],
        # the real driver's IRQ names (reference: cq_update_irq, cq_update_bind_thread_irq, trs-mbox-<dev>-<ts>,
        # dma_done_irq/dma_err_irq, devdrv_load_irq/devdrv_half_probe_irq)
        bpf_irq_prefixes=("cq_", "trs-mbox-", "dma_", "devdrv_"),
        # task submit and completion measured in the kernel, instead of their ftrace events
        bpf_tracepoints=("trs_chan:sqe", "trs_core:logic_cqe"),
        bpf_replaces=("trs_chan:sqe", "trs_core:logic_cqe"),
        irq_events=("irq:irq_handler_entry", "irq:irq_handler_exit"),
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None
