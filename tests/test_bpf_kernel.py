"""Offline: which variant of the BPF programs a kernel loads (npu_trace.bpf.kernel), what it turns into (-D flags,
the output map), and what doctor says of it: from the helpers /proc/kallsyms lists (a vendor kernel's backports
count), else from the release; --compat forces the field's old kernels' variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_trace.bpf import kernel
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import with_variant
from npu_trace.errors import UsageError


def kallsyms(tmp_path: Path, *names: str) -> str:
    path = tmp_path / "kallsyms"
    lines = ["ffffffff81000000 T _stext", *(f"ffffffff814cc020 T {n}" for n in names), "ffffffffc0a01000 t x [nvme]"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("release", "name", "legacy", "perf"),
    [
        ("4.14.0-115.el7a.0.1.aarch64", "legacy (4.x)", True, True),  # CentOS 7.6 on Kunpeng
        ("4.19.90-52.22.v2207.ky10.aarch64", "legacy (4.x)", True, True),  # Kylin V10
        ("5.5.0", "perf buffer", False, True),
        ("5.10.0-60.18.0.50.oe2203.aarch64", "ringbuf", False, False),  # openEuler 22.03
        ("6.18.44-fc-v1045", "ringbuf", False, False),
    ],
)
def test_the_release_decides_when_kallsyms_cannot_be_read(
    tmp_path: Path, release: str, name: str, legacy: bool, perf: bool
) -> None:
    v = kernel.detect(release, str(tmp_path / "no-kallsyms"))
    assert (v.name, v.legacy_read, v.perf_buffer) == (name, legacy, perf)
    assert v.how == f"release {release} (no {tmp_path / 'no-kallsyms'})"


def test_kallsyms_wins_over_the_release(tmp_path: Path) -> None:
    backported = kernel.detect("4.19.90-2112.8.0.0131.oe1.aarch64", kallsyms(tmp_path, "bpf_probe_read_user"))
    assert (backported.legacy_read, backported.perf_buffer) == (False, True)
    assert backported.describe() == (
        f"perf buffer: a perf event array for the BPF ring buffer ({tmp_path / 'kallsyms'} of "
        "4.19.90-2112.8.0.0131.oe1.aarch64)"
    )
    new = kernel.detect("6.1.0", kallsyms(tmp_path, "bpf_probe_read_user", "bpf_ringbuf_reserve"))
    assert new.name == "ringbuf" and new.describe().startswith("ringbuf: bpf_probe_read_user, the BPF ring buffer")
    assert kernel.detect("6.1.0", kallsyms(tmp_path)).name == "legacy (4.x)"  # a kernel without either


def test_compat_forces_an_old_kernels_variant_into_the_flags() -> None:
    for release in ("4.14", "4.19"):
        v = kernel.forced(release)
        assert v.describe() == (
            f"legacy (4.x): bpf_probe_read for bpf_probe_read_user; a perf event array for the BPF ring buffer "
            f"(--compat {release})"
        )
        cfg = with_variant(BpfConfig(compat=release), v)
        assert cfg.perf_buffer and cfg.legacy_read
        assert {"-DUSE_PERF_BUFFER", "-DNPU_LEGACY_READ"} <= set(cfg.hal_cflags())
        assert {"-DUSE_PERF_BUFFER", "-DNPU_LEGACY_READ"} <= set(cfg.tracepoint_cflags())
    assert with_variant(BpfConfig(), kernel.forced("5.10")).hal_cflags() == BpfConfig().hal_cflags()
    assert "-DNPU_LEGACY_READ" not in BpfConfig().irq_cflags()
    with pytest.raises(UsageError, match="not a kernel release: 'old'"):
        BpfConfig(compat="old")


def test_the_task_layout_goes_into_the_hal_flags_only() -> None:
    assert "-DTASK_STREAM_OFF=4" in BpfConfig(task_layout="stars").hal_cflags()
    assert not [f for f in BpfConfig().hal_cflags() if f.startswith("-DTASK_")]  # unknown: nothing read
    assert not [f for f in BpfConfig(task_layout="ts").tracepoint_cflags() if f.startswith("-DTASK_")]
    with pytest.raises(UsageError, match="unknown task layout 'v3'"):
        BpfConfig(task_layout="v3")


def test_npu_trace_bpf_compat_and_chip_reach_the_configuration() -> None:
    from npu_trace.cli import build_parser
    from npu_trace.commands.bpf import config_from_args

    args = build_parser().parse_args(["bpf", "--hal", "/opt/libascend_hal.so", "--compat", "4.19", "--chip", "910"])
    cfg = config_from_args(args)
    assert (cfg.compat, cfg.task_layout, cfg.binary) == ("4.19", "ts", "/opt/libascend_hal.so")
    bad = build_parser().parse_args(["bpf", "--hal", "/opt/libascend_hal.so", "--compat", "old"])
    with pytest.raises(UsageError, match="not a kernel release"):
        config_from_args(bad)
