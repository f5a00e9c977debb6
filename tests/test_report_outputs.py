"""The reports `check`, `diff` and `cluster` write (--json, --junit, cluster's -o): never over one of their inputs,
written beside their name and moved there once whole (a write that fails leaves nothing), one line when they
cannot be written, and the gates' numeric options refuse what is not a number."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from typing import Any, List

import pytest

CLI = [sys.executable, "-m", "npu_trace"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECC = os.path.join(ROOT, "tests", "data", "hostctx", "sim-ecc-reset.npt")
DEMO = os.path.join(ROOT, "npu_trace", "data", "demo.npt")


def cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, **kw)


def copies(tmp_path: Any) -> List[str]:
    out = []
    for name, src in (("a.npt", ECC), ("b.npt", DEMO)):
        shutil.copy(src, tmp_path / name)
        out.append(str(tmp_path / name))
    return out


@pytest.mark.parametrize("command", [
    ["check", "-q", "--json", "{a}", "{a}", "{b}"],  # --json takes the next name: a typo away
    ["check", "-q", "--junit", "{link}", "{a}"],
    ["diff", "--json", "{a}", "{a}", "{b}"],
    ["cluster", "-q", "--json", "{b}", "{a}", "{b}"],
    ["cluster", "-q", "-o", "{link}", "{a}"],
    ["export", "{a}", "-o", "{link}"],
])  # fmt: skip
def test_no_report_is_written_over_one_of_its_inputs(tmp_path: Any, command: List[str]) -> None:
    """Before: the recording named as the output became the report (check, diff, cluster): refused now, in one
    line, before anything is read; a link to it is the same file."""
    a, b = copies(tmp_path)
    link = str(tmp_path / "link.json")
    os.symlink(a, link)
    with open(a, "rb") as f:
        before = f.read()
    proc = cli(*[arg.format(a=a, b=b, link=link) for arg in command])
    out = link if "{link}" in command else (b if command[0] == "cluster" and "--json" in command else a)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"npu-trace: the output {out} is the input ") and "give another name" in proc.stderr
    with open(a, "rb") as f:
        assert f.read() == before


def _limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_that_cannot_be_written_whole_leaves_nothing(tmp_path: Any, option: str) -> None:
    """Files of at most 1 KiB (RLIMIT_FSIZE): the report fails midway, one line says so, and neither it nor its
    partial file is left (before: 1 KiB of a JSON report, cut)."""
    out = tmp_path / "out" / "report"
    out.parent.mkdir()
    for command in (["check", "-q", option, str(out), ECC], ["cluster", "-q", option, str(out), ECC, DEMO]):
        proc = cli(*command, preexec_fn=_limited)
        assert proc.returncode == 2 and proc.stderr == f"npu-trace: cannot write {out}: File too large\n"
        assert os.listdir(out.parent) == []
    proc = cli("diff", "--json", str(out), ECC, DEMO, preexec_fn=_limited)
    assert proc.returncode == 2 and proc.stderr.endswith(f"npu-trace: cannot write {out}: File too large\n")
    assert os.listdir(out.parent) == []


def test_a_report_path_that_cannot_be_made_is_one_line(tmp_path: Any) -> None:
    """Before: diff's --json in a missing folder was a traceback and exit 1 (a regression's code)."""
    missing = str(tmp_path / "none" / "x.json")
    for command in (["diff", "--json", missing, ECC, DEMO], ["check", "-q", "--json", missing, ECC]):
        proc = cli(*command)
        assert proc.returncode == 2 and proc.stderr.endswith(f"npu-trace: cannot write {missing}: No such file or "
                                                              "directory\n"), proc.stderr  # fmt: skip


def test_a_report_is_written_whole_and_private_as_its_recording(tmp_path: Any) -> None:
    a, _ = copies(tmp_path)
    os.chmod(a, 0o640)
    out = tmp_path / "r.json"
    assert cli("check", "-q", "--json", str(out), a).returncode == 1
    assert out.read_text().startswith("{") and oct(os.stat(out).st_mode & 0o777) == "0o640"
    assert sorted(os.listdir(tmp_path)) == ["a.npt", "b.npt", "r.json"]
    proc = cli("check", "-q", "--json", "-", a, cwd=str(tmp_path))  # `-`: the standard output, no file named -
    assert proc.returncode == 1 and proc.stdout.startswith("{") and not os.path.exists(tmp_path / "-")


def test_a_gates_bound_that_is_not_a_number_is_refused() -> None:
    """Before: --threshold nan compared false to everything: no regression, exit 0, whatever the recordings."""
    proc = cli("diff", "--threshold", "nan", ECC, DEMO)
    assert proc.returncode == 2 and "must be numbers, not negative" in proc.stderr


def test_a_gates_verdict_stands_when_its_reader_goes_away(tmp_path: Any) -> None:
    """`diff A B | head -1`: the reader closes the pipe before the verdict is written; the exit code is still the
    verdict's (before: 0, "no regression", on a regression)."""
    for command, code in ((["diff", ECC, DEMO], 1), (["check", ECC], 1)):
        proc = subprocess.Popen([*CLI, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(1)
        proc.stdout.close()  # the rest of the report goes nowhere
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == code and "Traceback" not in err, err


@pytest.mark.parametrize("command", [["diff", ECC, ECC], ["replay", "--headless", "--max", ECC], ["check", ECC],
                                     ["cluster", ECC]])  # fmt: skip
def test_a_full_standard_output_is_one_line(command: List[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*CLI, *command], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr == "npu-trace: cannot write the output: No space left on device\n"


def test_a_recording_given_as_a_pipe_is_one_line() -> None:
    """It is read more than once, and from where a skip resumes: a file is needed (before: a traceback)."""
    read, write = os.pipe()
    os.write(write, b"NPUTRACE")  # the pipe holds the start of a recording; what it is matters, not what it holds
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        proc = subprocess.run([*CLI, "replay", "--headless", "--max", "/dev/stdin"], stdin=pipe,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr == ("npu-trace: recording /dev/stdin is not a file (a pipe, a "
                                                    "device): give the file itself\n")  # fmt: skip


@pytest.mark.parametrize("command", [["check"], ["replay", "--headless"], ["export", "-o", "out.json"],
                                     ["import", "-o", "out.npt"]])  # fmt: skip
def test_a_fifo_no_one_writes_is_one_line_at_once(command: List[str], tmp_path: Any) -> None:
    """A FIFO's open waits for a writer: the recording's reader opened it so and waited forever (a name given by
    mistake hung check, replay, export, diff and cluster); import called it "no such file". Nothing writes to
    this one: the command must answer without opening it to read."""
    os.mkfifo(tmp_path / "fifo")
    argv = [*command[:-2], "fifo", *command[-2:]] if len(command) > 2 else [*command, "fifo"]
    proc = subprocess.run([*CLI, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    what = "recording fifo is" if command[0] != "import" else "fifo:"
    assert proc.returncode == 2 and proc.stderr == (f"npu-trace: {what} not a file (a pipe, a device): give the "
                                                    "file itself\n")  # fmt: skip


def test_one_recording_named_two_ways_is_read_once(tmp_path: Any) -> None:
    a, _ = copies(tmp_path)
    os.symlink(a, tmp_path / "link.npt")
    proc = cli("cluster", a, os.path.join(str(tmp_path), ".", "a.npt"), str(tmp_path / "link.npt"))
    assert "1 recording(s)" in proc.stdout.splitlines()[0], proc.stdout
    out = tmp_path / "r.xml"
    cli("check", "-q", "--junit", str(out), a, os.path.join(str(tmp_path), ".", "a.npt"))
    assert out.read_text().count("<testsuite ") == 1


def test_a_file_name_xml_cannot_hold_is_escaped_in_junit(tmp_path: Any) -> None:
    """Control characters in a recording's name: shown as \\xNN (before: a JUnit file no XML parser reads)."""
    import xml.etree.ElementTree as ET

    odd = tmp_path / "ctl\x01\x1b[31mred.npt"
    shutil.copy(ECC, odd)
    out = tmp_path / "r.xml"
    for command in (["check", "-q", "--junit", str(out), str(odd), DEMO], ["cluster", "-q", "--junit", str(out),
                                                                           str(odd)]):  # fmt: skip
        cli(*command)
        names = [e.get("name") for e in ET.parse(out).getroot().iter() if e.get("name")]
        assert any("ctl\\x01\\x1b[31mred.npt" in n for n in names), names


def test_the_smaller_messages_say_what_is_so(tmp_path: Any) -> None:
    """A window ending before the first event names that event, not an empty --from; cluster, which has no
    --format, does not suggest it; an export whose shared memory cannot be made (a file-size limit) is one line;
    Ctrl-C while the command's modules load is exit 130, not a traceback."""
    from unittest import mock

    from npu_trace import cli as cli_module

    proc = cli("export", ECC, "-o", str(tmp_path / "w.pftrace"), "--to", "0")
    assert proc.returncode == 2
    assert "the window ends before it begins: the recording's first event is at " in proc.stderr
    proc = cli("cluster", "-o", str(tmp_path / "x.txt"), ECC)
    assert proc.returncode == 2 and proc.stderr.endswith("name it .pftrace, .perfetto-trace or .json\n")
    proc = cli("export", "-q", ECC, "-o", str(tmp_path / "u.json"), preexec_fn=_limited)
    assert proc.returncode == 2 and proc.stderr == ("npu-trace: cannot make the shared memory the export draws "
                                                    "through: File too large\n")  # fmt: skip
    assert os.listdir(tmp_path) == []
    with mock.patch.object(cli_module, "build_parser", side_effect=KeyboardInterrupt):
        assert cli_module.main(["export", ECC, "-o", str(tmp_path / "x.json")]) == 130


def test_a_replay_stopped_by_ctrl_c_says_so_and_exits_as_stopped() -> None:
    """Paced at a tenth of the recorded pace (the recording spans 1.4 s: 14 s to replay), stopped by SIGINT once
    its first event is out: the summary says the rest was not read, exit 130 (before: 0, as if read whole)."""
    proc = subprocess.Popen([*CLI, "replay", "--headless", "--speed", "0.1", ECC], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.rstrip().endswith("; stopped by SIGINT before the end"), err


@pytest.mark.parametrize("speed", ["nan", "inf", "0", "-1"])
def test_a_replay_speed_that_is_not_a_positive_number_is_refused(speed: str) -> None:
    """Before: --speed nan was taken (it compares false to the bound)."""
    proc = cli("replay", "--headless", "--speed", speed, ECC)
    assert proc.returncode == 2 and proc.stderr == "npu-trace: --speed must be a positive number\n"


def test_a_closed_standard_output_is_the_null_device(tmp_path: Any) -> None:
    """Started with its standard output closed (`>&-`), check wrote its report to None: an AttributeError
    traceback and exit 1, check's verdict for violations, of a recording that passes. The output is discarded
    now and the verdict stands."""
    from npu_trace.events import NpuEvent
    from npu_trace.recording.writer import RecordingWriter
    from test_timeline import synth_header

    path = str(tmp_path / "one.npt")
    with RecordingWriter(path, synth_header(1)) as w:
        w.add_events([NpuEvent(10**12, "log", 0, "x", 7, 0, {"text": "a"})])
    assert cli("check", path).returncode == 0
    proc = subprocess.run([*CLI, "check", path], capture_output=True, text=True, preexec_fn=lambda: os.close(1),
                          timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["check", "--help"]])
def test_help_to_a_full_device_is_one_line(args: List[str]) -> None:
    """argparse writes --help and --version before the command runs, outside its handling of a full output: a
    traceback (or Python's 'Exception ignored' at exit), exit 1."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*CLI, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "npu-trace: cannot write the output: No space left on device\n")
