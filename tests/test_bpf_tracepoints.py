"""Tracepoints read by field offsets (bpf/trs_tracepoints.bpf.c, npu_trace.bpf.tracepoints).

Offline: the -D offsets computed from the Ascend driver's five format files (tests/data/ascend-driver) for every
field the program reads; the program emulated on the hand-annotated driver records gives the annotated values,
decodes and normalizes to what the ftrace path gives, so the latency detector pairs submit and complete the
same way; every refusal (missing tracepoint, field, member; wrong size or kind) is one clear line.
Privileged: the program compiles and passes the verifier with the driver's offsets (nothing attached); attached
to tracepoints this kernel has (raw_syscalls:sys_enter, sched:sched_process_exec: a test-only spec, not a
product mapping) it reads the values a test put there; attaching the driver's trs_core:* here fails with exit
code 3 and leaves no program, no perf event attached.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from goldens import DATA
from npu_trace.bpf import layout
from npu_trace.bpf import source as bpf_source
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.records import Decoder
from npu_trace.bpf.source import BpfSource, with_variant
from npu_trace.bpf.tracepoints import ROLES, TRS_SPECS, TpPlan, TpSpec, TpValue, by_tracepoint, plan
from npu_trace.detectors.latency import LatencyDetector
from npu_trace.device.bpf_rules import BPF_MAPPING, REAL_HAL_MAPPING
from npu_trace.device.profiles import ASCEND_LAYOUTS, get_profile
from npu_trace.errors import KernelFeatureError, UsageError
from npu_trace.events import TraceEvent
from npu_trace.ftrace.decode import make_decoder
from npu_trace.ftrace.format import parse_format
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from test_ftrace_driver_golden import BLOCKS

ROOT = Path(DATA) / "ascend-driver"
BPF_DIR = Path(__file__).resolve().parents[1] / "bpf"
PROGRAM = (BPF_DIR / "trs_tracepoints.bpf.c").read_text()
DRIVER_TPS = ("trs_chan:sqe", "trs_chan:cqe", "trs_chan:recv", "trs_core:logic_cqe", "trs_core:logic_cq_recv")


def data_format(tracepoint: str) -> Optional[str]:
    system, name = tracepoint.split(":")
    path = ROOT / "events" / system / name / "format"
    return path.read_text() if path.exists() else None


def driver_plans(names: Tuple[str, ...] = DRIVER_TPS) -> Dict[str, TpPlan]:
    return {p.spec.tracepoint: p for p in plan(names, TRS_SPECS, data_format, ASCEND_LAYOUTS)}


# ---- offsets from the driver's format files ----------------------------------------------------------------
# every value the program reads, for each of the driver's tracepoints: role -> offset in the record (all u32);
# by hand from the format files (struct field offsets) and the TRACE_EVENT structs (member order)
EXPECTED_OFFSETS: Dict[str, Dict[str, int]] = {
    "trs_chan:sqe": {"dev": 12, "ts": 16, "stream": 56, "task": 52, "sq": 20, "aux": 48},
    "trs_chan:cqe": {"dev": 12, "ts": 16, "stream": 56, "task": 44, "sq": 48, "cq": 20},
    "trs_chan:recv": {"dev": 12, "ts": 16, "cq": 32, "aux": 44},
    "trs_core:logic_cqe": {"dev": 12, "ts": 16, "stream": 40, "task": 36, "sq": 44, "cq": 24, "err": 60, "aux": 64},
    "trs_core:logic_cq_recv": {"dev": 12, "ts": 16, "cq": 20, "aux": 24},
}


@pytest.mark.parametrize("tracepoint", DRIVER_TPS)
def test_driver_offsets(tracepoint: str) -> None:
    p = driver_plans()[tracepoint]
    assert {r.role: r.offset for r in p.reads} == EXPECTED_OFFSETS[tracepoint]
    assert {(r.size, r.signed) for r in p.reads} == {(4, False)}
    assert p.text_offset == 8  # __data_loc char[] str


def test_driver_cflags() -> None:
    plans = plan(DRIVER_TPS, TRS_SPECS, data_format, ASCEND_LAYOUTS)
    assert [p.slot for p in plans] == [0, 1, 2, 3, 4]
    flags = plans[3].cflags()  # trs_core:logic_cqe in slot 3
    assert flags[:2] == ["-DTP3_ID=4", "-DTP3_TEXT_OFF=8"]
    assert "-DTP3_ERR_OFF=60" in flags and "-DTP3_ERR_SIZE=4" in flags and "-DTP3_ERR_SIGNED=0" in flags
    assert len(flags) == 2 + 3 * len(ROLES)
    recv = plans[2].cflags()  # trs_chan:recv has no stream, task, SQ nor error: offset -1, size 0
    for role in ("STREAM", "TASK", "SQ", "ERR"):
        assert [f"-DTP2_{role}_OFF=-1", f"-DTP2_{role}_SIZE=0", f"-DTP2_{role}_SIGNED=0"] == [
            f for f in recv if f.startswith(f"-DTP2_{role}_")
        ]
    cfg = BpfConfig(hal=False, devs=(3,), tracepoints=DRIVER_TPS)
    assert bpf_source.tracepoint_cflags(cfg, plans)[:2] == ["-DRINGBUF_PAGES=256", "-DFILTER_DEVS=3"]


# ---- the program emulated on the annotated driver records ---------------------------------------------------
def emulate(p: TpPlan, raw: bytes, ts: int = 1000, pid: int = 4242) -> bytes:
    """The tp_event on_tp_<slot> writes for record `raw`, built the way the C program builds it."""
    values = [0] * layout.NPU_TP_VALUES
    present = signed = 0
    for r in p.reads:
        i = ROLES.index(r.role)
        v = int.from_bytes(raw[r.offset : r.offset + r.size], "little")
        if r.signed and v >> (8 * r.size - 1):
            v = (v - (1 << (8 * r.size))) & ((1 << 64) - 1)  # sign-extended to 64 bits
        values[i] = v
        present |= 1 << i
        signed |= int(r.signed) << i
    text = b""
    if p.text_offset >= 0:
        loc = int.from_bytes(raw[p.text_offset : p.text_offset + 4], "little")
        text = raw[loc & 0xFFFF :].split(b"\0", 1)[0][: layout.NPU_TP_TEXT_LEN - 1]
    hdr = (ts, pid, pid, layout.NPU_EV_TRACEPOINT, 1, 0)
    return layout.TP_EVENT.pack(*hdr, *values, p.spec.tp_id, p.slot, present, signed, 0, text)


def expected_value(expect: Dict[str, Any], path: str) -> Any:
    head, _, member = path.partition(".")
    return expect[head][member] if member else expect[head]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b[0])
def test_emulated_program_reads_the_annotated_values(block: Tuple[str, bytes, str, Dict[str, Any]]) -> None:
    name, raw, _, expect = block
    p = driver_plans()[name]
    ev = Decoder().decode(emulate(p, raw))
    assert ev is not None and ev.event == f"bpf:{name.replace(':', '_')}" and (ev.ts_ns, ev.pid) == (1000, 4242)
    want = {v.name: expected_value(expect, v.path) for v in p.spec.values}
    assert ev.fields() == {**want, "str": expect["str"]}


def _ftrace_event(name: str, raw: bytes, ts: int) -> TraceEvent:
    fmt = parse_format(data_format(name) or "", name.split(":")[0])
    pid, values = make_decoder(fmt, "little", ASCEND_LAYOUTS).decode(raw, 0, len(raw))
    return TraceEvent(ts, 1, pid, fmt, values)


def _bpf_event(name: str, raw: bytes, ts: int) -> TraceEvent:
    ev = Decoder().decode(emulate(driver_plans()[name], raw, ts))
    assert ev is not None
    return ev


def _raw(name: str) -> bytes:
    return next(raw for n, raw, _, _ in BLOCKS if n == name)


@pytest.mark.parametrize("name", ["trs_chan:sqe", "trs_core:logic_cqe"])
def test_bpf_and_ftrace_events_normalize_alike(name: str) -> None:
    norm = BlockNormalizer(Normalizer(get_profile("ascend").mapping))
    (via_ftrace,) = norm.events([_ftrace_event(name, _raw(name), 5000)])
    (via_bpf,) = norm.events([_bpf_event(name, _raw(name), 5000)])
    assert via_ftrace.kind in ("submit", "complete")
    assert via_bpf._replace(pid=0) == via_ftrace._replace(pid=0)


def _complete_for_the_sqe() -> bytes:
    """The annotated logic_cqe record, its device/stream/task those of the annotated sqe (3, 5, 100)."""
    raw = bytearray(_raw("trs_core:logic_cqe"))
    for role, value in (("dev", 3), ("stream", 5), ("task", 100)):
        struct.pack_into("<I", raw, EXPECTED_OFFSETS["trs_core:logic_cqe"][role], value)
    return bytes(raw)


@pytest.mark.parametrize("submit_via", ["bpf", "ftrace"])
def test_latency_detector_pairs_bpf_submit_and_complete(submit_via: str) -> None:
    norm = BlockNormalizer(Normalizer(get_profile("ascend").mapping))
    submit = (_bpf_event if submit_via == "bpf" else _ftrace_event)("trs_chan:sqe", _raw("trs_chan:sqe"), 10_000)
    complete = _bpf_event("trs_core:logic_cqe", _complete_for_the_sqe(), 35_000)
    det = LatencyDetector()
    det.feed(norm.events([submit, complete]))
    summary = det.summary()
    assert summary["unmatched_completes"] == 0 and summary["pending_tasks"] == 0
    (row,) = summary["ops"]
    assert (row["device"], row["op"], row["count"], row["max_ns"]) == (3, "task", 1, 25_000)


def test_other_strings_of_logic_cqe_are_not_completions() -> None:
    """The driver fires trs_core:logic_cqe for "Logic Cq Recv Match" too (the copy to user): not a completion."""
    raw = bytearray(_raw("trs_core:logic_cqe"))
    loc = struct.unpack_from("<I", raw, 8)[0] & 0xFFFF
    raw[loc : loc + 14] = b"Logic Cq Recv\0"
    normalizer = BlockNormalizer(Normalizer(get_profile("ascend").mapping))
    (npu,) = normalizer.events([_bpf_event("trs_core:logic_cqe", bytes(raw), 1)])
    assert npu.kind == "log"


def test_mapping_is_in_both_profiles() -> None:
    """The ascend profile's real HAL takes its own rules where they differ (its halMemAlloc is the allocation)."""
    for profile, mapping in (("ascend", {**BPF_MAPPING, **REAL_HAL_MAPPING}), ("sim", BPF_MAPPING)):
        assert all(get_profile(profile).mapping[k] == v for k, v in mapping.items())


