"""`check` on many recordings (central CI replay of a fleet's dumps): several files or a directory, checked in
parallel processes, one JUnit file with a test suite per recording, one JSON summary; the same verdicts as
checking each alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any, Dict, List

import pytest

from npu_trace.ci.check_report import render_json
from npu_trace.ci.checking import check_many, check_recording, recordings, report_names
from npu_trace.detectors.rules import parse_rules, rule_names
from npu_trace.errors import InputError
from test_check_paths import scenario_recording

CLI = [sys.executable, "-m", "npu_trace"]
# the recordings' synthesized kmsg heartbeat timeouts (and the faults they tell) are allowed; resets are not
RULES_TEXT = "[timeouts]\nmax = 100\n[kernel_faults]\nmax = -1\n[device_faults]\nmax = -1\n"
RULES = parse_rules(RULES_TEXT)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: Any) -> Dict[str, str]:
    """Three hosts' recordings: a quiet one, one with a reset, one that is not a recording at all."""
    root = tmp_path_factory.mktemp("fleet")
    paths = {}
    for host, scenario in (("host-a", "steady"), ("host-b", "ecc-reset")):
        os.makedirs(root / host)
        paths[host] = str(root / host / "run.npt")
        scenario_recording(paths[host], scenario, 5)
    os.makedirs(root / "host-c")
    paths["host-c"] = str(root / "host-c" / "run.npt")
    with open(paths["host-c"], "wb") as f:
        f.write(b"not a recording\n" * 10)
    (root / "host-c" / "flight-x.npt.partial").write_bytes(b"")  # an unfinished dump: not checked
    paths["root"] = str(root)
    paths["rules"] = str(tmp_path_factory.mktemp("rules") / "rules.toml")
    with open(paths["rules"], "w") as f:
        f.write(RULES_TEXT)
    return paths


def test_parallel_reports_equal_the_reports_of_each_alone(fleet: Dict[str, str]) -> None:
    paths = [fleet["host-a"], fleet["host-b"]]
    together = check_many(paths, RULES, jobs=2)
    names = report_names(paths)
    assert names == ["host-a/run.npt", "host-b/run.npt"]  # the same file name: told apart by their directories
    for outcome, path, name in zip(together, paths, names):
        alone = check_recording(path, RULES, progress=False, name=name)
        assert outcome.report is not None and render_json(outcome.report) == render_json(alone)
    assert [o.report["verdict"] for o in together if o.report] == ["pass", "fail"]


def test_a_directory_is_every_recording_below_it(fleet: Dict[str, str]) -> None:
    assert recordings([fleet["root"]]) == [fleet["host-a"], fleet["host-b"], fleet["host-c"]]
    with pytest.raises(InputError, match="no such file or directory"):
        recordings([fleet["root"] + "/nothing"])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "check", *args], capture_output=True, text=True, timeout=300)


def test_one_junit_file_and_one_summary_for_a_directory(fleet: Dict[str, str], tmp_path: Any) -> None:
    junit, summary = str(tmp_path / "junit.xml"), str(tmp_path / "summary.json")
    proc = cli(fleet["root"], "--rules", fleet["rules"], "--junit", junit, "--json", summary, "--jobs", "2")
    assert proc.returncode == 2, proc.stderr  # one recording could not be read: an input error
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("PASS host-a/run.npt") and lines[1].startswith("FAIL host-b/run.npt")
    assert any(line.startswith("ERROR host-c/run.npt") for line in lines)
    assert lines[-1] == "3 recordings: 1 pass, 1 fail, 1 error"
    assert "npu-trace: host-c/run.npt: " in proc.stderr and "Traceback" not in proc.stderr
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"npu-trace check host-{h}/run.npt" for h in "abc"]
    rules = len(rule_names(RULES))
    assert [len(s.findall("testcase")) for s in suites] == [rules, rules, 1]
    assert suites[0].get("failures") == "0" and int(suites[1].get("failures") or 0) >= 1
    assert suites[2].find("testcase/error") is not None
    assert int(root.get("tests") or 0) == 2 * rules + 1 and root.get("errors") == "1"
    with open(summary) as f:
        data = json.load(f)
    assert data["verdict"] == "error" and data["totals"] == {"recordings": 3, "pass": 1, "fail": 1, "error": 1}
    rows: List[Dict[str, Any]] = data["recordings"]
    assert rows[1]["findings"]["reset_sequence"] == 1 and rows[1]["violations"]
    assert rows[2]["verdict"] == "error" and rows[2]["error"]


def test_several_files_without_errors_exit_1_on_a_violation(fleet: Dict[str, str]) -> None:
    proc = cli(fleet["host-a"], fleet["host-b"], "-q", "--rules", fleet["rules"])
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    twice = cli(fleet["host-a"], fleet["host-a"], "-q", "--rules", fleet["rules"])  # named twice: checked once
    assert twice.returncode == 0


def test_one_file_keeps_the_single_report(fleet: Dict[str, str]) -> None:
    proc = cli(fleet["host-b"])
    assert proc.returncode == 1 and proc.stdout.startswith("npu-trace check run.npt: FAIL")
