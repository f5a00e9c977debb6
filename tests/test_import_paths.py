"""`npu-trace import`'s edges: its output (never one of its inputs, written beside its name and moved there once
whole, nothing left by an import that fails), the lost-events notes of ftrace text (trace-cmd's forms too, each
kept where the text put it), and times no recording can hold (a line, or --year, refused in one line)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, List
from unittest import mock

import pytest

from npu_trace.cli import main
from npu_trace.device.kernlog import read_line as kernel_line
from npu_trace.ftrace.textline import read_line
from npu_trace.process import Terminated
from npu_trace.recording.reader import RecordingReader

CLI = [sys.executable, "-m", "npu_trace"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE_V7 = os.path.join(ROOT, "tests", "data", "tracedat", "trace-v7.dat")
TEXT = [
    "# tracer: nop",
    "            bash-100   [000] .... 100.000001: tracing_mark_write: one",
    "            bash-101   [001] .... 100.000002: tracing_mark_write: two",
    "CPU:0 [LOST 5 EVENTS]",
    "            bash-100   [000] .... 100.000003: tracing_mark_write: three",
    "            bash-101   [001] .... 100.000004: tracing_mark_write: four",
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def text_file(tmp_path: Any, lines: List[str], name: str = "trace.txt") -> str:
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def ndjson(rec: str) -> List[Any]:
    proc = cli("replay", "--headless", "--max", "--format", "ndjson", rec)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


# ---- the output -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("link", [False, True])
def test_the_output_is_never_an_input(tmp_path: Any, link: bool) -> None:
    """-o naming the input (itself or through a link), even with --overwrite: refused before anything is read or
    written; the input unchanged (it was mapped and read while its file was cut to nothing: a bus error)."""
    path = str(tmp_path / "trace.dat")
    with open(TRACE_V7, "rb") as f:
        blob = f.read()
    with open(path, "wb") as f:
        f.write(blob)
    out = path
    if link:
        out = str(tmp_path / "out.npt")
        os.symlink(path, out)
    proc = cli("import", path, "-o", out, "--overwrite")
    assert proc.returncode == 2 and proc.stderr == f"npu-trace: the output {out} is the input {path}: give another -o\n"
    with open(path, "rb") as f:
        assert f.read() == blob
    log = text_file(tmp_path, ["[    1.000000] hello"], "kern.log")
    proc = cli("import", log, "--app-log", path, "-o", out, "--overwrite")
    assert proc.returncode == 2 and "is the input" in proc.stderr


def test_an_existing_output_is_refused_before_the_input_is_read(tmp_path: Any, capsys: Any) -> None:
    out = tmp_path / "out.npt"
    out.write_bytes(b"mine")
    with mock.patch("npu_trace.ftrace.tracedat.read", side_effect=AssertionError("read")):
        assert main(["import", TRACE_V7, "-o", str(out)]) == 2
    assert capsys.readouterr().err == (f"npu-trace: {out} already exists: refusing to overwrite a recording "
                                       "(--overwrite replaces it)\n")  # fmt: skip
    assert out.read_bytes() == b"mine" and sorted(os.listdir(tmp_path)) == ["out.npt"]
    assert main(["import", str(tmp_path), "-o", str(tmp_path / "x.npt")]) == 2
    assert capsys.readouterr().err == f"npu-trace: {tmp_path}: a directory, not a file\n"


@pytest.mark.parametrize("stop", [RuntimeError("midway"), KeyboardInterrupt(), Terminated(signal.SIGTERM)])
def test_an_import_that_fails_leaves_no_file_and_an_existing_output_as_it_was(tmp_path: Any, stop: Any) -> None:
    """The recording is written beside its name and moved there once whole: an import that fails midway, or that
    Ctrl-C or SIGTERM ends (import makes SIGTERM raise Terminated), leaves neither a file that reads as a complete
    recording nor its partial file, and the output it would replace untouched."""
    out = tmp_path / "out.npt"
    out.write_bytes(b"mine")
    failing = mock.patch("npu_trace.sources.importer.write_events", side_effect=stop)
    argv = ["import", text_file(tmp_path, TEXT), "-o", str(out), "--overwrite"]
    with failing, mock.patch("npu_trace.commands.import_cmd.end_on_termination") as told:
        if isinstance(stop, RuntimeError):
            with pytest.raises(RuntimeError, match="midway"):
                main(argv)
        else:
            assert main(argv) in (130, 128 + signal.SIGTERM)
    assert told.called
    assert out.read_bytes() == b"mine" and sorted(os.listdir(tmp_path)) == ["out.npt", "trace.txt"]
    assert main(["import", str(tmp_path / "trace.txt"), "-o", str(out), "--overwrite"]) == 0
    assert RecordingReader(str(out)).header["extra"]["import"]["kind"] == "ftrace_text"
    assert oct(os.stat(out).st_mode & 0o777) == "0o600" and sorted(os.listdir(tmp_path)) == ["out.npt", "trace.txt"]


def test_a_writer_left_by_an_error_writes_no_trailer(tmp_path: Any) -> None:
    """A recording whose writing ended by an error reads as cut there (the default rules fail it), not whole."""
    from npu_trace.recording.writer import RecordingWriter
    from test_recording import golden_header

    path = str(tmp_path / "cut.npt")
    with pytest.raises(RuntimeError), RecordingWriter(path, golden_header()):
        raise RuntimeError("stopped")
    reader = RecordingReader(path)
    assert list(reader.records()) == [] and reader.truncated and reader.trailer is None


# ---- ftrace text: the lost-events notes --------------------------------------------------------------------------
@pytest.mark.parametrize("text, cpu, lost", [
    ("CPU:3 [LOST 12 EVENTS]", 3, 12),
    ("CPU:0 [LOST EVENTS]", 0, None),
    ("CPU:1 [7 EVENTS DROPPED]", 1, 7),  # trace-cmd report's forms
    ("CPU:0 [EVENTS DROPPED]", 0, None),
    ("npu-trace-golden-27421-v6: CPU:2 [EVENTS DROPPED]", 2, None),  # after the instance's name
    ("mybuf: CPU:0 [LOST 4 EVENTS]", 0, 4),
])  # fmt: skip
def test_every_form_of_a_lost_events_note_is_read(text: str, cpu: int, lost: Any) -> None:
    line = read_line(text)
    assert (line.kind, line.cpu, line.lost) == ("lost", cpu, lost)


def test_a_lost_events_note_is_replayed_where_the_text_put_it(tmp_path: Any) -> None:
    """Stamped with its CPU's event before it (before: at 0, after every event): replayed after that event and
    before the next one of any CPU."""
    rec = str(tmp_path / "t.npt")
    assert main(["import", text_file(tmp_path, TEXT), "-o", rec]) == 0
    got = [(e["event"], e.get("fields", {}).get("buf", e.get("count")), e["ts_ns"]) for e in ndjson(rec)]
    assert got == [("ftrace:print", "one", 100_000_001_000), ("npu_trace:lost", 5, 100_000_001_000),
                   ("ftrace:print", "two", 100_000_002_000), ("ftrace:print", "three", 100_000_003_000),
                   ("ftrace:print", "four", 100_000_004_000)]  # fmt: skip


# ---- times no recording holds ------------------------------------------------------------------------------------
def test_a_time_past_what_a_recording_holds_is_not_an_events_time(tmp_path: Any, capsys: Any) -> None:
    """ftrace text stamped at 2^63 ns or later: a line read as other (named), the rest imported (before: a
    traceback from the page encoder). A kernel log line dated 9999 or 1500: a line without a wall time (before: a
    traceback from msgpack, and a file left that read as a whole recording). --year outside 1970-2261: refused."""
    far = "          python-7 [001] .... 99999999999.000000: tracing_mark_write: never"
    rec = str(tmp_path / "t.npt")
    assert main(["import", text_file(tmp_path, [*TEXT, far]), "-o", rec]) == 0
    assert "1 lines read as neither event nor header, e.g. line 7: 'python-7 [001]" in capsys.readouterr().err
    assert len(ndjson(rec)) == 5
    for date in ("9999-12-31T23:59:59.000000+00:00", "1500-01-01T00:00:00.000000+00:00"):
        assert kernel_line(f"{date} host kernel: [drm] hello").wall_ns is None
    log = text_file(tmp_path, ["9999-12-31T23:59:59.123456+00:00 host kernel: [drm] hello"], "kern.log")
    assert main(["import", log, "-o", str(tmp_path / "k.npt")]) == 0
    for year in ("1", "99999"):
        assert main(["import", log, "-o", str(tmp_path / "y.npt"), "--year", year]) == 2
        assert capsys.readouterr().err.endswith(f"npu-trace: --year {year}: a recording holds times of 1970 to 2261\n")
    assert not os.path.exists(tmp_path / "y.npt")


# ---- application logs -----------------------------------------------------------------------------------------
def test_an_application_error_without_a_time_is_placed_or_said(tmp_path: Any, capsys: Any) -> None:
    """Errors before a log's first timed one are placed at its time (time inferred), as those after one are at
    theirs; a log whose errors have no time at all: none placed, and the summary says so (before: dropped, while
    the summary counted them as imported). A file where no error is found says that too."""
    from npu_trace.device.applog import AppError
    from npu_trace.sources.importer import Anchor, app_events

    def err(wall: Any, line: int) -> AppError:
        return AppError(wall, 1000, "runtime", [], 0, False, 7, [], [507033], None, None, ["x"], line, "")

    anchor = Anchor(0, 5_000, 0, "boot-time")
    events, unplaced = app_events("app.log", [err(None, 1), err(9_000, 4), err(None, 8)], anchor)
    assert unplaced == 0 and [(e.ts_ns, e.args.get("time_inferred")) for e in events] == [
        (4_000, 1), (4_000, None), (4_000, 1)]  # fmt: skip
    assert app_events("app.log", [err(None, 1), err(None, 2)], anchor) == ([], 2)
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
             "RuntimeError: ACL stream synchronize failed, error code is 507033"]  # fmt: skip
    untimed = text_file(tmp_path, lines, "app.txt")
    kernel = os.path.join(ROOT, "tests", "data", "logs", "dmesg-device-abnormal.txt")
    assert main(["import", kernel, "--boot-time", "2026-05-01T00:00:00+00:00", "--app-log", untimed,
                 "--app-log", TRACE_V7, "-o", str(tmp_path / "a.npt")]) == 0  # fmt: skip
    said = capsys.readouterr().err
    assert "0 application errors from app.txt (1 more with no time in the file: not placed)" in said
    assert "0 application errors from trace-v7.dat (none found in its " in said


def test_a_syslog_log_crossing_new_year_goes_on_into_the_next_year() -> None:
    """syslog lines carry no year: from --year (or this one), the next one begins where the dates go back by half
    a year or more (before: Jan 1 read as a year before Dec 31); a clock set back an hour stays in its year."""
    from datetime import timezone

    from npu_trace.device.kernlog import read_line
    from npu_trace.sources.importer import _parsed

    lines = ["Dec 31 23:59:59 host kernel: [drm] one", "Jan  1 00:00:01 host kernel: [drm] two",
             "Jan  2 10:00:00 host kernel: [drm] three", "Jan  2 09:00:00 host kernel: [drm] set back"]  # fmt: skip
    years = (2025, 2026, 2026, 2026)
    want = [read_line(text, timezone.utc, year).wall_ns for text, year in zip(lines, years)]
    assert [p.wall_ns for p in _parsed(lines, timezone.utc, 2025)] == want


def test_a_vllm_log_crossing_new_year_goes_on_into_the_next_year() -> None:
    """vLLM's `MM-DD hh:mm:ss` carries no year either: the same rule as syslog's (before: Jan 1 read as a year
    before Dec 31, so an app log's errors after midnight were placed a year early)."""
    from datetime import timezone

    from npu_trace.device.applog import AppLogParser, local_ns

    lines = ["INFO 12-31 23:59:59 [worker.py:1] one", "INFO 01-01 00:00:01 [worker.py:1] two",
             "INFO 01-02 10:00:00 [worker.py:1] three", "INFO 01-02 09:00:00 [worker.py:1] set back"]  # fmt: skip
    parser = AppLogParser(tz=timezone.utc, year=2025)
    days = [(2025, 12, 31, "23:59:59"), (2026, 1, 1, "00:00:01"), (2026, 1, 2, "10:00:00"), (2026, 1, 2, "09:00:00")]
    assert [parser.read(line).wall_ns for line in lines] == [local_ns(*day, timezone.utc, 0) for day in days]


@pytest.mark.parametrize("tz", ["+25:00", "+05:61", "8"])
def test_a_utc_offset_out_of_range_is_one_line(tz: str, capsys: Any, tmp_path: Any) -> None:
    assert main(["import", text_file(tmp_path, TEXT), "-o", str(tmp_path / "t.npt"), "--tz", tz]) == 2
    assert capsys.readouterr().err == f"npu-trace: --tz: not a UTC offset: {tz!r} (-23:59 to +23:59, e.g. +08:00)\n"


def test_ftrace_text_after_a_long_preamble_is_read_and_a_call_graph_is_named(tmp_path: Any, capsys: Any) -> None:
    """The text's form is told from its first lines of either form, past any number of lines of neither (before:
    from its first 4,000 lines, and a text after a longer preamble was 'no event read'). The function_graph
    tracer's text, in no event form, is refused in one line that says what to import instead."""
    notes = [f"note {i}" for i in range(5000)]
    assert main(["import", text_file(tmp_path, [*notes, *TEXT]), "-o", str(tmp_path / "t.npt")]) == 0
    assert "lines: 4 events" in capsys.readouterr().err
    graph = ["# tracer: function_graph", "#", " 0)               |  do_sys_open() {",
             " 0)   0.571 us    |    kmem_cache_alloc();", " 0) + 12.345 us   |  }"]  # fmt: skip
    assert main(["import", text_file(tmp_path, graph, "graph.txt"), "-o", str(tmp_path / "g.npt")]) == 2
    assert capsys.readouterr().err.endswith("; the function_graph tracer's text is not read: import the trace.dat "
                                            "trace-cmd records of it\n")  # fmt: skip


def test_a_compressed_file_or_a_recording_is_named_as_such(tmp_path: Any, capsys: Any) -> None:
    """Read as text, they were 'no event read', quoting their bytes: now one line says what they are."""
    import gzip

    packed = tmp_path / "t.txt.gz"
    packed.write_bytes(gzip.compress("\n".join(TEXT).encode()))
    zst = os.path.join(ROOT, "tests", "data", "tracedat", "trace-v6.dat.zst")
    rec = os.path.join(ROOT, "tests", "data", "tracedat", "own.npt")
    for path, said in ((str(packed), "gzip-compressed: decompress it first (gunzip)"),
                       (zst, "zstd-compressed: decompress it first (zstd -d)"),
                       (rec, "already a recording: replay, check or export it")):  # fmt: skip
        assert main(["import", path, "-o", str(tmp_path / "out.npt")]) == 2
        assert capsys.readouterr().err == f"npu-trace: {path}: {said}\n"


def test_an_input_that_cannot_be_opened_is_one_line(tmp_path: Any) -> None:
    """The first bytes are read to tell a compressed file: a file that cannot be opened (no permission: here a
    folder, which no open() reads either) says so in one line, as reading its text does."""
    from npu_trace.commands.import_cmd import _not_packed
    from npu_trace.errors import InputError

    with pytest.raises(InputError, match=f"^cannot read {tmp_path}: Is a directory$"):
        _not_packed(str(tmp_path))