# ---- decoder ----------------------------------------------------------------------------------------------
def _tp_record(tp: int, values: List[int], present: int, signed: int, text: bytes = b"") -> bytes:
    return layout.TP_EVENT.pack(7, 1, 2, layout.NPU_EV_TRACEPOINT, 0, 0, *values, tp, 0, present, signed, 0, text)


def test_decoder_signs_and_absent_values() -> None:
    spec = TpSpec("x:y", 300, (TpValue("dev", "d", "a"), TpValue("err", "e", "b", "s64")), text="s")
    dec = Decoder([spec])
    vals = [9, 0, 0, 0, 0, 0, (1 << 64) - 5, 0]
    ev = dec.decode(_tp_record(300, vals, 1 << 6 | 1, 1 << 6, b"hi"))
    assert ev is not None and ev.event == "bpf:x_y" and ev.fields() == {"d": 9, "e": -5, "s": "hi"}
    ev = dec.decode(_tp_record(300, vals, 1 << 6, 0))  # dev not present: None; err unsigned: as read
    assert ev is not None and ev.fields() == {"d": None, "e": (1 << 64) - 5, "s": ""}
    assert dec.decode(_tp_record(301, vals, 0, 0)) is None and dec.malformed == 1  # an id it was not given
    assert Decoder().decode(_tp_record(300, vals, 0, 0)) is None  # the default decoder knows the driver's only


