"""npu_trace.capabilities on fake host trees, plus one real `npu-trace doctor --json` run."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from npu_trace import capabilities as doctor
from npu_trace.capabilities import Check, Host
from npu_trace.sim import build

RELEASE = "6.1.0-test"
ROOT_CAPS = "CapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"
NO_CAPS = "CapInh:\t0000000000000000\nCapEff:\t0000000000000000\n"
DRIVER_EVENTS = "trs_chan:sqe\ntrs_chan:cqe\ntrs_chan:recv\ntrs_core:logic_cqe\ntrs_core:logic_cq_recv\n"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


FLEET = Path(__file__).parent / "data" / "fleet-kernels"


def make_tracefs(root: Path, events: str = "sched:sched_switch\n", uprobes: bool = True,
                 kernel: str = "openeuler-22.03-5.10-aarch64") -> None:  # fmt: skip
    """A tracefs whose headers and ftrace:print format are those of one of the fleet's kernels."""
    for rel in ("header_page", "header_event", "events/ftrace/print/format"):
        dest = root / "sys/kernel/tracing" / (rel if rel.startswith("events/") else f"events/{rel}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FLEET / kernel / rel, dest)
    write(root, "sys/kernel/tracing/available_events", events)
    write(root, "sys/kernel/tracing/trace_clock", "[local] global counter uptime perf mono mono_raw boot\n")
    write(root, "sys/kernel/tracing/set_event_pid", "")
    write(root, "sys/kernel/tracing/options/event-fork", "0\n")
    write(root, "sys/kernel/tracing/events/sched/sched_switch/filter", "none\n")
    if uprobes:
        write(root, "sys/kernel/tracing/uprobe_events", "")


def make_ascend_host(root: Path) -> None:
    """A host with the real driver loaded, one 910B card, both event sources and the simulator."""
    make_tracefs(root, events="sched:sched_switch\ntask:task_newtask\n" + DRIVER_EVENTS + "ascend:ascend_mem_alloc\n")
    write(root, "sys/kernel/tracing/kprobe_events", "")
    write(root, "proc/self/status", ROOT_CAPS)
    write(
        root,
        "proc/modules",
        "asdrv_trs 1 0 - Live 0x0\nasdrv_trsbase 1 1 asdrv_trs, Live 0x0\next4 1 0 - Live\n",
    )
    write(root, "proc/trs_chan/dev0-ts0/trace_enable", "1\n")
    write(root, "proc/trs_core/ts_inst/dev0-ts0/trace_enable", "1\n")
    write(root, "proc/sys/kernel/unprivileged_bpf_disabled", "2\n")
    write(root, "sys/kernel/btf/vmlinux", "")
    write(root, "sys/bus/pci/devices/0000:81:00.0/vendor", "0x19e5\n")
    write(root, "sys/bus/pci/devices/0000:81:00.0/device", "0xd802\n")
    for irq in (130, 131, 132):
        write(root, f"sys/bus/pci/devices/0000:81:00.0/msi_irqs/{irq}", "msix\n")
    write(root, "sys/bus/pci/devices/0000:81:00.0/dev_id", "4\n")
    write(root, "proc/interrupts", "   CPU0\n"
          " 130:  9  IR-PCI-MSIX-0000:81:00.0  0-edge  cq_update_irq\n"
          " 131:  0  IR-PCI-MSIX-0000:81:00.0  1-edge  trs-mbox-4-0\n"
          " 132:  1  IR-PCI-MSIX-0000:81:00.0  2-edge  dma_done_irq\n"
          "  36:  7  PCI-MSIX-0000:00:01.0  1-edge  virtio1-req.0\n")  # fmt: skip
    write(root, "sys/bus/pci/devices/0000:00:01.0/vendor", "0x8086\n")
    hal = root / "usr/local/Ascend/driver/lib64/driver/libascend_hal.so"
    hal.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(build.ensure_hal_library(), hal)  # a real-ABI libascend_hal.so (the simulator's)
    (root / f"lib/modules/{RELEASE}/build").mkdir(parents=True)
    (root / "proc/config.gz").write_bytes(gzip.compress(b"CONFIG_KPROBES=y\n# CONFIG_X is not set\n"))


def fake_host(root: Path, euid: int = 0, npu_smi: Optional[str] = "/usr/local/bin/npu-smi") -> Host:
    def which(name: str) -> Optional[str]:
        return npu_smi if name == "npu-smi" else None

    def probe() -> Tuple[bool, str]:
        return True, "probed"

    return Host(root=str(root), release=RELEASE, euid=euid, which=which, bcc_probe=probe, bpf_probe=probe,
                state_dir=str(root / "run/npu-trace"))  # fmt: skip


def by_name(checks: list[Check]) -> Dict[str, Check]:
    return {c.name: c for c in checks}


def test_full_ascend_host_is_all_ok(tmp_path: Path) -> None:
    make_ascend_host(tmp_path)
    checks = doctor.run_checks(fake_host(tmp_path))
    assert [c.name for c in checks if not c.ok] == []
    assert doctor.essentials_ok(checks)
    found = by_name(checks)
    assert "0000:81:00.0 (0xd802)" in found["Ascend PCI devices"].detail
    assert "0000:00:01.0" not in found["Ascend PCI devices"].detail
    assert found["driver modules"].detail == "asdrv_trsbase asdrv_trs"
    assert found["driver trace switches"].detail.startswith("2: trs_chan: on dev0-ts0; trs_core: on dev0-ts0")
    assert found["NPU interrupts"].detail == "device 4: 3 (130-132)"
    assert found["kernel scoping"].detail == (
        "--pid: set_event_pid + event-fork; --comm, --device, NPU interrupts: per-event filters"
    )
    assert "CONFIG_KPROBES=y" in found["kprobes"].detail
    assert found["tracefs"].detail == f"mounted at {tmp_path}/sys/kernel/tracing"
    hal = f"{tmp_path}/usr/local/Ascend/driver/lib64/driver/libascend_hal.so"
    assert found["HAL library"].detail == (
        f"{hal} (install path); real HAL ABI (libascend_hal.so prototypes: device in halMemAlloc's flag, structs "
        "read in place) for libascend_hal.so"
    )
    assert found["task layout"].detail == (
        "910B (PCI 19e5:d802 (0000:81:00.0)): task layout stars: stream id (u16) at 4, task id (u16) at 6 "
        "(rtStarsSqeHeader_t, hicann/runtime pkg_inc/runtime/rt_external_stars_define.h)"
    )
    assert found["BPF variant"].detail == (
        f"ringbuf: bpf_probe_read_user, the BPF ring buffer (release {RELEASE} (no {tmp_path}/proc/kallsyms))"
    )


def test_the_variant_an_old_kernel_loads_and_an_unknown_chip(tmp_path: Path) -> None:
    make_ascend_host(tmp_path)
    write(tmp_path, "sys/bus/pci/devices/0000:81:00.0/device", "0xd806\n")  # a 950: no layout known
    write(tmp_path, "proc/kallsyms", "ffffffff81000000 T _stext\nffffffff814cc020 T bpf_probe_read_str\n")
    host = fake_host(tmp_path, npu_smi=None)
    host.release = "4.19.90-52.22.v2207.ky10.aarch64"
    found = by_name(doctor.run_checks(host))
    assert found["BPF variant"].ok and found["BPF variant"].detail.startswith(
        "legacy (4.x): bpf_probe_read for bpf_probe_read_user; a perf event array for the BPF ring buffer")
    layout = found["task layout"]
    assert not layout.ok and layout.fix == "name the chip: --chip 910|910B|910_93|310P"
    assert layout.detail.endswith("unknown: HAL task calls timed, their stream and task left empty")


def test_the_simulators_hal_at_the_install_path_is_named(tmp_path: Path) -> None:
    from npu_trace.sim import hal_install

    make_ascend_host(tmp_path)
    os.unlink(hal_install.target(str(tmp_path)))
    lib = hal_install.install(build.ensure_hal_library(), str(tmp_path))
    detail = by_name(doctor.run_checks(fake_host(tmp_path)))["HAL library"].detail
    said = f"; {lib.path} is the simulator's (npu-trace sim load --hal-abi real; sim unload removes it)"
    assert detail.endswith(said)


def test_hal_that_is_no_elf_is_named(tmp_path: Path) -> None:
    make_ascend_host(tmp_path)
    write(tmp_path, "usr/local/Ascend/driver/lib64/driver/libascend_hal.so", "")
    check = by_name(doctor.run_checks(fake_host(tmp_path)))["HAL library"]
    assert not check.ok and "ABI unknown: cannot read ELF symbols of" in check.detail and "not an ELF" in check.detail
    assert check.fix == "name the real library: --bpf --hal PATH"


def test_empty_host_fails_essentials_with_fixes(tmp_path: Path) -> None:
    (tmp_path / "sys/kernel/tracing").mkdir(parents=True)
    checks = doctor.run_checks(fake_host(tmp_path, euid=1000, npu_smi=None))
    found = by_name(checks)
    assert not doctor.essentials_ok(checks)
    assert "mount -t tracefs nodev /sys/kernel/tracing" in found["tracefs"].fix
    assert found["privileges"].mark == "!!" and "root" in found["privileges"].fix
    # neither event source: both flagged essential
    assert found["uprobe events"].mark == "!!"
    assert found["driver tracepoints"].mark == "!!"
    assert found["simulator"].mark == "--" and found["simulator"].fix == "npu-trace sim load"
    assert found["threads started later"].mark == "--" and "own process" in found["threads started later"].detail
    assert all(c.fix for c in checks if not c.ok)


def test_driver_tracepoints_alone_are_enough(tmp_path: Path) -> None:
    make_tracefs(tmp_path, events=DRIVER_EVENTS, uprobes=False)
    write(tmp_path, "proc/self/status", ROOT_CAPS)
    checks = doctor.run_checks(fake_host(tmp_path))
    found = by_name(checks)
    assert doctor.essentials_ok(checks)
    assert found["uprobe events"].mark == "--"
    assert found["driver tracepoints"].detail.startswith("5 events")


def test_uprobes_alone_are_enough_and_tracefs_under_debugfs(tmp_path: Path) -> None:
    write(tmp_path, "sys/kernel/debug/tracing/available_events", "ascend:ascend_mem_alloc\n")
    write(tmp_path, "sys/kernel/debug/tracing/uprobe_events", "")
    checks = doctor.run_checks(fake_host(tmp_path))
    found = by_name(checks)
    assert doctor.essentials_ok(checks)
    assert found["tracefs"].detail.endswith("sys/kernel/debug/tracing")
    assert found["simulator"].ok
    assert not found["trace clock"].ok  # no trace_clock file in this tree: reported, not raised


def test_non_root_with_cap_sys_admin_is_privileged(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/status", "CapEff:\t0000000000200000\n")
    check = doctor.check_privileges(fake_host(tmp_path, euid=1000))
    assert check.ok and "CAP_SYS_ADMIN" in check.detail and "CAP_BPF" not in check.detail
    write(tmp_path, "proc/self/status", NO_CAPS)
    assert not doctor.check_privileges(fake_host(tmp_path, euid=1000)).ok


def test_trace_switches_off_are_fine_npu_trace_turns_them_on(tmp_path: Path) -> None:
    write(tmp_path, "proc/trs_chan/dev0-ts0/trace_enable", "1\n")
    write(tmp_path, "proc/trs_chan/dev1-ts0/trace_enable", "0\n")
    check = doctor.check_trace_switches(fake_host(tmp_path))
    assert check.ok and check.detail.startswith("2: trs_chan: on dev0-ts0, off dev1-ts0 (npu-trace turns on")


def test_kprobes_config_from_boot(tmp_path: Path) -> None:
    write(tmp_path, f"boot/config-{RELEASE}", "# CONFIG_KPROBES is not set\n")
    check = doctor.check_kprobes(fake_host(tmp_path), None)
    assert not check.ok and "CONFIG_KPROBES=n" in check.detail
    assert "unknown" in doctor.check_kprobes(fake_host(tmp_path / "none"), None).detail


def test_missing_headers_and_bcc(tmp_path: Path) -> None:
    host = fake_host(tmp_path)
    host.bcc_probe = lambda: (False, "ModuleNotFoundError: No module named 'bcc'")
    assert doctor.check_headers(host).fix == "run scripts/setup"
    bcc = doctor.check_bcc(host)
    assert not bcc.ok and "scripts/setup" in bcc.fix and "No module named" in bcc.detail


def test_parsers() -> None:
    assert doctor.parse_cap_eff(ROOT_CAPS) == 0x1FFFFFFFFFF
    assert doctor.parse_cap_eff("Name: x\n") == 0
    assert doctor.parse_cap_eff("CapEff:\tzz\n") == 0
    assert doctor.parse_kconfig('CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C="s"\n') == {
        "CONFIG_A": "y",
        "CONFIG_C": '"s"',
    }
    assert doctor.parse_modules("a 1 0 - Live\n\nb 2 1 a, Live\n") == ["a", "b"]


def test_text_is_aligned_and_json_serialisable(tmp_path: Path) -> None:
    checks = doctor.run_checks(fake_host(tmp_path))
    lines = doctor.format_text(checks).splitlines()
    marks = [line[:4] for line in lines if not line.startswith("    ")]
    assert len(marks) == len(checks) and set(marks) <= {"ok  ", "--  ", "!!  "}
    detail_column = {line.index(c.detail) for line, c in zip([ln for ln in lines if ln[:2] != "  "], checks)}
    assert len(detail_column) == 1
    obj = json.loads(json.dumps(doctor.to_json_obj(checks, 3, RELEASE)))
    assert obj["exit_code"] == 3 and obj["ok"] is False and len(obj["checks"]) == len(checks)


def test_real_doctor_json_run() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "npu_trace", "doctor", "--json"], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in proc.stderr
    obj = json.loads(proc.stdout)
    assert proc.returncode == obj["exit_code"] and proc.returncode in (0, 3)
    names = {c["name"] for c in obj["checks"]}
    assert {"privileges", "tracefs", "uprobe events", "BPF", "bcc", "simulator"} <= names
    assert all(c["status"] in ("ok", "--", "!!") for c in obj["checks"])


@pytest.mark.privileged
def test_real_doctor_essentials_on_this_host() -> None:
    """Where CI runs (root, tracefs, uprobes) the essentials must be there."""
    checks = doctor.run_checks()
    if not doctor.essentials_ok(checks):
        missing = [f"{c.name}: {c.detail}" for c in checks if c.essential and not c.ok]
        pytest.skip("host lacks essentials: " + "; ".join(missing))
    assert by_name(checks)["tracefs"].ok


def test_corrupt_files_are_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/config.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    write(tmp_path, "sys/kernel/tracing/available_events", "")
    (tmp_path / "sys/kernel/tracing/trace_clock").mkdir()  # reading a directory fails
    checks = by_name(doctor.run_checks(fake_host(tmp_path)))
    assert "unknown" in checks["kprobes"].detail
    assert not checks["trace clock"].ok


def test_the_page_walker_line() -> None:
    """Here the extension is built (scripts/setup installs gcc); elsewhere the pure-Python walker is named."""
    compiled = "compiled (npu_trace.ftrace._walk, npu_trace.pipeline._order, npu_trace.detectors._spikes)"
    assert doctor.check_walker() == Check("page walker", True, compiled)
    for slow, named in ((doctor.check_walker("python"), "_walk"), (doctor.check_walker("c", "python"), "_order"),
                        (doctor.check_walker("c", "c", "python"), "_spikes")):  # fmt: skip
        assert slow.mark == "--" and f"pure Python for {named}:" in slow.detail and "gcc" in slow.fix
    compiled = "compiled (npu_trace.export._wire, _rows, _lanes, _texts, _handlers, _flows)"
    assert doctor.check_assembler() == Check("export assembler", True, compiled)
    for slow, named in ((doctor.check_assembler("python"), "_wire"), (doctor.check_assembler("c", "python"), "_rows"),
                        (doctor.check_assembler("c", "c", "python"), "_lanes"),
                        (doctor.check_assembler("c", "c", "c", "python"), "_texts"),
                        (doctor.check_assembler("c", "c", "c", "c", "python"), "_handlers"),
                        (doctor.check_assembler("c", "c", "c", "c", "c", "python"), "_flows")):  # fmt: skip
        assert slow.mark == "--" and f"pure Python for {named}:" in slow.detail and "gcc" in slow.fix


def test_the_text_lines_line() -> None:
    assert doctor.check_lines() == Check("text lines", True, "compiled (npu_trace.sinks._lines)")
    slow = doctor.check_lines("python")
    assert slow.mark == "--" and "pure Python" in slow.detail and "gcc" in slow.fix


def test_the_ring_buffer_layout_of_a_tested_kernel(tmp_path: Path) -> None:
    make_tracefs(tmp_path, kernel="centos-7.6-4.14-aarch64")
    found = by_name(doctor.run_checks(fake_host(tmp_path)))["ring-buffer layout"]
    assert found.ok
    assert found.detail == ("as tested on centos-7.6-4.14-aarch64: 65536 B pages; 8-byte commit word; "
                            "no time_stamp type (before 4.17); unsigned char")  # fmt: skip


def test_an_untested_layout_is_named_and_an_unreadable_record_header_is_essential(tmp_path: Path) -> None:
    make_tracefs(tmp_path)
    events = tmp_path / "sys/kernel/tracing/events"
    page = (events / "header_page").read_text().replace("size:4080", "size:16368")  # 16 KiB pages
    (events / "header_page").write_text(page)
    found = by_name(doctor.run_checks(fake_host(tmp_path)))["ring-buffer layout"]
    assert (found.mark, found.detail) == ("--", "untested: page: 16384 B pages (tested: 4096 B pages | 65536 B pages)")
    (events / "header_event").write_text((events / "header_event").read_text().replace("== 30", "== 28"))
    found = by_name(doctor.run_checks(fake_host(tmp_path)))["ring-buffer layout"]
    assert found.mark == "!!" and "unlike the decoder's: time_extend 28" in found.detail
    assert "cannot read" in found.fix


def test_a_missing_header_is_said_not_raised(tmp_path: Path) -> None:
    make_tracefs(tmp_path)
    (tmp_path / "sys/kernel/tracing/events/header_event").unlink()
    found = by_name(doctor.run_checks(fake_host(tmp_path)))["ring-buffer layout"]
    assert not found.ok and "header_event" in found.detail


def test_the_checks_that_need_tracefs_point_at_the_tracefs_line() -> None:
    """As a user who cannot read a mounted tracefs, doctor's tracefs line said 'run as root', the lines that
    need it 'mount tracefs first': a fix for a problem the host does not have."""
    from npu_trace import capabilities as caps

    for check in (caps.check_trace_clock(None), caps.check_uprobes(None), caps.check_scoping(None),
                  caps.check_kernel_layout(None)):  # fmt: skip
        assert (check.ok, check.detail, check.fix) == (False, "no tracefs", "fix the tracefs line first"), check
