"""Leave the kernel as found: a SIGKILLed session's instance is removed by the next session and by cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List

import pytest

from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sources.tracefs_source import TracefsSession

CLI = [sys.executable, "-m", "npu_trace"]


def instances(fs: Tracefs) -> List[str]:
    return [n for n in fs.instance_names() if n.startswith("npu-trace-")]


def killed_stream(fs: Tracefs) -> str:
    """Start a stream, SIGKILL it once tracing, and return the instance it left behind."""
    proc = subprocess.Popen([*CLI, "stream", "-e", "irq:*"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stderr is not None
    assert "tracing" in proc.stderr.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = f"npu-trace-{proc.pid}"
    assert left in instances(fs)
    return left


@pytest.mark.privileged
def test_next_session_removes_the_instance_of_a_killed_run() -> None:
    fs = Tracefs.find()
    left = killed_stream(fs)
    with TracefsSession(["irq:irq_handler_entry"], fs=fs, tag="next"):
        assert left not in instances(fs)
    assert left not in instances(fs)


@pytest.mark.privileged
def test_cleanup_command_removes_the_instance_of_a_killed_run() -> None:
    fs = Tracefs.find()
    left = killed_stream(fs)
    proc = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and f"removed tracefs instance {left}" in proc.stderr
    assert left not in instances(fs)


@pytest.mark.privileged
def test_sigterm_ends_a_stream_cleanly_with_its_summary() -> None:
    fs = Tracefs.find()
    proc = subprocess.Popen([*CLI, "stream", "-e", "irq:*"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stderr is not None
    assert "tracing" in proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "loss:" in err
    assert f"npu-trace-{proc.pid}" not in instances(fs)


def test_a_live_process_instance_is_not_stale(tmp_path: object) -> None:
    root = os.path.join(str(tmp_path), "tracefs")
    os.makedirs(os.path.join(root, "instances", f"npu-trace-{os.getpid()}"))
    os.makedirs(os.path.join(root, "instances", "npu-trace-999999999"))
    os.makedirs(os.path.join(root, "instances", "someone-else"))
    assert Tracefs(root).stale_instances() == ["npu-trace-999999999"]