# ---- refusals ---------------------------------------------------------------------------------------------
def _reader(name: str, old: str, new: str) -> Any:
    text = data_format(name) or ""
    assert old in text
    return lambda tp: text.replace(old, new) if tp == name else data_format(tp)


@pytest.mark.parametrize(
    ("tracepoint", "old", "new", "message"),
    [
        ("trs_chan:sqe", "struct trs_id_inst inst;", "struct trs_id_inst id_inst;",
         r"^tracepoint trs_chan:sqe: no field 'inst' \(needed for inst\.devid; its fields: str, id_inst, sq_trace, "
         r"timestamp\); not reading it by offset$"),
        ("trs_chan:sqe", "sq_trace;\toffset:20;\tsize:40;", "sq_trace;\toffset:20;\tsize:36;",
         r"^tracepoint trs_chan:sqe: field sq_trace is 36 bytes but the profile's struct trs_chan_sq_trace is 40"),
        ("trs_core:logic_cqe", "struct trs_logic_cqe_trace cq_trace;", "struct trs_logic_cqe_trace_v2 cq_trace;",
         r"field cq_trace \(struct trs_logic_cqe_trace_v2, 56 bytes\) has no struct layout in the profile"),
        ("trs_chan:cqe", "__data_loc char[] str;\toffset:8;\tsize:4;", "char str[4];\toffset:8;\tsize:4;",
         r"^tracepoint trs_chan:cqe: field str is char of 4 bytes, not a __data_loc char\[\] string"),
        ("trs_core:logic_cq_recv", "struct trs_id_inst inst;\toffset:12;\tsize:8;",
         "struct trs_id_inst inst;\toffset:12;\tsize:4;",
         r"field inst is 4 bytes but the profile's struct trs_id_inst is 8"),
    ],
)  # fmt: skip
def test_driver_format_mismatch_is_refused(tracepoint: str, old: str, new: str, message: str) -> None:
    with pytest.raises(KernelFeatureError, match=message) as exc:
        plan(DRIVER_TPS, TRS_SPECS, _reader(tracepoint, old, new), ASCEND_LAYOUTS)
    assert exc.value.exit_code == 3 and "\n" not in str(exc.value)


