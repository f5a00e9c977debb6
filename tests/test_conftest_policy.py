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


GROUPED_TESTS = """
import os
import pytest

def record(name):
    with open(os.environ["WHERE_FILE"], "a") as f:
        f.write(name + " " + os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")

@pytest.mark.privileged
@pytest.mark.parametrize("n", range(6))
def test_priv(n):
    record(f"priv{n}")

@pytest.mark.host
@pytest.mark.parametrize("n", range(3))
def test_host(n):
    record(f"host{n}")

@pytest.mark.parametrize("n", range(12))
def test_plain(n):
    record(f"plain{n}")
"""


def test_host_state_tests_run_on_one_worker_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`-n 3 --dist loadgroup` (scripts/test): every privileged and `host` test on one worker, one after another."""
    monkeypatch.delenv("NPU_TRACE_REQUIRE_PRIVILEGED", raising=False)
    where = tmp_path / "where.txt"
    monkeypatch.setenv("WHERE_FILE", str(where))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED_TESTS)
    # a subprocess (xdist's workers are processes): root or not, the privileged tests run or skip on one worker
    result = pytester.runpytest_subprocess("-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider",
                                           "-p", "no:textual-snapshot", "-p", "no:asyncio")  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    ran = dict(line.split() for line in where.read_text().splitlines())
    shared = {w for name, w in ran.items() if name.startswith(("priv", "host"))}
    assert len(shared) == 1 and len(ran) == (6 if os.geteuid() == 0 else 0) + 3 + 12, ran
