"""The driver's trace switches on a fake procfs root laid out like the Ascend driver's (/proc/trs_chan/dev<D>-ts<T>/,
/proc/trs_core/ts_inst/dev<D>-ts<T>/): turned on for the traced devices, put back on every exit path, a killed
run's put back by the next session and by cleanup, and doctor's view of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import pytest

from npu_trace import capabilities as doctor
from npu_trace.device.switches import Switch, parse_value, summary, switch_of, wanted, write_text
from npu_trace.errors import SourceError
from npu_trace.sources import driver_switches as ds
from npu_trace.sources.driver_switches import DriverSwitches, Owner, SwitchState, restore_stale, this_process
from npu_trace.sources.tracefs_source import driver_systems

BOTH = ("trs_chan", "trs_core")
# the layout of a two-device 910B host with one TS each, dev1's trs_core switch on already (someone's echo 1)
LAYOUT = {
    "trs_chan/dev0-ts0/trace_enable": "0\n",
    "trs_chan/dev1-ts0/trace_enable": "0\n",
    "trs_core/ts_inst/dev0-ts0/trace_enable": "0\n",
    "trs_core/ts_inst/dev1-ts0/trace_enable": "1\n",
}


def make_proc(root: Path, layout: Dict[str, str] = LAYOUT) -> Path:
    proc = root / "proc"
    for rel, text in layout.items():
        (proc / rel).parent.mkdir(parents=True, exist_ok=True)
        (proc / rel).write_text(text)
    # what else lives there (not switches): a channel's file beside them, a TS instance's summary
    for rel in ("trs_chan/dev0-ts0/chan0-rts", "trs_core/ts_inst/dev0-ts0/summary"):
        (proc / rel).parent.mkdir(parents=True, exist_ok=True)
        (proc / rel).write_text("x\n")
    return proc


def values(proc: Path) -> Dict[str, str]:
    return {rel: (proc / rel).read_text() for rel in LAYOUT if (proc / rel).exists()}


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Tuple[Path, SwitchState]]:
    yield make_proc(tmp_path), SwitchState(str(tmp_path / "run"))


def switches(proc: Path, state: SwitchState, owner: Optional[Owner] = None) -> DriverSwitches:
    return DriverSwitches(root=str(proc), state=state, owner=owner)


# ---- pure ------------------------------------------------------------------------------------------------
def test_switch_paths_values_and_summary() -> None:
    assert switch_of("trs_chan/dev3-ts1/trace_enable") == Switch("trs_chan", 3, 1, "trs_chan/dev3-ts1/trace_enable")
    assert switch_of("/trs_core/ts_inst/dev12-ts0/trace_enable").dev == 12  # type: ignore[union-attr]
    for rel in ("trs_core/dev1-ts0/trace_enable", "trs_chan/dev1/trace_enable", "trs_chan/dev0-ts0/summary",
                "svm/dev0-ts0/trace_enable"):  # fmt: skip
        assert switch_of(rel) is None
    assert [parse_value(t) for t in ("1\n", "0", " 1 \n", "2\n", "", "on")] == ["1", "0", "1", None, None, None]
    assert write_text("1") == "1\n" and len(write_text("0")) == 2  # the driver takes exactly two bytes
    with pytest.raises(ValueError):
        write_text("2")
    chan = [switch_of(f"trs_chan/dev{d}-ts0/trace_enable") for d in (1, 0, 2)]
    assert [s.dev for s in wanted(chan, ("trs_chan",), (2, 0))] == [0, 2]  # type: ignore[arg-type, union-attr]
    assert wanted(chan, ("trs_core",)) == ()  # type: ignore[arg-type]
    states = [(chan[0], "1"), (chan[1], "0"), (chan[2], None)]
    assert summary(states) == "trs_chan: on dev1-ts0, off dev0-ts0, unreadable dev2-ts0"  # type: ignore[arg-type]


def test_which_systems_a_sessions_events_need() -> None:
    assert driver_systems(["trs_chan:*", "trs_core:*", "irq:irq_handler_entry"]) == BOTH
    assert driver_systems(["trs_core:logic_cqe"]) == ("trs_core",)
    assert driver_systems(["trs_chan"]) == ("trs_chan",)  # a bare system name
    assert driver_systems(["trs_*:*"]) == BOTH
    assert driver_systems(["ascend:*", "irq:*", "sqe"]) == ("trs_chan",)  # a bare event name, in any system
    assert driver_systems(["ascend:*", "syscalls:*"]) == ()


# ---- a session's switches ----------------------------------------------------------------------------------
def test_turned_on_for_the_traced_systems_and_put_back(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    before = values(proc)
    sw = switches(proc, state)
    report = sw.turn_on(BOTH)
    assert [s.label for s in report.turned_on] == ["trs_chan dev0-ts0", "trs_chan dev1-ts0", "trs_core dev0-ts0"]
    assert [s.label for s in report.already_on] == ["trs_core dev1-ts0"] and not report.failed
    assert set(values(proc).values()) == {"1\n"}
    recorded = json.loads(Path(state.path).read_text())["switches"]
    assert {os.path.relpath(p, proc): e["saved"] for p, e in recorded.items()} == {
        rel: text.strip() for rel, text in before.items()}  # fmt: skip
    assert all(e["holders"] == [this_process().to_json()] for e in recorded.values())
    assert sw.restore() == [] and sw.restore() == []  # idempotent
    assert values(proc) == before  # the one found on stays on
    assert not state.exists()


def test_only_the_traced_devices_and_systems(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    sw = switches(proc, state)
    report = sw.turn_on(("trs_chan",), devices=(1,))
    assert [s.label for s in report.held] == ["trs_chan dev1-ts0"]
    assert values(proc)["trs_chan/dev0-ts0/trace_enable"] == "0\n"
    assert values(proc)["trs_core/ts_inst/dev0-ts0/trace_enable"] == "0\n"
    sw.restore()
    assert values(proc) == LAYOUT


def test_no_driver_no_switches_nothing_recorded(tmp_path: Path) -> None:
    state = SwitchState(str(tmp_path / "run"))
    report = switches(tmp_path / "proc", state).turn_on(BOTH)
    assert report.held == [] and report.failed == []
    assert not os.path.exists(state.directory)  # nothing to remember: not even the directory


def test_a_switch_that_does_not_read_as_0_or_1_is_left_alone(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {"trs_chan/dev0-ts0/trace_enable": "enabled\n", **dict(list(LAYOUT.items())[1:2])})
    state = SwitchState(str(tmp_path / "run"))
    report = switches(proc, state).turn_on(("trs_chan",))
    assert [(s.label, why) for s, why in report.failed] == [("trs_chan dev0-ts0", "does not read as 0 or 1")]
    assert (proc / "trs_chan/dev0-ts0/trace_enable").read_text() == "enabled\n"
    assert [os.path.relpath(p, proc) for p in state.read()] == ["trs_chan/dev1-ts0/trace_enable"]


def test_a_concurrent_session_keeps_them_on_until_the_last_one_leaves(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first, second = switches(proc, state), switches(proc, state, owner=Owner.of(sleeper.pid))
        first.turn_on(BOTH)
        second.turn_on(("trs_chan",))
        first.restore()
        assert values(proc)["trs_chan/dev0-ts0/trace_enable"] == "1\n"  # the second session still traces them
        assert values(proc)["trs_core/ts_inst/dev0-ts0/trace_enable"] == "0\n"  # only the first one held this
        assert restore_stale(state) == ([], [])  # the second one is alive: nothing is stale
        second.restore()
        assert values(proc) == LAYOUT and not state.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_hot_reset_recreates_a_switch_off_and_the_session_turns_it_on_again(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    sw = switches(proc, state)
    sw.turn_on(BOTH)
    now = ds.time.monotonic()
    gone = proc / "trs_chan/dev1-ts0"
    (gone / "trace_enable").unlink()
    gone.rmdir()  # the device is removed ...
    assert sw.refresh(now + 5).turned_on == []
    gone.mkdir()
    (gone / "trace_enable").write_text("0\n")  # ... and re-probed, its switch off
    assert sw.refresh(now + 5.1).turned_on == []  # at most once a second
    assert [s.label for s in sw.refresh(now + 7).turned_on] == ["trs_chan dev1-ts0"]
    new = proc / "trs_chan/dev2-ts0"
    new.mkdir()
    (new / "trace_enable").write_text("0\n")  # a device that appears during the session
    assert [s.label for s in sw.refresh(now + 9).turned_on] == ["trs_chan dev2-ts0"] and sw.refreshed == 2
    sw.restore()
    assert values(proc) == LAYOUT and (new / "trace_enable").read_text() == "0\n"


def test_a_switch_that_cannot_be_put_back_stays_recorded_for_cleanup(
    host: Tuple[Path, SwitchState], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, state = host
    sw = switches(proc, state)
    sw.turn_on(("trs_chan",))
    monkeypatch.setattr(ds, "write_switch", lambda path, value: "permission denied (root is needed, ...)")
    problems = sw.restore()
    assert len(problems) == 2 and "could not be put back to 0: permission denied" in problems[0]
    assert len(state.read()) == 2  # kept: this process is gone by the time cleanup retries
    monkeypatch.undo()
    dead = Owner(this_process().pid, this_process().start + 1)  # this pid, another start: a dead run's
    with state.locked() as st:
        assert st is not None
        for path in st.switches:
            st.set_holders(path, [dead])
        st.save()
    restored, problems = restore_stale(state)
    assert len(restored) == 2 and problems == [] and values(proc) == LAYOUT


def test_a_removed_device_needs_nothing_put_back(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    sw = switches(proc, state)
    sw.turn_on(("trs_chan",), devices=(0,))
    (proc / "trs_chan/dev0-ts0/trace_enable").unlink()
    assert sw.restore() == [] and not state.exists()


def test_a_damaged_state_file_is_said_not_guessed(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    os.makedirs(state.directory)
    Path(state.path).write_text('{"version": 1, "switches": ')
    with pytest.raises(SourceError, match=r"is not npu-trace's .* then remove it"):
        switches(proc, state).turn_on(BOTH)
    assert values(proc) == LAYOUT


# ---- a run killed with SIGKILL ---------------------------------------------------------------------------
KILLED_RUN = textwrap.dedent(
    """
    import sys, time
    from npu_trace.sources.driver_switches import DriverSwitches, SwitchState
    sw = DriverSwitches(root=sys.argv[1], state=SwitchState(sys.argv[2]))
    sw.turn_on(("trs_chan", "trs_core"))
    print("on", flush=True)
    time.sleep(60)
    """
)


def killed_run(proc: Path, state: SwitchState) -> int:
    run = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(proc), state.directory], stdout=subprocess.PIPE,
                           text=True)  # fmt: skip
    assert run.stdout is not None and run.stdout.readline() == "on\n"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert set(values(proc).values()) == {"1\n"}  # left on: nothing ran on the way out
    return run.pid


def test_a_killed_run_is_put_back_by_the_next_session(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    pid = killed_run(proc, state)
    assert doctor.check_trace_switches(fake_host(proc.parent, state)).fix.startswith("npu-trace cleanup")
    restored, problems = switches(proc, state).restore_stale()
    assert problems == [] and len(restored) == 4 and f"(left by pid {pid})" in restored[0]
    assert values(proc) == LAYOUT and not state.exists()


def test_a_killed_run_is_put_back_under_a_live_sessions_feet_only_where_no_one_holds(
    host: Tuple[Path, SwitchState],
) -> None:
    """The next session turns on its own switches: those it traces stay on, the killed run's others go back."""
    proc, state = host
    killed_run(proc, state)
    sw = switches(proc, state)
    sw.turn_on(("trs_chan",))
    restored, _ = sw.restore_stale()
    assert len(restored) == 2  # trs_core's; trs_chan's are held by this session now
    assert values(proc)["trs_chan/dev0-ts0/trace_enable"] == "1\n"
    assert values(proc)["trs_core/ts_inst/dev0-ts0/trace_enable"] == "0\n"
    sw.restore()
    assert values(proc) == LAYOUT and not state.exists()


# ---- doctor --------------------------------------------------------------------------------------------------
def fake_host(root: Path, state: SwitchState) -> doctor.Host:
    return doctor.Host(root=str(root), state_dir=state.directory)


def test_doctor_lists_the_switches_by_state(host: Tuple[Path, SwitchState]) -> None:
    proc, state = host
    check = doctor.check_trace_switches(fake_host(proc.parent, state))
    assert check.ok and check.detail.startswith(
        "4: trs_chan: off dev0-ts0 dev1-ts0; trs_core: on dev1-ts0, off dev0-ts0 (npu-trace turns on")
    sw = switches(proc, state)
    sw.turn_on(BOTH)
    check = doctor.check_trace_switches(fake_host(proc.parent, state))
    assert check.ok and "trs_chan: on dev0-ts0 dev1-ts0; trs_core: on dev0-ts0 dev1-ts0" in check.detail
    sw.restore()


def test_doctor_without_the_driver(tmp_path: Path) -> None:
    check = doctor.check_trace_switches(fake_host(tmp_path, SwitchState(str(tmp_path / "run"))))
    assert not check.ok and check.detail == "no /proc/trs_chan or /proc/trs_core switches"