def test_member_missing_from_the_profile_layout() -> None:
    layouts = dict(ASCEND_LAYOUTS)
    layouts["struct trs_chan_sq_trace"] = [(n, c) if n != "task_id" else ("task", c)
                                           for n, c in ASCEND_LAYOUTS["struct trs_chan_sq_trace"]]  # fmt: skip
    with pytest.raises(KernelFeatureError, match=r"struct trs_chan_sq_trace has no member 'task_id'"):
        plan(("trs_chan:sqe",), TRS_SPECS, data_format, layouts)


SYS_ENTER = """name: sys_enter
ID: 443
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;
\tfield:char comm[16];\toffset:64;\tsize:16;\tsigned:0;

print fmt: "NR %ld", REC->id
"""


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("args[6]", r"args\[6\] is beyond args\[6\]"),
        ("id[0]", r"field id is long of 8 bytes, not an integer array"),
        ("comm", r"field comm is char of 16 bytes; the program reads integers of 1, 2, 4 or 8 bytes"),
        ("nope", r"no field 'nope'"),
        ("id.x", r"field id \(long, 8 bytes\) has no struct layout"),
    ],
)
def test_generic_refusals(path: str, message: str) -> None:
    spec = TpSpec("raw_syscalls:sys_enter", 100, (TpValue("dev", "v", path),))
    with pytest.raises(KernelFeatureError, match=message):
        plan(("raw_syscalls:sys_enter",), by_tracepoint((spec,)), lambda tp: SYS_ENTER, {})


def test_generic_offsets() -> None:
    spec = TpSpec("raw_syscalls:sys_enter", 100, (TpValue("err", "nr", "id", "s64"), TpValue("dev", "a", "args[5]")))
    (p,) = plan(("raw_syscalls:sys_enter",), by_tracepoint((spec,)), lambda tp: SYS_ENTER, {})
    assert [(r.role, r.offset, r.size, r.signed) for r in p.reads] == [("dev", 56, 8, False), ("err", 8, 8, True)]
    assert p.text_offset == -1 and spec.field_names == ("a", "nr")


def test_missing_tracepoint_and_unknown_spec() -> None:
    with pytest.raises(KernelFeatureError, match=r"^tracepoint trs_core:logic_cqe does not exist on this kernel: "
                                                 r"load the Ascend driver") as exc:  # fmt: skip
        plan(
            ("trs_chan:sqe", "trs_core:logic_cqe"),
            TRS_SPECS,
            lambda tp: data_format(tp) if "chan" in tp else None,
            ASCEND_LAYOUTS,
        )
    assert exc.value.exit_code == 3
    with pytest.raises(UsageError, match=r"no field spec for tracepoint sched:sched_switch \(known: trs_chan:cqe"):
        plan(("sched:sched_switch",), TRS_SPECS, data_format, ASCEND_LAYOUTS)
    with pytest.raises(UsageError, match="at most 5 tracepoints"):
        plan((*DRIVER_TPS, "x:y"), TRS_SPECS, data_format, ASCEND_LAYOUTS)
    with pytest.raises(KernelFeatureError, match=r"its format file names trs_chan:cqe"):
        plan(("trs_chan:sqe",), TRS_SPECS, lambda tp: data_format("trs_chan:cqe"), ASCEND_LAYOUTS)


