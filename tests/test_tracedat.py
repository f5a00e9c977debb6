"""A trace.dat trace-cmd recorded (v7, v6) imported as a recording gives what npu-trace's own recording of the
same run gives: the same events (times aside), no loss, the same findings (times within the instances' stamping
skew). The files are one real run (tests/data/tracedat/README.md; tests/make_tracedat.py rewrites them)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import zstandard

from test_import_privileged import check, event_kinds, resets, same_findings

DATA = os.path.join(os.path.dirname(__file__), "data", "tracedat")
CLI = [sys.executable, "-m", "npu_trace"]


def tracedat(version: str, tmp_path: Any) -> str:
    if version == "7":
        return os.path.join(DATA, "trace-v7.dat")
    out = str(tmp_path / "trace-v6.dat")
    with open(os.path.join(DATA, "trace-v6.dat.zst"), "rb") as f, open(out, "wb") as dat:
        dat.write(zstandard.ZstdDecompressor().decompress(f.read()))
    return out


@pytest.mark.parametrize("version", ["7", "6"])
def test_a_tracedat_recorded_by_trace_cmd_gives_npu_traces_findings(tmp_path: Any, version: str) -> None:
    own, imported = os.path.join(DATA, "own.npt"), str(tmp_path / "imported.npt")
    proc = subprocess.run([*CLI, "import", tracedat(version, tmp_path), "-o", imported], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    mine, theirs = check(own, str(tmp_path / "own.json")), check(imported, str(tmp_path / "imp.json"))
    assert theirs["reading"]["lost"] == 0 and mine["reading"]["lost"] == 0
    assert theirs["reading"]["events"] == mine["reading"]["events"] > 0
    assert theirs["reading"]["kernel"] == mine["reading"]["kernel"]
    assert event_kinds(own) == event_kinds(imported)
    assert resets(mine) and same_findings(theirs["findings"], mine["findings"])
