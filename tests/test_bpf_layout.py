"""Offline: bpf/npu_trace.h and its Python mirror (npu_trace.bpf.layout) agree; every program carries the same
output block; cflags follow the config; the decoder reads hand-built records."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from npu_trace.bpf import formats, layout
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.records import Decoder
from npu_trace.device.bpf_rules import BPF_MAPPING
from npu_trace.device.profiles import get_profile
from npu_trace.errors import UsageError
from npu_trace.events import Loss
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer

BPF_DIR = Path(__file__).resolve().parents[1] / "bpf"
HEADER = (BPF_DIR / "npu_trace.h").read_text()
C_SIZES = {"__u64": 8, "__s64": 8, "__u32": 4, "__s32": 4, "__u16": 2, "__s16": 2, "__u8": 1, "char": 1}
Layout = List[Tuple[str, int, int]]  # (name, offset, size)


def defines() -> Dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define\s+(NPU_\w+)\s+(\d+)", HEADER, re.M)}


def c_structs() -> Dict[str, Tuple[Layout, int]]:
    """Every struct of the header laid out with C's natural alignment: name -> (fields, sizeof)."""
    out: Dict[str, Tuple[Layout, int]] = {}
    consts = defines()
    for m in re.finditer(r"struct\s+(\w+)\s*\{(.*?)\};", HEADER, re.S):
        out[m[1]] = _layout(m[2], out, consts)
    return out


