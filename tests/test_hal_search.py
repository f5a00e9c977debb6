"""Finding libascend_hal.so as a real host has it (npu_trace.device.hal_library, npu_trace.sources.hal_search),
on fake /proc trees: the copies running processes map (a container's own, through /proc/PID/root), one per
distinct file; the driver's install path when no process maps it; --hal PATH; and how --bpf uses what was found."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest

from npu_trace.device.hal_library import INSTALL_PATHS, is_hal, mapped_paths
from npu_trace.errors import UsageError
from npu_trace.sources.hal_search import HalSearch, find_hal
from npu_trace.sources.options import TraceOptions

DRIVER_HAL = "/usr/local/Ascend/driver/lib64/driver/libascend_hal.so"
STUB = "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/devlib/libascend_hal.so"


def maps_line(path: str, start: int = 0xFFFF90F90000) -> str:
    return f"{start:x}-{start + 0x1000:x} r-xp 00000000 fd:01 1234567                    {path}"


def add_file(root: Path, path: str) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"\x7fELF")


def add_process(proc: Path, pid: int, fs_root: Path, mapped: List[str]) -> None:
    """A process whose root is `fs_root` (a container's, or another) mapping `mapped`."""
    (proc / str(pid)).mkdir(parents=True)
    os.symlink(fs_root, proc / str(pid) / "root")
    lines = [maps_line("/usr/lib/aarch64-linux-gnu/libc.so.6"), "ffff00000000-ffff00001000 rw-p 00000000 00:00 0 "]
    (proc / str(pid) / "maps").write_text("\n".join([*lines, *(maps_line(p) for p in mapped), "[stack]"]) + "\n")


# ---- pure -------------------------------------------------------------------------------------------------------
def test_mapped_paths_each_once_and_never_a_deleted_one() -> None:
    text = "\n".join([
        maps_line(DRIVER_HAL), maps_line(DRIVER_HAL, 0xFFFF90FA0000), maps_line("/opt/libascend_hal.so.2"),
        maps_line("/old/libascend_hal.so (deleted)"), maps_line("/usr/lib/libascend_hal_extra.so"),
        "7ffd0000-7ffd1000 rw-p 00000000 00:00 0                          [stack]", "garbage", "",
    ])  # fmt: skip
    assert mapped_paths(text) == [DRIVER_HAL, "/opt/libascend_hal.so.2"]


def test_is_hal_takes_versions_not_other_libraries() -> None:
    assert is_hal(DRIVER_HAL) and is_hal("/x/libascend_hal.so.1.0")
    assert not is_hal("/x/libascend_hal_stub.so") and not is_hal("/x/libascend_hal.sox")


# ---- the search -------------------------------------------------------------------------------------------------
def test_a_containers_own_copy_is_found_through_its_root_once_for_all_its_processes(tmp_path: Path) -> None:
    proc, container = tmp_path / "proc", tmp_path / "containers/c1"
    add_file(container, DRIVER_HAL)
    add_process(proc, 300, container, [DRIVER_HAL])
    add_process(proc, 301, container, [DRIVER_HAL])
    add_process(proc, 302, tmp_path / "containers/c2", [])  # runs no NPU code
    found = find_hal(proc=str(proc), root=str(tmp_path / "host"))
    assert found.paths == (f"{proc}/300/root{DRIVER_HAL}",)
    assert found.files[0].pids == (300, 301)
    assert found.describe() == f"{proc}/300/root{DRIVER_HAL} (mapped by 2 processes (pid 300 301))"


def test_distinct_copies_are_each_kept_and_the_toolkit_stub_never(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for name in ("c1", "c2"):
        add_file(tmp_path / name, DRIVER_HAL)
        add_file(tmp_path / name, STUB)
    add_process(proc, 10, tmp_path / "c1", [DRIVER_HAL])
    add_process(proc, 20, tmp_path / "c2", [STUB, DRIVER_HAL])
    found = find_hal(proc=str(proc), root=str(tmp_path))
    assert found.paths == (f"{proc}/10/root{DRIVER_HAL}", f"{proc}/20/root{DRIVER_HAL}")
    assert found.stubs == [STUB]


def test_a_process_that_ended_or_hides_its_maps_is_passed_over(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    add_process(proc, 10, tmp_path / "gone", [DRIVER_HAL])  # maps name a file its root no longer has
    (proc / "11").mkdir()  # no maps, no root
    found = find_hal(proc=str(proc), root=str(tmp_path / "host"))
    assert found.files == []
    assert found.looked[0] == "the maps of 2 processes"


def test_without_a_mapping_the_first_install_path_that_exists(tmp_path: Path) -> None:
    host = tmp_path / "host"
    add_file(host, INSTALL_PATHS[1])
    add_file(host, INSTALL_PATHS[2])
    found = find_hal(proc=str(tmp_path / "proc"), root=str(host))
    assert found.paths == (f"{host}{INSTALL_PATHS[1]}",) and found.files[0].how == "install path"
    assert found.looked == ["the maps of 0 processes", *INSTALL_PATHS[:2]]


def test_nothing_found_names_every_place_looked(tmp_path: Path) -> None:
    found = find_hal(proc=str(tmp_path / "proc"), root=str(tmp_path))
    assert found.describe() == ("libascend_hal.so not found (the maps of 0 processes; "
                                + "; ".join(INSTALL_PATHS) + ")")  # fmt: skip


def test_hal_path_given_is_taken_as_it_is() -> None:
    assert find_hal("/opt/hal/libascend_hal.so").paths == ("/opt/hal/libascend_hal.so",)


# ---- --bpf with the ascend profile --------------------------------------------------------------------------------
def args(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(**{"profile": "ascend", "bpf": True, "bpf_binary": None, "channels": "none", **kw})


def test_bpf_uprobes_every_copy_found_and_says_how(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, name in ((10, "c1"), (20, "c2")):
        add_file(tmp_path / name, DRIVER_HAL)
        add_process(proc, pid, tmp_path / name, [DRIVER_HAL])
    options = TraceOptions.from_args(args(), hal=lambda: find_hal(proc=str(proc), root=str(tmp_path)))
    assert (options.bpf_binary, options.hal_more) == (f"{proc}/10/root{DRIVER_HAL}", (f"{proc}/20/root{DRIVER_HAL}",))
    notes: List[str] = []
    config = options.bpf_config(notes.append)
    assert config is not None and config.hal
    assert (config.binary, config.more_binaries) == (options.bpf_binary, options.hal_more)
    assert notes[0].startswith("HAL: ") and "mapped by 1 process (pid 10)" in notes[0]


def test_bpf_without_a_hal_traces_the_rest_and_says_why(tmp_path: Path) -> None:
    options = TraceOptions.from_args(args(), hal=lambda: find_hal(proc=str(tmp_path), root=str(tmp_path)))
    notes: List[str] = []
    config = options.bpf_config(notes.append)
    assert config is not None and not config.hal and config.irq
    assert notes[0].endswith("not found (the maps of 0 processes; " + "; ".join(INSTALL_PATHS)
                             + "): no HAL uprobes (--hal PATH names it)")  # fmt: skip


def test_hal_given_is_not_searched() -> None:
    def never() -> HalSearch:
        raise AssertionError("searched")

    options = TraceOptions.from_args(args(bpf_binary="/opt/libascend_hal.so"), hal=never)
    assert options.bpf_binary == "/opt/libascend_hal.so" and options.hal_found == ""


def test_hal_without_bpf_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--hal"):
        TraceOptions(profile_name="ascend", bpf_binary="/opt/libascend_hal.so")


def test_bpf_task_layout_from_chip_said_once_and_a_bad_chip_refused(tmp_path: Path) -> None:
    lib = tmp_path / "libascend_hal.so"
    lib.write_bytes(b"\x7fELF")  # said only for a library that is there
    options = TraceOptions.from_args(args(bpf_binary=str(lib), chip="310P"))
    notes: List[str] = []
    config = options.bpf_config(notes.append)
    assert config is not None and config.task_layout == "ts"
    assert [n for n in notes if n.startswith("task layout: ")] == [
        "task layout: 310P (--chip 310P): task layout ts: stream id (u16) at 0, task id (u16) at 2 (rtCommand_t, "
        "hicann/runtime src/runtime/core/src/task/inc/hwts.hpp)"
    ]
    with pytest.raises(UsageError, match="unknown chip '950'"):
        TraceOptions(profile_name="ascend", chip="950")
    missing = TraceOptions.from_args(args(bpf_binary=str(tmp_path / "gone.so"), chip="310P"))
    notes.clear()
    assert missing.bpf_config(notes.append) is not None and not [n for n in notes if "task layout" in n]


def test_bpf_alone_is_a_channel_when_no_driver_event_exists() -> None:
    """record --profile ascend --bpf --channels none on a host without the driver traces the HAL, not nothing."""
    session = TraceOptions.from_args(args(bpf_binary="/opt/libascend_hal.so")).make_session(irqs={})
    assert session.allow_none
    assert not TraceOptions.from_args(args(bpf=False)).make_session(irqs={}).allow_none
