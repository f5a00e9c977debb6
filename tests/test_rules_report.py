"""check's rules (TOML schema, defaults, errors with file and line), reports (text, JSON, JUnit) and diff."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from typing import Any, Dict, List

import pytest

from npu_trace.ci.check_report import build_report, render_json, render_junit, render_text
from npu_trace.commands.diff import compare
from npu_trace.commands.record import parse_size
from npu_trace.detectors.rules import Rules, RulesError, evaluate, parse_rules


def finding(kind: str, ts: int = 1, dev: int = 0, op: str = "halMemAlloc") -> Dict[str, Any]:
    return {"kind": kind, "device": dev, "op": op, "ts_ns": ts, "details": {"latency_ns": 5}}


def test_defaults_are_a_ci_gate() -> None:
    rules = Rules()
    findings = [finding("spike"), finding("spike"), finding("leak")]
    assert evaluate(rules, findings, {}, 0, False) == []
    bad = [finding("timeout"), finding("alloc_fail"), finding("reset_sequence")]
    assert sorted(v.rule for v in evaluate(rules, bad, {}, 0, False)) == ["alloc_fail", "reset_sequences", "timeouts"]
    assert [v.rule for v in evaluate(rules, [], {}, 3, True)] == ["loss"]
    cut = {"kind": "truncated", "device": None, "op": "recording", "ts_ns": 9, "details": {"where": "byte 42"}}
    (v,) = evaluate(rules, [cut], {}, 0, False)
    assert (v.rule, v.message) == ("truncated", "the recording is cut: byte 42")
    assert evaluate(parse_rules("[truncated]\nallowed = true\n"), [cut], {}, 0, False) == []


def test_rules_file_overrides() -> None:
    rules = parse_rules(
        "[timeouts]\nmax = 2\n[spikes]\nmax = 1\n[loss]\nallowed = true\n"
        "[latency.p99_max_ns]\nhalMemAlloc = 1_000_000\n"
    )
    findings = [finding("timeout"), finding("timeout"), finding("spike"), finding("spike")]
    got = evaluate(rules, findings, {"halMemAlloc": 2_000_000, "halMemFree": 9}, 5, True)
    assert [(v.rule, v.count) for v in got] == [("spikes", 2), ("latency.halMemAlloc", 1)]


def test_health_rules_heartbeat_ecc_and_link() -> None:
    """ "no heartbeat lost", "ECC delta below N", "link at full width", as rules."""
    rules = parse_rules(
        "[timeouts]\nmax = -1\nmax_by_op = { heartbeat = 0 }\n[link_degraded]\nmax = 0\n"
        "[ecc]\nmax_ce_delta = 100\nmax_uce_delta = 0\n"
    )
    findings = [
        finding("timeout", op="heartbeat"),
        finding("timeout", op="mbox"),
        finding("link_degraded", op="pcie_link"),
    ]
    health = {"0": {"ce_delta": 255, "uce_delta": 1}, "1": {"ce_delta": 3, "uce_delta": 0}}
    got = [(v.rule, v.count) for v in evaluate(rules, findings, {}, 0, False, health)]
    assert got == [("link_degraded", 1), ("timeouts.max_by_op.heartbeat", 1), ("ecc.max_ce_delta", 255),
                   ("ecc.max_uce_delta", 1)]  # fmt: skip
    assert evaluate(rules, [finding("timeout", op="mbox")], {}, 0, False, {"0": {"ce_delta": 100}}) == []
    assert rules.as_dict()["max_by_op"] == {"timeouts": {"heartbeat": 0}}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[timeouts]\nmax = 'two'\n", "rules.toml:2: timeouts.max"),
        ("[loss]\nallowed = 1\n", "rules.toml:2: loss.allowed"),
        ("[truncated]\nallowed = 'yes'\n", "rules.toml:2: truncated.allowed"),
        ("\n\n[nosuch]\nmax = 1\n", "rules.toml:3: nosuch"),
        ("[latency.p99_max_ns]\nhalMemAlloc = -5\n", "rules.toml:2: latency.p99_max_ns.halMemAlloc"),
        ("[spikes]\nlimit = 3\n", "rules.toml:2: spikes.limit"),
        ("[timeouts\n", "rules.toml: not valid TOML"),
        ("[timeouts]\nmax_by_op = { heartbeat = -1 }\n", "rules.toml:2: timeouts.max_by_op.heartbeat"),
        ("[ecc]\nmax_delta = 3\n", "rules.toml:2: ecc.max_delta"),
    ],
)
def test_bad_rules_name_file_line_and_expectation(text: str, where: str) -> None:
    with pytest.raises(RulesError) as err:
        parse_rules(text)
    assert str(err.value).startswith(where)
    assert "expected" in str(err.value) or "TOML" in str(err.value)


def _report(findings: List[Dict[str, Any]]) -> Dict[str, Any]:
    rules = Rules()
    analysis = {"findings": findings, "summary": {"events": {"total": 3}}}
    violations = evaluate(rules, findings, {}, 0, False)
    return build_report("run.npt", analysis, rules, violations, {"truncated": False, "lost": 0})


def test_reports_are_deterministic_and_well_formed() -> None:
    findings = [finding("spike", 10), finding("timeout", 20, op="heartbeat")]
    a, b = _report(findings), _report([dict(f) for f in findings])
    assert render_json(a) == render_json(b)
    data = json.loads(render_json(a))
    assert data["verdict"] == "fail" and data["violations"][0]["rule"] == "timeouts"
    assert {f["kind"] for f in data["findings"]} == {"spike", "timeout"}
    text = render_text(a)
    assert text.startswith("npu-trace check run.npt: FAIL") and "1 spike, 1 timeout" in text
    suite = ET.fromstring(render_junit(a, Rules()))
    assert suite.get("failures") == "1" and int(suite.get("tests", "0")) >= 6
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert failed == ["timeouts (at most 0)"]


def test_diff_verdicts() -> None:
    a = [{"op": "x", "count": 10, "p50_ns": 1000, "p99_ns": 100_000, "max_ns": 1},
         {"op": "y", "count": 10, "p50_ns": 1000, "p99_ns": 100_000, "max_ns": 1},
         {"op": "gone", "count": 1, "p50_ns": 1, "p99_ns": 1, "max_ns": 1}]  # fmt: skip
    b = [{"op": "x", "count": 10, "p50_ns": 1000, "p99_ns": 150_000, "max_ns": 1},
         {"op": "y", "count": 10, "p50_ns": 1000, "p99_ns": 105_000, "max_ns": 1},
         {"op": "new", "count": 1, "p50_ns": 1, "p99_ns": 1, "max_ns": 1}]  # fmt: skip
    verdicts = {r["op"]: r["verdict"] for r in compare(a, b, 10.0, 10_000)}
    assert verdicts == {"x": "regression", "y": "same", "gone": "gone", "new": "new"}


@pytest.mark.parametrize(("text", "size"), [("512", 512), ("4k", 4096), ("2M", 2 << 20), ("1.5GiB", 3 << 29)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["0.1", "0", "0.5", "x", ""])
def test_a_size_of_no_byte_is_refused(text: str) -> None:
    """0.1 passed the positive check as a float and was 0 bytes once made whole (--keep-bytes 0.1: keep none)."""
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        parse_size(text)


def test_the_readme_rules_example_is_valid() -> None:
    import os

    with open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    rules = parse_rules(block)
    assert rules.p99_max_ns == {"halMemAlloc": 2_000_000} and rules.max_counts["spikes"] == -1


def test_the_text_report_says_when_threads_holding_memory_belong_to_no_known_process() -> None:
    report = _report([])
    assert "no known process" not in render_text(report)
    report["summary"]["memory"] = {"unattributed_threads": 9, "unattributed": list(range(501, 509))}
    line = [ln for ln in render_text(report).splitlines() if "no known process" in ln]
    assert line == ["  note: 9 threads holding device memory belong to no known process (ids 501, 502, 503, 504, "
                    "505, 506, 507, 508, ...): each counted as its own process (a lost newtask event, or a thread "
                    "of an earlier file of a rotation)"]  # fmt: skip