def _layout(body: str, known: Dict[str, Tuple[Layout, int]], consts: Dict[str, int]) -> Tuple[Layout, int]:
    fields: Layout = []
    off, align_max = 0, 1
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = re.match(r"^(struct\s+\w+|\w+)\s+(\w+)(?:\[(\w+)\])?$", decl)
        assert m, decl
        ctype, name, count = m[1], m[2], m[3]
        n = int(consts.get(count, count) if count else 1)
        if ctype.startswith("struct "):
            inner, size = known[ctype.split()[1]]
            align = max(s for _, _, s in inner)
            off = -(-off // align) * align
            fields += [(f"{name}.{f}", off + o, s) for f, o, s in inner]
        else:
            size = align = C_SIZES[ctype]
            off = -(-off // align) * align
            fields.append((name, off, size * n))
            size *= n
        align_max = max(align_max, align)
        off += size
    return fields, -(-off // align_max) * align_max


@pytest.mark.parametrize("name", sorted(layout.FIELDS))
def test_mirror_matches_header(name: str) -> None:
    fields, sizeof = c_structs()[name]
    assert list(layout.offsets(name)) == fields
    assert layout.compile_struct(name).size == sizeof


def test_every_header_struct_is_mirrored() -> None:
    assert set(c_structs()) == set(layout.FIELDS)


def test_constants_match_header() -> None:
    assert defines() == layout.CONSTANTS


def test_type_offset() -> None:
    assert ("type", layout.TYPE_OFFSET, 2) in layout.offsets("npu_event_header")


def test_output_block_identical_in_every_program() -> None:
    blocks = set()
    for path in sorted(BPF_DIR.glob("*.bpf.c")):
        m = re.search(r"/\* ---- output block.*?end of output block ---- \*/", path.read_text(), re.S)
        assert m, f"{path.name} lacks the output block"
        blocks.add(m[0])
    assert len(blocks) == 1


def test_ops_match_header() -> None:
    assert [getattr(layout, f"NPU_OP_{n}") for n in ("MEM_ALLOC", "MEM_FREE", "SQ_TASK_SEND", "CQ_REPORT_RECV")] == [
        formats.OPS.index(op) for op in ("halMemAlloc", "halMemFree", "halSqTaskSend", "halCqReportRecv")
    ]


# ---- config -> cflags --------------------------------------------------------------------------------------
def test_default_cflags() -> None:
    cfg = BpfConfig()
    assert cfg.hal_cflags() == ["-DRINGBUF_PAGES=256", "-DMAX_PENDING=10240"]
    assert cfg.irq_cflags() == ["-DRINGBUF_PAGES=256"]


def test_filter_cflags() -> None:
    cfg = BpfConfig(pids=(42,), devs=(1,), threshold_ns=5000, aggregate=True, ringbuf_pages=1, perf_buffer=True)
    assert cfg.hal_cflags() == [
        "-DRINGBUF_PAGES=1", "-DUSE_PERF_BUFFER", "-DTHRESHOLD_NS=5000ULL", "-DMAX_PENDING=10240",
        "-DFILTER_PIDS=42", "-DFILTER_DEVS=1", "-DAGGREGATE",
    ]  # fmt: skip
    assert cfg.bench_cflags()[-1] == "-DFILTER_PIDS=42"


def test_scope_cflags_lists() -> None:
    cfg = BpfConfig(pids=(7, 9), comms=("npu_sim", "python3"), devs=(0, 3))
    assert cfg.hal_cflags()[2:] == ["-DFILTER_PIDS=7,9", '-DFILTER_COMMS="npu_sim","python3"', "-DFILTER_DEVS=0,3"]
    assert cfg.tracepoint_cflags()[1:] == ["-DFILTER_DEVS=0,3"]  # the driver's tracepoints: devices only


def test_irq_cflags() -> None:
    cfg = BpfConfig(irq=True, irq_names=("cq_update_irq", "trs-mbox-0-"), irq_numbers=(36,))
    assert cfg.irq_cflags()[1:] == ['-DIRQ_PREFIX_0="cq_update_irq"', '-DIRQ_PREFIX_1="trs-mbox-0-"', "-DIRQ_NUM_0=36"]


@pytest.mark.parametrize(
    "kwargs",
    [{"ringbuf_pages": 3}, {"irq_names": ('a"b',)}, {"irq_names": ("x",) * 5}, {"threshold_ns": -1},
     {"hal_symbols": ("halNope",)}, {"pids": tuple(range(1, 10))}, {"comms": ('a"b',)}, {"comms": ("x" * 16,)},
     {"pids": (0,)}, {"devs": (-1,)}],
)  # fmt: skip
def test_bad_config(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        BpfConfig(**kwargs)


# ---- decode ------------------------------------------------------------------------------------------------
def _hdr(ts: int, ev_type: int) -> Tuple[int, ...]:
    return (ts, 100, 101, ev_type, 1, 0)


def _hal_record(ts: int, op: int, args: Tuple[int, ...], dev: int, ret: int, latency: int = 1000) -> bytes:
    padded = (*args, *(0,) * (layout.NPU_HAL_ARGS - len(args)))
    return layout.HAL_CALL.pack(*_hdr(ts, 1), ts - latency, latency, *padded, dev, ret, op, 0, 0)


def test_decode_hal_call() -> None:
    rec = _hal_record(2000, 3, (0, 0, 0xFFFFFF9C), 3, -110)
    ev = Decoder().decode(rec)
    assert ev is not None and ev.event == "bpf:halCqReportRecv" and (ev.ts_ns, ev.cpu, ev.pid) == (2000, 1, 101)
    assert ev.fields() == {"dev": 3, "ts": 0, "stream": 0, "timeout_ms": -100, "task": 0, "cq": 0,
                           "report_cqe_num": 0, "ret": -110, "latency_ns": 1000, "entry_ts_ns": 1000}  # fmt: skip


def test_decode_irq_and_malformed() -> None:
    dec = Decoder()
    rec = layout.IRQ.pack(*_hdr(5, 2), 3, 2, 36, 1, b"virtio1-req.0")
    ev = dec.decode(rec)
    assert ev is not None and ev.fields()["name"] == "virtio1-req.0" and ev.fields()["duration_ns"] == 2
    assert dec.decode(b"\x00" * 10) is None and dec.decode(struct.pack("<QIIHHI", 1, 1, 1, 99, 0, 0)) is None
    assert dec.losses() == [Loss("bpf", -1, "malformed", 2)] and dec.losses() == []


def test_mapping_in_sim_profile_normalizes() -> None:
    assert all(get_profile("sim").mapping[k] == v for k, v in BPF_MAPPING.items())
    free = _hal_record(9000, 1, (0xABC,), 2, 0)
    ev = Decoder().decode(free)
    assert ev is not None
    (npu,) = BlockNormalizer(Normalizer(get_profile("sim").mapping)).events([ev])
    assert (npu.kind, npu.op, npu.dev) == ("free", "halMemFree", 2)
    assert npu.args == {"va": 0xABC, "ret": 0, "latency_ns": 1000, "entry_ts_ns": 8000}
    assert formats.ALL["bpf:halMemFree"].hex_fields == frozenset({"va"})
