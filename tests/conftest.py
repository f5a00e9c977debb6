"""Test policy shared by every test.

`@pytest.mark.privileged` marks a test that needs root and a real kernel feature (tracefs, uprobes, bcc...).
Such a test skips when it cannot run (it is skipped automatically when not root).
With NPU_TRACE_REQUIRE_PRIVILEGED=1 (set by .ci/run) a skipped privileged test becomes a failure that carries
the skip reason: CI must exercise the real kernel paths, not skip them silently.
Skip inside the test or a fixture (pytest.skip), not at module level: a module-level skip happens at
collection, before any test exists to fail.
"""

from __future__ import annotations

import os
from typing import Any, Generator

import pytest

pytest_plugins = ["pytester"]

REQUIRE_ENV = "NPU_TRACE_REQUIRE_PRIVILEGED"


def require_privileged() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "privileged: needs root and a real kernel feature; skipped outside CI, a failure in CI",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("privileged") and os.geteuid() != 0:
        pytest.skip("privileged test: needs root")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not (report.skipped and require_privileged() and item.get_closest_marker("privileged")):
        return
    if hasattr(report, "wasxfail"):
        return
    report.outcome = "failed"
    report.longrepr = f"privileged test skipped while {REQUIRE_ENV}=1 (CI requires it to run): {_skip_reason(report)}"


@pytest.fixture(scope="module")
def sim_loaded() -> Generator[Any, None, None]:
    """The simulated NPU's uprobe events registered (tracefs found or mounted); unloaded afterwards only if
    this fixture loaded them. Use from privileged tests (it needs root)."""
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs

    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    yield fs
    if not was_loaded:
        sim.unload(fs)


@pytest.fixture(scope="session")
def promtool() -> str:
    """Debian's promtool (the `prometheus` package scripts/setup installs), or a skip."""
    import shutil

    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is missing: scripts/setup installs Debian's prometheus package")
    return path
