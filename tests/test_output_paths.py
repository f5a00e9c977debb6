"""`replay --headless` prints what the reference path prints, byte for byte, text and NDJSON, as fast as it reads
(--max: recorded chunks walked whole) and at a pace (the pump's batches): every simulator scenario, the golden
capture of this kernel, imported logs, a recording with a device scope, corrupted copies of the golden pages
(records no format describes among them); the lines assembled by the compiled path and by the pure-Python
one. Every record read is printed (the summary's count is the lines'), the malformed ones are counted by
reason.

The reference (tests/reference/replay.py) decodes each record into an object, orders the objects with the
per-item merge and prints them one by one; the production path walks the pages, orders columns and makes each
format's lines from its columns.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import tempfile
from typing import Any, List, Tuple
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from goldens import load_pages
from npu_trace import cli
from npu_trace.pipeline.scope import Applied, Scope
from npu_trace.process import StopFlag
from npu_trace.sim.scenarios import SCENARIOS
from reference.replay import replay_lines
from test_check_paths import LOGS, PAGES, scenario_recording
from test_recording import ROOT, golden_header, write
from test_timeline import HEADER, reads, spread, synth_header, write_batches

FORMATS = ("text", "ndjson")


def replay(path: str, fmt: str, *pace: str, compiled: bool = True) -> Tuple[str, str]:
    """`npu-trace replay --headless --format FMT PATH` in this process (its signal handlers and GC tuning left
    out: they are the process's): (stdout, stderr). Not `compiled`: the lines made by the pure-Python path (as
    where the extension was not built)."""
    out, err = io.StringIO(), io.StringIO()
    quiet = mock.patch("npu_trace.commands.replay.prepare_process", StopFlag)
    python = contextlib.nullcontext() if compiled else mock.patch("npu_trace.sinks.text._lines", None)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), quiet, python:
        code = cli.main(["replay", "--headless", "--format", fmt, *pace, path])
    assert code == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def unformatted_count(err: str) -> int:
    found = re.search(r"(\d+) of them shown by their fields", err)
    return int(found.group(1)) if found else 0


def replayed_count(err: str) -> int:
    found = re.search(r"replayed (\d+) events", err)
    assert found, err
    return int(found.group(1))


def same_output(path: str, paced: bool = True) -> Tuple[str, str]:
    """Both formats, --max (and paced): the reference's lines; the summary's count is the reference's records
    read. Returns the NDJSON output and its summary."""
    for fmt in FORMATS:
        want, records, unformatted = replay_lines(path, fmt)
        for pace in (["--max"], ["--speed", "1e12"])[: 2 if paced else 1]:
            got, err = replay(path, fmt, *pace)
            assert got == want
            assert replayed_count(err) == records
            assert unformatted_count(err) == unformatted
        assert replay(path, fmt, "--max", compiled=False)[0] == want  # the lines' pure-Python path
    return replay(path, "ndjson", "--max")


def record_lines(ndjson: str) -> int:
    """Lines of trace records (a record has its task's name; a loss or another channel's event has none)."""
    return sum(1 for line in ndjson.splitlines() if "comm" in json.loads(line))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_prints_as_the_reference_prints_it(tmp_path: Any, scenario: str) -> None:
    path = str(tmp_path / f"{scenario}.npt")
    scenario_recording(path, scenario, 3)
    text, err = same_output(path, paced=scenario == "mixed")
    assert record_lines(text) == replayed_count(err) > 1000  # every record read is printed


def test_the_golden_capture_prints_as_the_reference_prints_it(tmp_path: Any) -> None:
    path = str(tmp_path / "golden.npt")
    write(path, load_pages(ROOT), per_chunk=3)
    text, err = same_output(path)
    assert '"ftrace:print"' in text and '"sched:sched_switch"' in text
    assert record_lines(text) == replayed_count(err) > 100


def test_imported_logs_print_as_the_reference_prints_them(tmp_path: Any) -> None:
    path = str(tmp_path / "imported.npt")
    assert cli.main(["import", os.path.join(LOGS, "dmesg-device-abnormal.txt"), "--tz", "+00:00", "-o", path]) == 0
    text, _ = same_output(path)
    assert '"kmsg:' in text


def test_a_scoped_recording_prints_what_its_scope_keeps_as_the_reference_does(tmp_path: Any) -> None:
    """A device scope applied after normalization (a return goes with its entry's device): the scope's count
    of what it left out is said, the rest printed."""
    events = __import__("npu_trace.sim.synth", fromlist=["synth_events"]).synth_events(
        __import__("npu_trace.sim.scenarios", fromlist=["plan"]).plan("spikes", 2, 1.0, 2000, 2))
    per_cpu = spread(events, 2, 2)
    from npu_trace.ftrace.encode import PageEncoder

    enc = PageEncoder(HEADER)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    header = synth_header(2)
    header["profile"] = "sim"
    header["scope"] = Scope(devices=(1,), applied=Applied()).header()
    path = str(tmp_path / "scoped.npt")
    write_batches(path, header, reads(pages, [], random.Random(2), events[-1].ts_ns + 1), 16 << 10)
    text, err = same_output(path)
    left = re.search(r"(\d+) left out by the scope \(device (\d+)\)", err)
    assert left and int(left.group(1)) > 100, err
    assert record_lines(text) + int(left.group(1)) == replayed_count(err)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, len(PAGES) - 1), st.one_of(st.integers(0, 63), st.integers(0, 4095)),
                                st.integers(0, 255)), min_size=1, max_size=12))  # fmt: skip
@example(flips=[(0, 7, 128), (0, 20, 0)])  # a page stamp past 2**63 - 1 over a record of an id no format describes
def test_corrupted_pages_print_as_the_reference_prints_them(tmp_path: Any, flips: List[Tuple[int, int, int]]) -> None:
    """Bytes of the golden pages changed at random: malformed records (each a loss line, counted by its
    reason), records of ids no format describes (their bytes), stamps gone backwards. The same lines."""
    pages = [(cpu, bytearray(page)) for cpu, page in PAGES]
    for index, offset, value in flips:
        pages[index][1][offset % len(pages[index][1])] = value
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "corrupt.npt")
    write(path, [(cpu, bytes(page)) for cpu, page in pages], chunk_bytes=4 * 4096, header=golden_header())
    text, _ = same_output(path, paced=False)
    for line in map(json.loads, text.splitlines()):
        if "malformed" in str(line.get("kind")):
            assert re.fullmatch(r"malformed:[a-z_]+", line["kind"]), line  # the reason, on the loss's own line


def test_a_malformed_page_is_counted_by_its_reason_in_the_summary(tmp_path: Any) -> None:
    pages = [(cpu, bytearray(page)) for cpu, page in PAGES]
    pages[0][1][8:16] = (9000).to_bytes(8, "little")  # a commit past the page's end
    path = str(tmp_path / "commit.npt")
    write(path, [(cpu, bytes(page)) for cpu, page in pages], header=golden_header())
    text, err = same_output(path, paced=False)
    assert "tracefs/malformed:commit_past_page/cpu" in err and '"kind": "malformed:commit_past_page"' in text


def test_ndjson_lines_are_json(tmp_path: Any) -> None:
    path = str(tmp_path / "golden.npt")
    write(path, load_pages(ROOT))
    out, _ = replay(path, "ndjson", "--max")
    assert all(isinstance(json.loads(line), dict) for line in out.splitlines())


def test_a_record_no_format_describes_is_printed_as_its_bytes_and_counted(tmp_path: Any) -> None:
    """A record whose event id the recording has no format for (a damaged id here; an event traced without its
    format elsewhere): printed as trace-cmd report prints an unknown event, its bytes, and said in the summary;
    the lines still equal the records read."""
    from npu_trace.ftrace import walk as W

    pages = [(cpu, bytearray(page)) for cpu, page in PAGES]
    header = golden_header()
    walk = W.walk_py(bytes(pages[0][1]), [(0, len(pages[0][1]))], HEADER, 0, W.WalkState())
    for offset in walk.offset[:3].tolist():
        pages[0][1][offset : offset + 2] = (40000).to_bytes(2, "little")
    path = str(tmp_path / "unknown.npt")
    write(path, [(cpu, bytes(page)) for cpu, page in pages], header=header)
    ndjson, err = same_output(path)
    assert ndjson.count('"event": "unknown:40000"') == 3
    assert "3 of them shown by their fields" in err
    assert record_lines(ndjson) == replayed_count(err)
    text, _ = replay(path, "text", "--max")
    assert text.count("[UNKNOWN TYPE 40000]") == 3


@pytest.mark.parametrize("name", ["demo", "own"])
def test_the_shipped_recordings_print_as_the_reference_prints_them(name: str) -> None:
    """The demo recording the package ships (the simulator with its kmsg, uevent and npu-smi channels) and the
    recording kept beside the trace.dat files (tests/data/tracedat/own.npt)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = {"demo": os.path.join(here, "..", "npu_trace", "data", "demo.npt"),
            "own": os.path.join(here, "data", "tracedat", "own.npt")}[name]  # fmt: skip
    ndjson, err = same_output(path)
    assert record_lines(ndjson) == replayed_count(err) > 100


def test_an_imported_tracedat_prints_as_the_reference_prints_it(tmp_path: Any) -> None:
    """A trace.dat trace-cmd recorded (tests/data/tracedat/trace-v7.dat), imported: its pages replayed."""
    path = str(tmp_path / "v7.npt")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tracedat", "trace-v7.dat")
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["import", src, "-o", path]) == 0
    ndjson, err = same_output(path)
    assert record_lines(ndjson) == replayed_count(err) > 100


@pytest.mark.parametrize("name", ["langraph-stacks.dat", "lisa-rtapp.dat.zst"])
def test_public_tracedats_print_as_the_reference_prints_them(tmp_path: Any, name: str) -> None:
    """trace.dat files other people recorded (tests/data/tracedat-public: kernel stacks, trace_printk, trace
    markers by the kernel's tables, sched and irq events), imported: the special formatters' text and the
    rest's fields, as the reference prints them one event at a time."""
    import zstandard

    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tracedat-public", name)
    dat = str(tmp_path / "trace.dat")
    with open(src, "rb") as f, open(dat, "wb") as out:
        out.write(zstandard.ZstdDecompressor().stream_reader(f).read() if name.endswith(".zst") else f.read())
    path = str(tmp_path / "public.npt")
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["import", dat, "-o", path]) == 0
    ndjson, err = same_output(path, paced=False)
    assert record_lines(ndjson) == replayed_count(err) > 1000
    assert '"text": ' in ndjson  # the ftrace system's own events, by their formatters
