"""An export ended by a signal leaves nothing behind: SIGTERM (a service stop, `timeout`) and SIGHUP end it as Ctrl-C
does, the file written beside the output removed, the output untouched, exit 128 + the signal's number."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

CLI = [sys.executable, "-m", "npu_trace"]
RECORDING = os.path.join(os.path.dirname(__file__), "data", "hostctx", "sim-ecc-reset.npt")
TRIES = 5


def partial_files(folder: Path) -> List[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".partial"))


def _hangups_heard() -> None:
    """In the child: SIGHUP at its default action, as a terminal's session has it (a test run started under
    `nohup` passes it on ignored, and the export then keeps it ignored on purpose, as nohup means)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def stopped_mid_export(out: Path) -> Optional[subprocess.Popen[bytes]]:
    """An export of RECORDING to `out`, stopped (SIGSTOP) while its file is partial; None when it ended first (a
    host too slow to stop it between its file's creation and its end)."""
    proc = subprocess.Popen([*CLI, "export", RECORDING, "-o", str(out), "--quiet"], stderr=subprocess.PIPE,
                            preexec_fn=_hangups_heard)  # fmt: skip
    deadline = time.monotonic() + 60
    while not partial_files(out.parent) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGSTOP)
    if proc.poll() is None and partial_files(out.parent):
        return proc  # frozen with its file partial: the signal lands mid-export
    return let_finish(proc, out)


def let_finish(proc: subprocess.Popen[bytes], out: Path) -> None:
    """An export stopped too late for a test: let it finish, and clear what it wrote for the next try."""
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    for name in [*partial_files(out.parent), out.name]:
        (out.parent / name).unlink(missing_ok=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_export_removes_its_partial_file(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "x.pftrace"
    proc = next((p for p in (stopped_mid_export(out) for _ in range(TRIES)) if p is not None), None)
    assert proc is not None, f"the export ended before it could be stopped, {TRIES} times"
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)  # no partial file, no output
    assert b"Traceback" not in err


def children_of(pid: int) -> List[int]:
    mark = f"\nPPid:\t{pid}\n"
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as f:
                if entry.isdigit() and mark in f.read():
                    out.append(int(entry))
        except OSError:
            continue  # not a process, or one that ended meanwhile
    return out


def stopped_with_its_drawing(out: Path) -> Optional[Tuple[subprocess.Popen[bytes], int]]:
    """An export of RECORDING to `out` and its drawing's process (npu_trace.export.apart), both stopped while
    they run, the file still partial; None when the export ended (or put its file in place) before both could
    be seen so."""
    proc = subprocess.Popen([*CLI, "export", RECORDING, "-o", str(out), "--quiet"], stderr=subprocess.PIPE,
                            preexec_fn=_hangups_heard)  # fmt: skip
    deadline, kids = time.monotonic() + 60, []
    while not kids and proc.poll() is None and time.monotonic() < deadline:
        kids = children_of(proc.pid)
    os.kill(proc.pid, signal.SIGSTOP)
    if proc.poll() is None and kids and children_of(proc.pid) == kids and partial_files(out.parent):
        os.kill(kids[0], signal.SIGSTOP)  # it can end now only if the export kills it
        return proc, kids[0]  # mid-export: its file not yet in place
    return let_finish(proc, out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_drawing_s_process_too(tmp_path: Path, sig: int) -> None:
    """The export's drawing process, stopped so that it cannot end by itself, is killed and reaped by the export
    a signal ends: gone once the export has exited, with its partial file."""
    out = tmp_path / "x.pftrace"
    got = next((g for g in (stopped_with_its_drawing(out) for _ in range(TRIES)) if g is not None), None)
    assert got is not None, f"the export ended before its drawing's process could be seen, {TRIES} times"
    proc, child = got
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    alive = os.path.exists(f"/proc/{child}")
    if alive:
        os.kill(child, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err
    assert not alive, "the drawing's process outlived the export"
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
    assert b"Traceback" not in err


def test_a_signal_inside_signals_held_takes_effect_after_the_block() -> None:
    """The block runs to its end, then the signal's own handler runs (here one that raises): what the block named
    is known to the cleanup the raise reaches."""
    from npu_trace.process import signals_held

    def raises(signum: int, _frame: object) -> None:
        raise RuntimeError(f"signal {signum}")

    done: List[str] = []
    before = signal.signal(signal.SIGTERM, raises)
    try:
        with pytest.raises(RuntimeError, match="signal 15"), signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler would have run here (the next bytecode): it waits for the block's end
            done.append("the block's end")
        assert done == ["the block's end"]
        assert signal.getsignal(signal.SIGTERM) is raises  # put back
    finally:
        signal.signal(signal.SIGTERM, before)
