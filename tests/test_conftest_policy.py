"""The privileged-test policy of tests/conftest.py, proved on the real conftest text with pytester."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

INNER_TESTS = """
import pytest

@pytest.mark.privileged
def test_priv_skips_in_call():
    pytest.skip("no tracefs here")

@pytest.mark.privileged
@pytest.mark.skipif(True, reason="no uprobes here")
def test_priv_skips_in_setup():
    pass

def test_plain_skip():
    pytest.skip("unrelated")

@pytest.mark.privileged
@pytest.mark.xfail(reason="known", strict=False)
def test_priv_xfail():
    assert False

def test_plain_pass():
    pass
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, euid: int = 0) -> pytest.RunResult:
    monkeypatch.setattr(os, "geteuid", lambda: euid)  # runpytest is in-process: the inner conftest sees this
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    # no:textual-snapshot: that plugin keeps its temp dir in an environment variable, which an in-process
    # inner session would overwrite and then delete under the outer session; asyncio: not needed there.
    return pytester.runpytest("-rA", "-p", "no:cacheprovider", "-p", "no:textual-snapshot", "-p", "no:asyncio")


def test_privileged_skip_is_a_skip_by_default(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPU_TRACE_REQUIRE_PRIVILEGED", raising=False)
    result = _run(pytester, monkeypatch)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_privileged_skip_fails_when_required(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_TRACE_REQUIRE_PRIVILEGED", "1")
    result = _run(pytester, monkeypatch)
    # the call-phase skip is a failure, the setup-phase skip an error; plain skips and xfails are untouched
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=1, xfailed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*NPU_TRACE_REQUIRE_PRIVILEGED=1*no tracefs here*"])
    result.stdout.fnmatch_lines(["*NPU_TRACE_REQUIRE_PRIVILEGED=1*no uprobes here*"])


def test_privileged_test_skips_without_root(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPU_TRACE_REQUIRE_PRIVILEGED", raising=False)
    result = _run(pytester, monkeypatch, euid=1000)
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(["*needs root*"])


def test_privileged_test_without_root_fails_when_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NPU_TRACE_REQUIRE_PRIVILEGED", "1")
    result = _run(pytester, monkeypatch, euid=1000)
    result.assert_outcomes(passed=1, skipped=1, errors=3)
