"""Bad input gets one clear line and a non-zero exit (2 usage/input, 3 privilege/kernel), never a traceback,
and leaves no tracefs state behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest

from goldens import kernel_dirs

CLI = [sys.executable, "-m", "npu_trace"]


class Ran(subprocess.CompletedProcess):  # type: ignore[type-arg]
    pid: int


def run_cli(args: List[str], env: Optional[Dict[str, str]] = None, **kw: Any) -> Ran:
    """The CLI run to its end; `pid`: its process id (what its tracefs instances are named after)."""
    full_env = {**os.environ, **(env or {})}
    child = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                             **kw)  # fmt: skip
    try:
        out, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise
    ran = Ran(child.args, child.returncode, out, err)
    ran.pid = child.pid
    return ran


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("npu-trace: "), lines
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def instances_of(pid: int) -> List[str]:
    """The tracefs instances named after process `pid` (`npu-trace-PID`, `npu-trace-PID-TAG`): a test looks
    only at what its own process made (other sessions on the host may come and go meanwhile)."""
    root = "/sys/kernel/tracing/instances"
    names = os.listdir(root) if os.path.isdir(root) else []
    return [n for n in names if n == f"npu-trace-{pid}" or n.startswith(f"npu-trace-{pid}-")]


@pytest.mark.parametrize(
    "args",
    [["stream", "--duration", "-1"], ["stream", "--buffer-kb", "0"], ["stream", "--profile", "nosuch"],
     ["stream", "--format", "xml"], ["nosuchcommand"], ["sim", "run", "--scenario", "nosuch"]],
)  # fmt: skip
def test_usage_errors_exit_2(args: List[str]) -> None:
    proc = run_cli(args, env={"NPU_TRACE_TRACEFS": "/nonexistent-tracefs"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["stream", "record", "live", "bpf"])
@pytest.mark.parametrize(
    "scope, words",
    [(["--pid", "0"], "--pid 0"), (["--pid", "4194999"], "--pid 4194999: no such process"),
     (["--comm", "a-name-of-sixteen"], "15 characters"), (["--device", "-1"], "--device -1"),
     (["--dev", "1", "--device", "2", "--comm", 'a"b'], "quotes")],
)  # fmt: skip
def test_bad_scope_values_are_one_line_before_anything_starts(command: str, scope: List[str], words: str) -> None:
    """--pid, --comm and --device (--dev) are checked on every command that has them, before the kernel (no
    instance left) and before the TUI starts."""
    extra = ["-o", "/nonexistent/x.npt"] if command == "record" else []
    proc = run_cli([command, *extra, *scope], env={"NPU_TRACE_TRACEFS": "/nonexistent-tracefs"})
    assert_one_line_error(proc, 2, words)
    assert instances_of(proc.pid) == []


@pytest.mark.parametrize("command", ["stream", "record", "live"])
@pytest.mark.parametrize("hal, words", [("/nonexistent/libascend_hal.so", "not found: /nonexistent/libascend_hal.so"),
                                        ("/bin/true", "symbol halMemAlloc, halMemFree, halSqTaskSend, halCqReportRecv "
                                                      "not in /bin/true"),
                                        ("TEXT", "cannot read ELF symbols of")])  # fmt: skip
def test_a_hal_without_its_symbols_is_said_before_anything_starts(command: str, hal: str, words: str,
                                                                 tmp_path: Any) -> None:  # fmt: skip
    """--bpf --hal PATH: a library that is not there, is not an ELF or lacks the HAL's symbols is one line, exit 2,
    before the kernel is touched (tracefs is pointed at nothing: a later check would say that instead)."""
    if hal == "TEXT":
        hal = str(tmp_path / "libascend_hal.so")
        with open(hal, "w") as f:
            f.write("not an ELF file\n")
    extra = ["-o", str(tmp_path / "x.npt")] if command == "record" else []
    proc = run_cli([command, *extra, "--profile", "ascend", "--bpf", "--hal", hal],
                   env={"NPU_TRACE_TRACEFS": "/nonexistent-tracefs"})  # fmt: skip
    assert_one_line_error(proc, 2, words)
    assert instances_of(proc.pid) == []


def test_tracefs_absent_exits_3(tmp_path: Any) -> None:
    proc = run_cli(["stream", "--duration", "1"], env={"NPU_TRACE_TRACEFS": str(tmp_path / "none")})
    assert_one_line_error(proc, 3, "tracefs" if os.geteuid() == 0 else "root")


def _fake_tracefs(tmp_path: Any, broken: str, drop: str = "") -> str:
    """A directory shaped like tracefs, from the golden capture, with one format file broken."""
    src = kernel_dirs()[0]
    root = str(tmp_path / "tracefs")
    shutil.copytree(os.path.join(src, "events"), os.path.join(root, "events"))
    if drop:
        shutil.rmtree(os.path.join(root, "events", drop))
    for name in ("header_page", "header_event"):
        shutil.copy(os.path.join(src, name), os.path.join(root, "events", name))
    os.mkdir(os.path.join(root, "instances"))
    events = sorted(f"{s}:{e}" for s in os.listdir(os.path.join(root, "events"))
                    if os.path.isdir(os.path.join(root, "events", s))
                    for e in os.listdir(os.path.join(root, "events", s)))  # fmt: skip
    with open(os.path.join(root, "available_events"), "w") as f:
        f.write("\n".join(events) + "\n")
    system, name = broken.split(":")
    with open(os.path.join(root, "events", system, name, "format"), "w") as f:
        f.write("name: broken\nID: 12\nformat:\n\tfield:what is this\n")
    return root


def test_malformed_format_file_exits_2_naming_the_event(tmp_path: Any) -> None:
    root = _fake_tracefs(tmp_path, "irq:irq_handler_entry")
    proc = run_cli(["stream", "--events", "irq:irq_handler_*", "--duration", "1"], env={"NPU_TRACE_TRACEFS": root})
    if os.geteuid() != 0:
        assert_one_line_error(proc, 3, "root")
        return
    assert_one_line_error(proc, 2, "irq:irq_handler_entry")
    assert os.listdir(os.path.join(root, "instances")) == []


def test_unknown_glob_in_a_fake_tracefs_exits_2(tmp_path: Any) -> None:
    root = _fake_tracefs(tmp_path, "irq:irq_handler_exit")
    proc = run_cli(["stream", "--events", "nosuch_*"], env={"NPU_TRACE_TRACEFS": root})
    if os.geteuid() != 0:
        assert_one_line_error(proc, 3, "root")
        return
    assert_one_line_error(proc, 2, "nosuch_*")


@pytest.mark.privileged
def test_unknown_event_glob_on_the_real_kernel_exits_2_and_leaves_nothing() -> None:
    proc = run_cli(["stream", "--events", "ascend_nosuch_*", "--duration", "1"])
    assert_one_line_error(proc, 2, "ascend_nosuch_*")
    assert instances_of(proc.pid) == []


@pytest.mark.privileged
def test_missing_privilege_exits_3_and_leaves_nothing() -> None:
    def drop() -> None:
        os.setgid(65534)
        os.setuid(65534)

    proc = run_cli(["stream", "--events", "irq:*", "--duration", "1"], preexec_fn=drop, cwd="/")
    assert_one_line_error(proc, 3, "root")
    assert instances_of(proc.pid) == []


@pytest.mark.privileged
def test_profile_names_its_absent_events_once_and_traces_the_rest() -> None:
    """The driver's tracepoints are absent here, and none of this host's interrupts is an NPU's: the ascend
    profile says both once and traces the other channels, not every interrupt of the host."""
    proc = run_cli(["stream", "--profile", "ascend", "--duration", "0.5"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("no NPU interrupt on this host") == 1
    assert "none of the profile's events exists here (trs_chan:*, trs_core:*)" in proc.stderr
    assert "irq:irq_handler_entry, irq:irq_handler_exit not traced" in proc.stderr
    assert "tracing 0 event types" in proc.stderr and "Traceback" not in proc.stderr


def test_profile_without_any_of_its_events_exits_3_with_a_hint(tmp_path: Any) -> None:
    root = _fake_tracefs(tmp_path, "irq:irq_handler_exit", drop="ascend")
    proc = run_cli(["stream", "--profile", "sim", "--duration", "1"], env={"NPU_TRACE_TRACEFS": root})
    assert_one_line_error(proc, 3, "npu-trace sim load" if os.geteuid() == 0 else "root")


@pytest.mark.parametrize("command", ["replay", "check"])
def test_unreadable_recordings_exit_2_in_one_line(tmp_path: Any, command: str) -> None:
    missing = run_cli([command, str(tmp_path / "nope.npt")])
    assert_one_line_error(missing, 2, "nope.npt")
    junk = tmp_path / "junk.npt"
    junk.write_bytes(b"GIF89a" + bytes(range(256)) * 4)
    assert_one_line_error(run_cli([command, str(junk)]), 2)
    cut = tmp_path / "cut.npt"
    cut.write_bytes(b"NPUTRACE\x00\x01\x85")
    assert_one_line_error(run_cli([command, str(cut)]), 2, "header")


def test_the_error_line_carries_journalds_priority_when_stderr_is_the_journal(tmp_path: Any) -> None:
    """Under systemd (JOURNAL_STREAM names stderr) the error is "<3>..." as the agent's own log lines are; the
    same variable naming another stream changes nothing."""
    for same, head in ((True, "<3>"), (False, "npu-trace: ")):
        with open(tmp_path / "stderr", "w+b") as err:
            st = os.fstat(err.fileno())
            stream = f"{st.st_dev}:{st.st_ino}" if same else f"{st.st_dev}:{st.st_ino + 1}"
            env = {**os.environ, "JOURNAL_STREAM": stream}
            proc = subprocess.run([*CLI, "check", str(tmp_path / "nope.npt")], stderr=err, env=env, timeout=60)
            err.seek(0)
            lines = err.read().decode().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(head) and "nope.npt" in lines[0]


def test_bad_rules_file_exits_2_with_file_and_line(tmp_path: Any) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("[timeouts]\nmax = 'none'\n")
    proc = run_cli(["check", str(tmp_path / "whatever.npt"), "--rules", str(rules)])
    assert_one_line_error(proc, 2, "rules.toml:2: timeouts.max: expected")


def test_record_refuses_a_bad_size() -> None:
    proc = run_cli(["record", "-o", "/tmp/x.npt", "--max-size", "lots"])
    assert proc.returncode == 2 and "not a size" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, text", [(["replay", "npu_trace/data/demo.npt"], "give --headless for text"),
                                        (["demo"], "give --headless for text")])  # fmt: skip
def test_the_terminal_ui_without_a_terminal_is_one_line(args: List[str], text: str) -> None:
    """Without a terminal (a pipe, a file, /dev/null), the UI wrote escape sequences into the output and waited
    for a key nobody could press, forever."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = run_cli(args, cwd=root, stdin=subprocess.DEVNULL)
    assert_one_line_error(proc, 2, "the terminal UI needs a terminal", text)