@pytest.mark.parametrize(
    "tracepoints",
    [("trs_chan",), ("trs_chan:sqe", "trs_chan:sqe"), (*DRIVER_TPS, "a:b"), ('trs"x:y',)],
)
def test_bad_config(tracepoints: Tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        BpfConfig(tracepoints=tracepoints)


@pytest.mark.parametrize(
    "values", [(TpValue("dev", "a", "x"), TpValue("dev", "b", "y")), (TpValue("devid", "a", "x"),)]
)
def test_bad_spec(values: Tuple[TpValue, ...]) -> None:
    with pytest.raises(UsageError):
        TpSpec("a:b", 1, values)


# ---- the C program agrees with the Python side --------------------------------------------------------------
def test_roles_match_header() -> None:
    assert [getattr(layout, f"NPU_TPV_{role.upper()}") for role in ROLES] == list(range(len(ROLES)))
    assert {s.tp_id for s in TRS_SPECS.values()} == {
        getattr(layout, "NPU_TP_" + tp.upper().replace(":", "_")) for tp in DRIVER_TPS
    }


def test_program_has_one_function_per_slot_and_reads_every_role() -> None:
    slots = re.findall(r"^#ifdef TP(\d)_ID\nint on_tp_(\d)\(void \*ctx\)", PROGRAM, re.M)
    assert slots == [(str(n), str(n)) for n in range(layout.NPU_TP_SLOTS)]
    assert re.findall(r"TP_READ\(n, (\w+)\);", PROGRAM) == [role.upper() for role in ROLES]


# ---- privileged: compile, attach, refuse ---------------------------------------------------------------------
def fd_kinds() -> Dict[str, int]:
    """BPF programs, maps and perf events this process holds (bcc: an fd per loaded program and map, one per
    attached tracepoint)."""
    out = {"anon_inode:bpf-prog": 0, "anon_inode:bpf-map": 0, "anon_inode:[perf_event]": 0}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target in out:
            out[target] += 1
    return out


@pytest.fixture
def no_leak() -> Iterator[None]:
    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")
    before = fd_kinds()
    yield
    assert fd_kinds() == before


@pytest.mark.privileged
@pytest.mark.parametrize("compat", [None, "4.14"], ids=["ringbuf", "4.14-perf-buffer-probe-read"])
def test_compiles_and_verifies_with_the_driver_offsets(no_leak: None, compat: Optional[str]) -> None:
    """The default variant, and the one a 4.x kernel loads (a perf buffer, bpf_probe_read) through the verifier."""
    plans = plan(DRIVER_TPS, TRS_SPECS, data_format, ASCEND_LAYOUTS)
    cfg = with_variant(BpfConfig(hal=False, devs=(1,)), bpf_source.kernel_variant(BpfConfig(compat=compat)))
    done = bpf_source.compile_tracepoints(plans, cfg)
    assert done == "compiled trs_tracepoints.bpf.c and loaded on_tp_0, on_tp_1, on_tp_2, on_tp_3, on_tp_4 " \
                   "(nothing attached)"  # fmt: skip


# test-only specs: tracepoints this kernel has, their fields mapped onto the event's values
COOKIE = 0x5EED7A11
TEST_SPECS = by_tracepoint((
    TpSpec("raw_syscalls:sys_enter", 100, (
        TpValue("dev", "cookie", "args[0]", "u64"), TpValue("stream", "a1", "args[1]", "u64"),
        TpValue("task", "a2", "args[2]", "u64"), TpValue("err", "nr", "id", "s64"),
    )),
    TpSpec("sched:sched_process_exec", 101, (
        TpValue("task", "pid", "pid", "s32"), TpValue("aux", "old_pid", "old_pid", "s32"),
    ), text="filename"),
))  # fmt: skip
LONG_PATH = "/bin/../bin/../bin/../bin/true"  # 30 characters: the event keeps 23 and the NUL


@pytest.mark.privileged
@pytest.mark.parametrize("compat", [None, "4.14"], ids=["ringbuf", "4.14-perf-buffer-probe-read"])
def test_reads_real_tracepoints_by_offset(no_leak: None, compat: Optional[str]) -> None:
    getpid = {"x86_64": 39, "aarch64": 172}.get(platform.machine())
    if getpid is None:
        pytest.skip(f"no getpid syscall number for {platform.machine()} here")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    arg = ctypes.c_long
    cfg = BpfConfig(hal=False, devs=(COOKIE,), compat=compat, tracepoints=tuple(TEST_SPECS))
    batch: List[Any] = []
    with BpfSource(cfg, tracepoint_specs=TEST_SPECS) as src:
        assert [p.function for p in src.tracepoint_plans] == ["on_tp_0", "on_tp_1"]
        t0 = time.monotonic_ns()
        libc.syscall(arg(getpid), arg(COOKIE), arg(11), arg(22))  # its argument registers hold our values
        libc.syscall(arg(-1), arg(COOKIE), arg(-5), arg(0))  # no such syscall (ENOSYS): id -1 is traced
        child = subprocess.Popen([LONG_PATH])
        assert child.wait() == 0
        t1 = time.monotonic_ns()
        time.sleep(0.05)
        src.read(batch)
    events = [e for e in batch if isinstance(e, TraceEvent)]
    calls = [e for e in events if e.event == "bpf:raw_syscalls_sys_enter"]
    assert calls and all(e.fields()["cookie"] == COOKIE for e in calls)  # FILTER_DEVS in the kernel
    mine = [e for e in calls if e.pid == threading.get_native_id()]
    assert [e.fields() for e in mine] == [
        {"cookie": COOKIE, "a1": 11, "a2": 22, "nr": getpid},
        {"cookie": COOKIE, "a1": (1 << 64) - 5, "a2": 0, "nr": -1},  # args are unsigned long, id is long
    ]
    assert all(t0 <= e.ts_ns <= t1 for e in mine)  # CLOCK_MONOTONIC, as the tracefs mono clock
    execs = [e for e in events if e.event == "bpf:sched_sched_process_exec" and e.pid == child.pid]
    assert [e.fields() for e in execs] == [
        {"pid": child.pid, "old_pid": child.pid, "filename": LONG_PATH[: layout.NPU_TP_TEXT_LEN - 1]}
    ]
    assert not [e for e in batch if not isinstance(e, TraceEvent)]  # no loss


@pytest.mark.privileged
def test_driver_tracepoint_missing_here(no_leak: None) -> None:
    if data_format_here("trs_core:logic_cqe"):
        pytest.skip("the Ascend driver is loaded here")
    for names in (("trs_core:logic_cqe", "trs_core:logic_cq_recv"), ("raw_syscalls:sys_enter", "trs_core:logic_cqe")):
        src = BpfSource(BpfConfig(hal=False, tracepoints=names), tracepoint_specs={**TEST_SPECS, **TRS_SPECS})
        with pytest.raises(KernelFeatureError, match=r"^tracepoint trs_core:logic_cqe does not exist on this kernel: "
                                                     r"load the Ascend driver") as exc:  # fmt: skip
            src.start()
        assert exc.value.exit_code == 3 and src.objects == {}  # refused before anything was compiled


@pytest.mark.privileged
def test_attach_failure_after_an_attach_leaves_nothing(no_leak: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slot 0 attaches to a real tracepoint; slot 1 is planned from the driver's format file (as if the
    driver were loaded) but bcc cannot attach it here: the error names it, and close() detached slot 0."""
    if data_format_here("trs_core:logic_cqe"):
        pytest.skip("the Ascend driver is loaded here")
    real = bpf_source.read_tracepoint_format
    monkeypatch.setattr(bpf_source, "read_tracepoint_format", lambda tp: data_format(tp) or real(tp))
    specs = {**TEST_SPECS, **TRS_SPECS}
    src = BpfSource(BpfConfig(hal=False, tracepoints=("raw_syscalls:sys_enter", "trs_core:logic_cqe")),
                    tracepoint_specs=specs)  # fmt: skip
    attached: List[str] = []
    original = bpf_source.BpfSource._attach_tracepoints

    def spy(self: BpfSource, bcc: Any, plans: Any) -> None:
        try:
            original(self, bcc, plans)
        finally:
            attached.extend(tp.decode() for tp in self.objects["trs_tracepoints"].tracepoint_fds)

    monkeypatch.setattr(bpf_source.BpfSource, "_attach_tracepoints", spy)
    with pytest.raises(KernelFeatureError, match=r"^cannot attach tracepoint trs_core:logic_cqe: ") as exc:
        src.start()
    assert exc.value.exit_code == 3
    assert attached == ["raw_syscalls:sys_enter"] and src.objects == {}


def data_format_here(tracepoint: str) -> Optional[str]:
    return bpf_source.read_tracepoint_format(tracepoint)
