"""An export ended by a signal leaves nothing behind: SIGTERM (a service stop, `timeout`) and SIGHUP end it as Ctrl-C
does, the file written beside the output removed, the output untouched, exit 128 + the signal's number.

Each export is caught in the state a test needs by construction, not by racing it: started and stopped at once,
it runs in short steps (SIGCONT, half a millisecond, SIGSTOP) with a look at its state between two, so that its
work between two looks is a step's whatever the host's speed; the recording (generated: three blocks of the mixed
scenario) keeps every state looked for for many steps (its file partial: the whole export; its drawing's process
alive with more to draw: two blocks' analysis and their drawing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

CLI = [sys.executable, "-m", "npu_trace"]
STEP_S = 0.0005  # how long the export runs between two looks


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> str:
    from benchmarks.gen_recording import Spec, generate

    made = generate(str(tmp_path_factory.mktemp("signals") / "mixed.npt"), Spec(duration_s=4.0, rate=26_000.0))
    assert made.events > 2 * (1 << 16), made.events  # blocks analysed and drawn after the drawing's process starts
    return made.path


def partial_files(folder: Path) -> List[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".partial"))


def _hangups_heard() -> None:
    """In the child: SIGHUP at its default action, as a terminal's session has it (a test run started under
    `nohup` passes it on ignored, and the export then keeps it ignored on purpose, as nohup means)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _state(pid: int) -> str:
    """The process's state letter in /proc ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def stop(pid: int) -> None:
    """SIGSTOP, and wait until the process is stopped (a signal is taken when the process next runs) or ended."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while _state(pid) not in ("T", "t", "Z", "X", "") and time.monotonic() < deadline:
        time.sleep(0.0002)
    assert _state(pid) in ("T", "t", "Z", "X", ""), f"process {pid} did not stop in 30 s"


def stopped_export(recording: str, out: Path) -> subprocess.Popen[bytes]:
    """An export of `recording` to `out`, stopped as soon as it is started."""
    proc = subprocess.Popen([*CLI, "export", recording, "-o", str(out), "--quiet"], stderr=subprocess.PIPE,
                            preexec_fn=_hangups_heard)  # fmt: skip
    stop(proc.pid)
    return proc


def step_until(proc: subprocess.Popen[bytes], seen: Callable[[], bool]) -> bool:
    """Run the stopped export in steps until `seen()` holds between two (True, the export stopped), or it ended
    (False)."""
    while proc.poll() is None:
        if seen():
            return True
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(STEP_S)
        stop(proc.pid)
    return False


def children_of(pid: int) -> List[int]:
    """The processes `pid`'s main thread started (its children list in /proc; a scan of every process's parent
    where the kernel has no such list)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except FileNotFoundError:
        pass
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


def stopped_mid_export(recording: str, out: Path) -> subprocess.Popen[bytes]:
    """An export of `recording` to `out`, stopped while its file is partial."""
    proc = stopped_export(recording, out)
    assert step_until(proc, lambda: bool(partial_files(out.parent))), "the export ended before its file was seen"
    return proc


def stopped_with_its_drawing(recording: str, out: Path) -> Tuple[subprocess.Popen[bytes], int]:
    """An export of `recording` to `out` and its drawing's process (npu_trace.export.apart), both stopped while
    they run, the file still partial."""
    proc = stopped_mid_export(recording, out)
    kids: List[int] = []

    def drawing() -> bool:
        kids[:] = children_of(proc.pid)
        return bool(kids)

    assert step_until(proc, drawing), "the export ended before its drawing's process was seen"
    stop(kids[0])  # it can end now only if the export kills it
    assert partial_files(out.parent), "the export's file was put in place before its drawing's end"
    return proc, kids[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_export_removes_its_partial_file(tmp_path: Path, recording: str, sig: int) -> None:
    out = tmp_path / "x.pftrace"
    proc = stopped_mid_export(recording, out)
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)  # no partial file, no output
    assert b"Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_drawing_s_process_too(tmp_path: Path, recording: str, sig: int) -> None:
    """The export's drawing process, stopped so that it cannot end by itself, is killed and reaped by the export
    a signal ends: gone once the export has exited, with its partial file."""
    out = tmp_path / "x.pftrace"
    proc, child = stopped_with_its_drawing(recording, out)
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    proc.wait(timeout=60)  # the export's end (a drawing process that outlived it would hold its stderr open)
    alive = os.path.exists(f"/proc/{child}")
    if alive:
        os.kill(child, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
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
