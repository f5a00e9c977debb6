"""The layering contract (pyproject.toml [tool.importlinter], docs/architecture.md) holds, and would catch a
violation: a deliberate one in a scratch copy of the tree breaks the contract it names."""

from __future__ import annotations

import re
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Run import-linter without the site module: the editable install's import hook would otherwise find the
# checkout's npu_trace whatever the copy holds. The installed packages are put on the path as plain folders.
LINT = (
    "import sys; sys.path[:0] = [sys.argv[1]]; sys.path += sys.argv[2:]; "
    "sys.argv = ['lint-imports', '--no-cache']; from importlinter.cli import lint_imports_command; "
    "lint_imports_command()"
)


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    paths = [*site.getsitepackages(), site.getusersitepackages()]
    return subprocess.run([sys.executable, "-S", "-c", LINT, str(tree), *paths], cwd=tree, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def scratch(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name in ("npu_trace", "tui"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.npt"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    proc = lint(scratch(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 16 kept, 0 broken." in proc.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("npu_trace/sources/comm.py", "from npu_trace.detectors import analysis", "sources never import detectors"),
        ("npu_trace/events.py", "import textual", "npu_trace runs headless"),
        ("npu_trace/sim/scenarios.py", "from npu_trace.sources import live_trace", "the simulator never imports"),
        ("npu_trace/device/hal.py", "from npu_trace.pipeline import merge", "device knowledge imports nothing"),
        ("tui/worker/feed.py", "from tui.ui import app", "worker process never imports textual"),
        ("npu_trace/ci/check_report.py", "from npu_trace.cluster import incidents", "nothing below it imports it"),
        ("npu_trace/sinks/live_metrics.py", "from npu_trace.ci import checking", "sinks import no CI"),
        ("npu_trace/bpf/abi.py", "from npu_trace.sim import build", "kernel readers (ftrace, bpf) import no"),
        ("npu_trace/ci/checking.py", "from npu_trace.export import run", "nothing imports it but the commands"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, contract: Any) -> None:
    tree = scratch(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # a deliberate violation\n")
    proc = lint(tree)
    assert proc.returncode != 0
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken and re.search(r"Contracts: \d+ kept, [1-9]\d* broken", proc.stdout), proc.stdout
