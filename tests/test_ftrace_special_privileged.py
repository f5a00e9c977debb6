"""For real, on this kernel: trace_marker writes to the session's own instance are ftrace:print events shown by
their text; `--stacktrace` records a kernel stack after each event, kept with the kernel's symbols in the
recording, and replay shows its frames by name. Each run is a second of tracing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any, List

import pytest

from npu_trace.recording import RecordingReader
from proc_support import read_until

CLI = [sys.executable, "-m", "npu_trace"]
TRACE = ["-e", "sched:sched_process_exec", "--channels", "none", "--duration", "1"]


def marked(proc: subprocess.Popen[str], texts: List[str]) -> None:
    """Once the session traces: `texts` written to its instance's trace_marker, then /bin/true run."""
    said = read_until(proc, "trace markers:")
    found = re.search(r"a line written to (\S+/trace_marker)", said)
    assert found, said
    for text in texts:
        with open(found.group(1), "w") as f:
            f.write(text + "\n")
    subprocess.run(["/bin/true"], check=True)


def instance_gone(pid: int) -> bool:
    return not any(name.startswith(f"npu-trace-{pid}") for name in os.listdir("/sys/kernel/tracing/instances"))


@pytest.mark.privileged
def test_stream_shows_the_trace_markers_written_to_its_instance() -> None:
    proc = subprocess.Popen([*CLI, "stream", "--format", "ndjson", *TRACE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    texts = [f"npu-trace marker {i} of {os.getpid()}" for i in range(3)]
    marked(proc, texts)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    mine = [e for e in events if e["event"] == "ftrace:print" and e["pid"] == os.getpid()]
    assert [e["text"] for e in mine] == [f"tracing_mark_write: {t}" for t in texts], err
    assert [e["fields"]["buf"] for e in mine] == [t + "\n" for t in texts]
    assert not [e for e in events if e["event"] == "ftrace:kernel_stack"]  # no --stacktrace: no stacks
    assert "shown by their fields" not in err and instance_gone(proc.pid)


@pytest.mark.privileged
def test_record_with_stacktrace_keeps_the_symbols_and_replay_shows_the_frames(tmp_path: Any) -> None:
    path = str(tmp_path / "stacks.npt")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "--stacktrace", *TRACE], stderr=subprocess.PIPE, text=True)
    marked(rec, ["before the exec"])
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert oct(os.stat(path).st_mode & 0o777) == "0o600" and instance_gone(rec.pid)
    header = RecordingReader(path).header
    assert "only" not in header["kallsyms"] and header["kallsyms"]["raw_len"] > 100_000  # the whole table
    assert "printk_formats" in header and "ftrace:kernel_stack" in {f"{f['system']}:{f['name']}"
                                                                     for f in header["formats"]}  # fmt: skip
    proc = subprocess.run([*CLI, "replay", "--headless", "--max", path], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.endswith(f"-{os.getpid()} ftrace:print: tracing_mark_write: before the exec") for line in lines)
    execs = [i for i, line in enumerate(lines) if "sched:sched_process_exec: filename=/bin/true" in line]
    assert execs, proc.stdout[-2000:]
    who = re.search(r"(\[\d+\] \S+) sched:", lines[execs[0]]).group(1)  # type: ignore[union-attr]
    stack = next(line for line in lines[execs[0] + 1 :] if f"{who} ftrace:kernel_stack: " in line)  # its own
    frames = stack.split(" => ")[1:]
    assert frames and all(re.fullmatch(r"[\w.$]+\+0x[0-9a-f]+/0x[0-9a-f]+( \[\w+\])?", f) for f in frames), stack
    assert any("exec" in f for f in frames), stack  # the exec's own path into the tracepoint
