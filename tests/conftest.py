"""Test policy shared by every test.

`@pytest.mark.privileged` marks a test that needs root and a real kernel feature (tracefs, uprobes, bcc...).
Such a test skips when it cannot run (it is skipped automatically when not root).
With NPU_TRACE_REQUIRE_PRIVILEGED=1 (set by .ci/run) a skipped privileged test becomes a failure that carries
the skip reason: CI must exercise the real kernel paths, not skip them silently.
Skip inside the test or a fixture (pytest.skip), not at module level: a module-level skip happens at
collection, before any test exists to fail.

Property tests (hypothesis) draw the same examples on every run: each test's own seed, from the test itself, no
example database. A commit's result is then its own, not the luck of a draw: a failure reproduces at the next
run, and two runs of one commit agree. NPU_TRACE_EXPLORE=1 draws new examples at each run (and keeps those that
fail in .hypothesis/): for looking for new failures, which then become @example lines.

Parallel runs (pytest-xdist, `scripts/test` runs `--dist loadgroup`): the tests that touch host-global state
are one group, `HOST_GROUP`, which xdist runs on one worker, one test after another, as a serial run would:
the privileged ones (tracefs, the simulator's uprobe events, /dev/kmsg, uevents, mounts) and those marked
`host` (they run the simulator's executor unprivileged: while another test has its uprobes registered, its
calls would land in that test's trace). The rest (pure logic on captured bytes, files in their own temporary
directories) run beside them on the other workers. A test outside the group that starts the executor fails
(`_executor_only_in_the_host_group`), on any host and in any order, not only when it happens to run beside a
trace.
"""

from __future__ import annotations

import os
from typing import Any, Generator, List

import pytest
from hypothesis import settings

pytest_plugins = ["pytester"]

EXPLORE_ENV = "NPU_TRACE_EXPLORE"
settings.register_profile("fixed", derandomize=True, database=None, deadline=None)  # no wall-clock bound: CI is busy
settings.register_profile("explore")
settings.load_profile("explore" if os.environ.get(EXPLORE_ENV, "") == "1" else "fixed")

REQUIRE_ENV = "NPU_TRACE_REQUIRE_PRIVILEGED"
HOST_GROUP = "host"  # the xdist group of the tests that share the host's kernel state


def require_privileged() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "privileged: needs root and a real kernel feature; skipped outside CI, a failure in CI",
    )
    config.addinivalue_line("markers", "host: shares host state with the privileged tests (run in their group)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads xdist_group into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Every privileged or `host` test in HOST_GROUP: under xdist's loadgroup they run serially on one worker."""
    for item in items:
        if item.get_closest_marker("privileged") or item.get_closest_marker("host"):
            item.add_marker(pytest.mark.xdist_group(HOST_GROUP))


OTHER_NICE = 10  # the nice value of the tests beside the host group, in parallel runs as root


def pytest_runtest_setup(item: pytest.Item) -> None:
    _prioritise(item)
    if item.get_closest_marker("privileged") and os.geteuid() != 0:
        pytest.skip("privileged test: needs root")


def in_host_group(item: pytest.Item) -> bool:
    return any(m.args == (HOST_GROUP,) for m in item.iter_markers("xdist_group"))


def _prioritise(item: pytest.Item) -> None:
    """In a parallel run, the host group is the suite's critical path: its tests run one after another and
    mostly wait on real time (scenarios, the kernel's grace periods), but a CPU taken by the tests beside them
    delays each of their steps. As root (who may raise a priority again), those other tests and what they start
    run at nice OTHER_NICE: they take the CPU the host group leaves. Niceness is a thread's, inherited by the
    processes a test starts; a serial run is left as it is."""
    if os.geteuid() != 0 or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    os.setpriority(os.PRIO_PROCESS, 0, 0 if in_host_group(item) else OTHER_NICE)


@pytest.fixture(autouse=True)
def _executor_only_in_the_host_group(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every start of the simulator's executor (npu_trace.sim.runner.ScenarioRun: `sim run`, `sim cluster`,
    `sim cycle`, the tests' scenarios) refused outside HOST_GROUP. The uprobes fire in every process running
    the simulator: an executor started beside a privileged test puts its calls into that test's trace (one
    did, on a busy machine: a `spikes` run's allocations, at the addresses every plan starts from, released
    the weights a shared-weights test was counting)."""
    if in_host_group(request.node):
        return
    from npu_trace.sim import runner

    def refused(*_args: Any, **_kw: Any) -> None:
        pytest.fail(f"{request.node.nodeid} starts the simulator's executor outside the host group: mark it "
                    "`host` (tests/conftest.py)", pytrace=False)  # fmt: skip

    monkeypatch.setattr(runner.ScenarioRun, "__init__", refused)


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
    """The simulated NPU's uprobe events registered (tracefs found or mounted), held enabled by an instance of
    the tests' own while the module runs (tests/uprobe_hold.py: each session's stop then takes 0.03 s, not the
    kernel's 0.75 s); unloaded afterwards only if this fixture loaded them. Use from privileged tests (it needs
    root); a test of loading and unloading the simulator loads it itself."""
    from npu_trace import sim
    from npu_trace.device import hal
    from npu_trace.ftrace.tracefs import Tracefs
    from uprobe_hold import hold, release

    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    holder = hold(fs, hal.GROUP)
    yield fs
    release(fs, holder)
    if not was_loaded:
        sim.unload(fs)


@pytest.fixture
def s3_server(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Generator[Any, None, None]:
    """A real S3-compatible server (s3rver) on 127.0.0.1 with boto3's environment pointed at it
    (tests/s3_support.py)."""
    from s3_support import serve

    yield from serve(tmp_path, monkeypatch)


@pytest.fixture(scope="session")
def promtool() -> str:
    """Debian's promtool (the `prometheus` package scripts/setup installs), or a skip."""
    import shutil

    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is missing: scripts/setup installs Debian's prometheus package")
    return path
