"""The simulator's side channels next to the executor (unprivileged: /dev/kmsg and the sysfs uevent file replaced
by plain files), the t0 the runner hands them, and `npu-trace sim run`'s options."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from npu_trace import cli
from npu_trace.device.npusmi import parse_fields
from npu_trace.sim import build, side_channels
from npu_trace.sim.runner import start
from npu_trace.sim.scenarios import plan

# runs the simulator's executor: while a privileged test has its uprobes registered, these calls would land in
# that test's trace (tests/conftest.py: the host group)
pytestmark = pytest.mark.host

MS = 1_000_000


@pytest.fixture(scope="module")
def binary() -> str:
    if not (shutil.which("gcc") or shutil.which("cc")):
        pytest.skip("no C compiler")
    return build.ensure_built()


def test_not_root_turns_kmsg_and_uevents_off_with_one_note(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(side_channels, "is_root", lambda: False)
    side = side_channels.SideChannels(npu_smi_dir=str(tmp_path))
    assert side.notes == ["not root: the simulator's kmsg and uevent channel(s) are off"]
    assert (side.kmsg_on, side.uevents_on, side.smi_dir) == (False, False, str(tmp_path))


def test_unwritable_paths_turn_their_channel_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(side_channels, "is_root", lambda: True)
    side = side_channels.SideChannels(npu_smi=False, kmsg_path=str(tmp_path / "no" / "kmsg"),
                                 uevent_path=str(tmp_path / "no" / "uevent"))  # fmt: skip
    assert len(side.notes) == 2 and not side.kmsg_on and not side.uevents_on and side.smi_dir is None


def _plain_files(tmp_path: Path) -> Dict[str, str]:
    paths = {"kmsg_path": str(tmp_path / "kmsg"), "uevent_path": str(tmp_path / "uevent")}
    for p in paths.values():
        Path(p).touch()
    return paths


def test_run_starts_the_channels_at_the_executors_t0(
    binary: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(side_channels, "is_root", lambda: True)
    files = _plain_files(tmp_path)
    side = side_channels.SideChannels(npu_smi_dir=str(tmp_path / "bin"), kmsg_path=files["kmsg_path"],
                                 uevent_path=files["uevent_path"])  # fmt: skip
    run = start("ecc-reset", 1, 0.5, 300, 1, binary=binary, channels=side)
    truth = run.wait(timeout=60)
    t0 = truth["t0_ns"]
    # the executor took t0 after our close of its plan FIFO: its actions can't start earlier than planned from it
    assert t0 <= truth["t0_bound_ns"] < t0 + 50 * MS
    ch = truth["channels"]
    assert (ch["t0_ns"], ch["pid"], ch["notes"]) == (t0, run.pid, [])
    actions = plan("ecc-reset", 1, 0.5, 300, 1)
    assert ch["kmsg"]["written"] == len(ch["kmsg"]["lines"]) == len(side_channels.schedule(actions, 0))
    assert ch["uevent"]["written"] == len(ch["uevent"]["events"]) == 6
    for item in ch["kmsg"]["lines"] + ch["uevent"]["events"]:
        assert item["written_ns"] >= item["t_ns"]
    assert [e["step"] for e in ch["uevent"]["events"]] == list(side_channels.UEVENT_STEPS)
    assert side.uevent is not None and Path(side.uevent_path).read_text() == side.uevent.texts[-1]
    smi = ch["npu_smi"]
    assert [c["ce"] for c in smi["ecc_climb"]] == [1, 3, 7, 15, 31, 63, 127, 255, 255]
    uce = next(a for a in actions if a.func == "dms_event_report" and a.args[3] == 1)
    assert smi["temp_peak"] == [{"t_ns": t0 + uce.t_ns, "dev": 0, "temp_c": 96, "hbm_temp_c": 96}]
    out = subprocess.run([smi["script"], "info", "-t", "health", "-i", "0", "-c", "0"], capture_output=True,
                         text=True, timeout=30, check=True).stdout  # fmt: skip
    assert parse_fields(out)["health"] == "OK"  # after the run: the final state


def _cli(args: Any, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["sim", "run", "--scenario", "ecc-reset", "--duration", "0.3", "--no-load", *args]) == 0
    return capsys.readouterr().err


def test_cli_no_channels(binary: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _cli(["--no-channels", "--truth", str(tmp_path / "t.json")], capsys)
    assert "fake npu-smi" not in err and "side channels" not in err
    assert "channels" not in json.loads((tmp_path / "t.json").read_text())


def test_cli_not_root_notes_once_and_serves_npu_smi(
    binary: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(side_channels, "is_root", lambda: False)
    smi_dir = tmp_path / "bin"
    err = _cli(["--npu-smi-dir", str(smi_dir), "--truth", str(tmp_path / "t.json")], capsys)
    lines = err.splitlines()
    assert [ln for ln in lines if ln.startswith("npu-trace sim run:")] == [
        "npu-trace sim run: not root: the simulator's kmsg and uevent channel(s) are off"]  # fmt: skip
    assert f"fake npu-smi: {smi_dir}/npu-smi (export PATH={smi_dir}:$PATH)" in lines
    assert "Traceback" not in err
    ch = json.loads((tmp_path / "t.json").read_text())["channels"]
    assert "kmsg" not in ch and "uevent" not in ch and ch["npu_smi"]["script"] == str(smi_dir / "npu-smi")
    assert (smi_dir / "npu-smi.json").exists()


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "executor"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "body,words",
    [
        ("echo no plan for me >&2; exit 2", ["before reading its plan", "no plan for me"]),
        (
            '[ "$1" = -m ] && shift 2; head -c 10 "$1" >/dev/null; echo gave up >&2; exit 3',
            ["stopped reading its plan", "gave up"],
        ),
    ],
)
def test_an_executor_that_fails_on_its_plan_is_a_clear_error(tmp_path: Path, body: str, words: Any) -> None:
    from npu_trace.errors import SimulatorError

    with pytest.raises(SimulatorError) as info:
        start("steady", 1, 5.0, 2000, 2, binary=_script(tmp_path, body))  # a plan far larger than a pipe
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("scenario", ["ecc-reset", "fragmentation"])
def test_the_application_log_holds_what_the_parser_reads_back(scenario: str, tmp_path: Path) -> None:
    from npu_trace.device.applog import AppLogParser

    actions = plan(scenario, 1, 6.0, 200, 1)
    log = side_channels.AppLogChannel(actions, str(tmp_path / "app.log"))
    assert log.reports, "the scenario's driver errors give application reports"
    log.start(time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 3600 * 10**9, 4242)  # every planned time has passed
    log.join(timeout=10)
    truth = log.truth(0)
    assert truth["written"] == len(log.reports) and truth["errors"] == 0
    parser = AppLogParser()
    with open(tmp_path / "app.log", encoding="utf-8") as f:
        errors = [e for line in f for e in parser.feed(line)] + parser.flush()
    assert [(e.cls, e.dev, e.pid) for e in errors] == [(r["class"], r["dev"], 4242) for r in truth["reports"]]
    walls = [r["wall_ns"] for r in truth["reports"]]
    assert [e.wall_ns for e in errors] == [w // 1000 * 1000 for w in walls]  # CANN's µs stamp of each write
