"""A generated recording (benchmarks.gen_recording, small here) is a valid recording of the simulator: `npu-trace
check` reads every event written and finds exactly what its truth says, on two CPUs, without loss; the same
seed gives the same bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any, Dict, Tuple

import pytest

from benchmarks.gen_recording import Generated, Spec, expectations_from_json, generate, main, truth_path
from npu_trace.device import hal
from npu_trace.events import TraceEvent
from npu_trace.recording import RecordingReader
from reference.pages import iter_events
from test_detectors_truth import check_against_truth

SMALL = Spec(duration_s=3.0, rate=3000.0)  # mixed, 8 devices, host-like on CPUs 0 and 1: ~13,000 events
CLI = [sys.executable, "-m", "npu_trace"]


@pytest.fixture(scope="module")
def small(tmp_path_factory: Any) -> Generated:
    return generate(str(tmp_path_factory.mktemp("gen") / "small.npt"), SMALL)


def check(path: str) -> Tuple[int, Dict[str, Any]]:
    out = path + ".report.json"
    proc = subprocess.run([*CLI, "check", path, "--json", out, "--quiet"], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    with open(out) as f:
        return proc.returncode, json.load(f)


def test_check_finds_exactly_the_truth_and_reads_every_event(small: Generated) -> None:
    rc, report = check(small.path)
    check_against_truth(report, small.expectations)
    assert rc == 1 and {v["rule"] for v in report["violations"]} == {"alloc_fail", "reset_sequences", "timeouts"}
    reading = report["reading"]
    assert reading["events"] == small.events and report["summary"]["events"]["total"] == small.events
    assert reading["lost"] == 0 and not reading["truncated"] and not reading["incomplete"]
    kinds = report["summary"]["events"]["by_kind"]
    assert {"call", "submit", "complete", "irq", "alloc", "alloc_fail", "free", "timeout", "ecc", "reset_step"} <= set(
        kinds
    )
    assert len(small.expectations["resets"]) == 1 and small.expectations["alloc_fail"]


def test_the_file_holds_the_events_written_on_both_cpus_with_the_kernels_formats(small: Generated) -> None:
    reader = RecordingReader(small.path)
    events = [e for e in iter_events(reader) if isinstance(e, TraceEvent)]
    assert Counter(e.fmt.name for e in events) == small.by_event and len(events) == small.events
    assert {e.cpu for e in events} == {0, 1} and reader.header["trace_cpus"] == [0, 1]
    assert {e.fmt.system for e in events} == {"ascend"} and {e.fmt.id for e in events if e.fmt.name ==
                                                             "ascend_halSqTaskSend"} == {2330}  # fmt: skip
    assert set(small.by_event) == {e.split(":")[1] for e in hal.event_names()}  # every probe of the simulator
    assert reader.trailer is not None and reader.trailer["chunks"] == small.chunks > 1


def test_same_seed_same_bytes_and_the_command_line_writes_the_truth(small: Generated, tmp_path: Any) -> None:
    again = str(tmp_path / "again.npt")
    assert main([again, "--duration", "3", "--rate", "3000"]) == 0
    with open(small.path, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()
    with open(truth_path(again)) as f:
        truth = json.load(f)
    assert expectations_from_json(truth["expectations"]) == small.expectations
    assert truth["events"] == small.events and truth["by_event"] == dict(small.by_event)
    other = generate(str(tmp_path / "other.npt"), Spec(duration_s=3.0, rate=3000.0, seed=2))
    with open(small.path, "rb") as a, open(other.path, "rb") as b:
        assert a.read() != b.read()
