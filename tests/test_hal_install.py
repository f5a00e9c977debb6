"""Offline (in a temporary root): the simulator's real-ABI libascend_hal.so put where the driver installs its own
and taken away again (npu_trace.sim.hal_install): never over a file it did not put there or one changed since,
and the directories it made removed with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_trace.errors import SimulatorError
from npu_trace.sim import hal_install

TARGET = "usr/local/Ascend/driver/lib64/driver/libascend_hal.so"


@pytest.fixture
def lib(tmp_path: Path) -> str:
    path = tmp_path / "build" / "libascend_hal.so"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF the simulator's library")
    return str(path)


def test_install_marks_it_and_uninstall_leaves_the_tree_as_found(tmp_path: Path, lib: str) -> None:
    root = tmp_path / "root"
    (root / "usr/local").mkdir(parents=True)
    got = hal_install.install(lib, str(root))
    assert got.changed and got.path == str(root / TARGET)
    assert (root / TARGET).read_bytes() == Path(lib).read_bytes() and (root / TARGET).stat().st_mode & 0o777 == 0o755
    mark = json.loads(Path(got.path + ".npu-trace-sim").read_text())
    made = ("usr/local/Ascend/driver/lib64/driver", "usr/local/Ascend/driver/lib64", "usr/local/Ascend/driver",
            "usr/local/Ascend")  # fmt: skip
    assert mark["made_dirs"] == [str(root / d) for d in made]
    assert not hal_install.install(lib, str(root)).changed  # the same library: nothing to do
    assert hal_install.uninstall(str(root)) == got.path
    assert sorted(p.name for p in (root / "usr/local").iterdir()) == []  # every directory it made is gone
    assert hal_install.uninstall(str(root)) is None


def test_a_file_it_did_not_put_there_is_never_replaced(tmp_path: Path, lib: str) -> None:
    driver = tmp_path / TARGET
    driver.parent.mkdir(parents=True)
    driver.write_bytes(b"the driver's own")
    with pytest.raises(SimulatorError, match=r"exists and is not the simulator's .*refusing to replace it"):
        hal_install.install(lib, str(tmp_path))
    assert driver.read_bytes() == b"the driver's own" and hal_install.uninstall(str(tmp_path)) is None


def test_a_changed_file_is_neither_replaced_nor_removed(tmp_path: Path, lib: str) -> None:
    got = hal_install.install(lib, str(tmp_path))
    Path(got.path).write_bytes(b"someone else's since")
    with pytest.raises(SimulatorError, match="changed since the simulator installed it: refusing to replace it"):
        hal_install.install(lib, str(tmp_path))
    with pytest.raises(SimulatorError, match="changed since the simulator installed it: not removing it"):
        hal_install.uninstall(str(tmp_path))
    assert Path(got.path).read_bytes() == b"someone else's since"


def test_a_newer_build_replaces_its_own_and_a_lost_file_is_put_back(tmp_path: Path, lib: str) -> None:
    first = hal_install.install(lib, str(tmp_path))
    Path(lib).write_bytes(b"\x7fELF a newer build")
    second = hal_install.install(lib, str(tmp_path))
    assert second.changed and second.sha256 != first.sha256 and second.made_dirs == first.made_dirs
    Path(second.path).unlink()
    assert hal_install.install(lib, str(tmp_path)).changed
    assert Path(second.path).read_bytes() == b"\x7fELF a newer build"
    assert hal_install.uninstall(str(tmp_path)) == second.path and not (tmp_path / "usr").exists()


def test_an_unreadable_mark_is_an_error(tmp_path: Path) -> None:
    mark = Path(hal_install.target(str(tmp_path)) + ".npu-trace-sim")
    mark.parent.mkdir(parents=True)
    mark.write_text("{not json")
    with pytest.raises(SimulatorError, match="unreadable ownership mark"):
        hal_install.installed(str(tmp_path))
