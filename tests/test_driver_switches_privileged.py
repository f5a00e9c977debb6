"""The driver's trace switches through real sessions (real tracefs, a fake procfs root with the driver's layout):
`--profile ascend` turns them on, every exit path puts them back (normal end, error, SIGINT/SIGTERM/SIGHUP), and
a run killed with SIGKILL is put back by the next session's start and by `npu-trace cleanup`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sources.driver_switches import PROCFS_ENV, STATE_ENV, DriverSwitches, SwitchState
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.tracefs_source import TracefsSession
from test_driver_switches import LAYOUT, make_proc, values

CLI = [sys.executable, "-m", "npu_trace"]
pytestmark = pytest.mark.privileged


def host_env(tmp_path: Path) -> Tuple[Path, SwitchState, Dict[str, str]]:
    proc = make_proc(tmp_path)
    state = SwitchState(str(tmp_path / "run"))
    return proc, state, {**os.environ, PROCFS_ENV: str(proc), STATE_ENV: state.directory}


def start_stream(env: Dict[str, str]) -> Tuple[subprocess.Popen, List[str]]:
    """`stream --profile ascend` (the uevent channel keeps it running on a host without the driver's events),
    read until it traces."""
    # SIGHUP as a terminal's session has it: a run under nohup (SIGHUP ignored, which a stream keeps ignoring on
    # purpose) would otherwise hand the ignored disposition down, and the SIGHUP case could not end the stream
    proc = subprocess.Popen([*CLI, "stream", "--profile", "ascend", "--channels", "uevent"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))  # fmt: skip
    assert proc.stderr is not None
    said: List[str] = []
    while not said or "tracing" not in said[-1]:
        line = proc.stderr.readline()
        assert line, f"stream ended before tracing: {said}"
        said.append(line)
    return proc, said


def killed_stream(env: Dict[str, str], proc_root: Path) -> int:
    run, said = start_stream(env)
    assert any("turned on 3 driver trace switches" in line for line in said), said
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert set(values(proc_root).values()) == {"1\n"}
    return run.pid


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_stream_puts_the_switches_back(tmp_path: Path, sig: int) -> None:
    proc_root, state, env = host_env(tmp_path)
    run, _ = start_stream(env)
    assert set(values(proc_root).values()) == {"1\n"}
    run.send_signal(sig)
    try:
        _, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # where it waits: its threads' stacks (SIGUSR1), then it is killed
        run.send_signal(signal.SIGUSR1)
        try:
            _, err = run.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            run.kill()
            _, err = run.communicate()
        raise AssertionError(f"stream did not end within 60 s of signal {sig}:\n{err}") from None
    assert run.returncode == 0 and "loss:" in err
    assert values(proc_root) == LAYOUT and not state.exists()


def test_a_session_that_fails_puts_the_switches_back(tmp_path: Path) -> None:
    proc_root, state, _ = host_env(tmp_path)
    session = TracefsSession(optional=("trs_chan:*", "trs_core:*"), allow_none=True, tag="switches",
                             switches=DriverSwitches(root=str(proc_root), state=state))  # fmt: skip
    with pytest.raises(RuntimeError, match="a sink failed"), LiveTrace(session):
        assert set(values(proc_root).values()) == {"1\n"}
        raise RuntimeError("a sink failed")
    assert values(proc_root) == LAYOUT and not state.exists()


def test_the_next_session_puts_back_what_a_killed_run_left(tmp_path: Path) -> None:
    proc_root, state, env = host_env(tmp_path)
    pid = killed_stream(env, proc_root)
    session = TracefsSession(optional=("trs_core:*",), allow_none=True, tag="next",
                             switches=DriverSwitches(root=str(proc_root), state=state))  # fmt: skip
    with session:
        restored = [n for n in session.notes if n.startswith("restored driver trace switch")]
        assert len(restored) == 4 and all(f"(left by pid {pid})" in n for n in restored)
        assert values(proc_root)["trs_chan/dev0-ts0/trace_enable"] == "0\n"  # not this session's: back
        assert values(proc_root)["trs_core/ts_inst/dev0-ts0/trace_enable"] == "1\n"  # this session's own
    assert values(proc_root) == LAYOUT and not state.exists()
    assert f"npu-trace-{pid}" not in Tracefs.find().instance_names()


def test_cleanup_puts_back_what_a_killed_run_left(tmp_path: Path) -> None:
    proc_root, state, env = host_env(tmp_path)
    pid = killed_stream(env, proc_root)
    done = subprocess.run([*CLI, "cleanup"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(f"(left by pid {pid})") == 4 and f"removed tracefs instance npu-trace-{pid}" in done.stderr
    assert values(proc_root) == LAYOUT and not state.exists()
    again = subprocess.run([*CLI, "cleanup"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to clean" in again.stderr
