"""The benchmarks still run (npu-trace parts only, tiny sizes): ingest with npu-trace record and its replay/check,
and the check figures. Never asserts a timing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def need_tracefs() -> None:
    if os.geteuid() != 0:
        pytest.skip("the benchmark needs root (tracefs instances)")
    if not os.path.exists("/sys/kernel/tracing/available_events"):
        pytest.skip("tracefs is not mounted at /sys/kernel/tracing")


def run_ingest(
    tmp_path: object, *options: str, module: str = "benchmarks.ingest"
) -> Tuple[subprocess.CompletedProcess[str], Dict[str, Any]]:
    """`python -m MODULE OPTIONS --repeat 1 --no-anchor --json OUT` (the ingest bench's workload A in 1 round,
    `--stream-repeat 1`): its process and figures."""
    need_tracefs()
    out_json = os.path.join(str(tmp_path), "bench.json")
    proc = subprocess.run(
        [sys.executable, "-m", module, *options, "--repeat", "1", "--no-anchor", "--json", out_json,
         *(["--stream-repeat", "1"] if module == "benchmarks.ingest" else [])],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "instances left behind" not in proc.stdout
    with open(out_json) as f:
        return proc, json.load(f)


@pytest.mark.privileged
def test_bench_npu_trace_part_runs(tmp_path: object) -> None:
    proc, result = run_ingest(tmp_path, "--events", "20000", "--no-sweep", "--no-sim", "--no-check")
    row = re.search(r"^npu-trace\s+([\d,]+)\s+([\d,]+)\s", proc.stdout, re.M)
    assert row, proc.stdout
    assert int(row.group(1).replace(",", "")) + int(row.group(2).replace(",", "")) > 0
    # npu-trace record (tiny) and the replay/check of its recording ran in the same run
    rec = re.search(r"^npu-record\s+([\d,]+)\s+([\d,]+)\s", proc.stdout, re.M)
    assert rec, proc.stdout
    assert int(rec.group(1).replace(",", "")) + int(rec.group(2).replace(",", "")) > 0
    record = result["record"]
    assert record["npt"]["file"] > 0
    assert record["replay"]["events"] > 0
    assert record["check"]["events"] == record["replay"]["events"]
    assert {t["name"] for t in record["targets"]} >= {"record lossless rate", "check rate"}
    assert proc.stdout.count("targets: ") >= 3


def test_walk_benchmark_runs() -> None:
    """The page walker's micro-benchmark prints its rows (tiny N; no figure is judged)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.walk", "--records", "5000", "--python-records", "2000"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in ("PageDecoder.decode", "walk (C) + gather", "walk (C)", "walk (Python)"):
        assert len(re.findall(rf"^{re.escape(row)} +[\d.]+ ns/record", proc.stdout, re.M)) == 2, proc.stdout


@pytest.mark.privileged
def test_bench_check_part_runs(tmp_path: object, sim_loaded: Any) -> None:
    """The check figures (benchmarks.checks): the simulator recorded (1 s of the detector-heavy workload), a small
    generated recording, both checked. The simulator loaded (and held) by the fixture: the bench leaves it so."""
    _, result = run_ingest(tmp_path, "--check-only", "--gen-events", "20000", "--heavy-duration", "1")
    check = result["check"]
    heavy, gen = check["detector_heavy"]["npu_check"], check["generated"]["npu_check"]
    assert check["detector_heavy"]["workload"] == "mixed, 8 devices, 20000 calls/s, 1 s"
    assert heavy["read"] == heavy["total"] == check["detector_heavy"]["expected_events"] > 20_000
    assert gen["read"] == gen["total"] == check["generated"]["events"] > 10_000
    assert gen["rss_mib"] > 0 and heavy["lost"] == 0
    assert {t["name"] for t in check["targets"]} >= {"check rate, detector-heavy", "check peak RSS"}


@pytest.mark.privileged
def test_bench_live_part_runs(tmp_path: object) -> None:
    """The live task workload (benchmarks.live), slow enough to lose nothing: every path sees every event, and
    the analysis counts what the workload says it made (calls paired, each task's completion matched)."""
    _, result = run_ingest(tmp_path, "--events", "30000", "--rate", "100000", module="benchmarks.live")
    runs = {name: figs[0] for name, figs in result["runs"].items()}
    assert set(runs) == {"stream decode", "decode to objects", "live analysis", "TUI worker", "TUI replay"}
    for name, fig in runs.items():
        assert (fig["events"], fig["lost"]) == (30_000, 0), name
    analysis, others = runs["live analysis"], runs["live analysis"]["other_events"]
    assert analysis["truth"] == {"call": 20_000, "submit": 5_000, "complete": 5_000}
    extra = {kind: n - analysis["truth"][kind] for kind, n in analysis["by_kind"].items()}
    assert min(extra.values()) >= 0 and sum(extra.values()) == others  # another process's syscalls only add
    if not others:  # (none makes them: see gen_tasks.c)
        assert analysis["unpaired"] == {"unpaired_entries": 0, "unpaired_returns": 0, "unmatched_completes": 0}
        assert runs["TUI worker"]["by_kind"] == {"call pairs": 10_000, "tasks completed": 5_000}
    assert {t["name"] for t in result["targets"]} >= {"TUI worker at >= 1 M ev/s offered, zero backlog"}


def test_bench_export_runs_and_states_its_rates_beside_check(tmp_path: Any) -> None:
    out_json = os.path.join(str(tmp_path), "export.json")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.export", "--events", "20000", "--repeat", "1", "--json", out_json],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out_json) as f:
        result = json.load(f)
    assert result["events"] > 10_000 and set(result["figures"]) == {"check", "perfetto", "chrome-json"}
    assert all(fig["rss_mib"] > 0 for fig in result["figures"].values())
    assert re.search(r"^perfetto\s+[\d,]+\s+[\d.]+x", proc.stdout, re.M), proc.stdout


@pytest.mark.parametrize("option", [["--repeat", "0"], ["--events", "-1"]])
def test_export_bench_refuses_a_count_that_is_not_positive(option: List[str], capsys: Any) -> None:
    from benchmarks.export import main

    with pytest.raises(SystemExit) as exc:
        main(option)
    assert exc.value.code == 2 and "--events and --repeat must be positive" in capsys.readouterr().err


def test_export_bench_bound_is_the_cpus_times_checks_wall_over_the_exports_cpu() -> None:
    from benchmarks.export import bounds

    figs = {"check": {"events_per_s": 4e6}, "perfetto": {"cpu_ns_per_event": 700.0},
            "chrome-json": {"cpu_ns_per_event": 0.0}}  # fmt: skip
    assert bounds(figs, 2) == [
        "bound: perfetto at 700 ns of CPU an event on 2 CPUs: at most 0.71x check (check: 250 ns of wall an "
        "event) however its work is split; 0.7x needs at most 714 ns of CPU an event"
    ]  # chrome-json: no CPU measured (start-up noise on a tiny recording), no bound
    assert bounds({"check": {"events_per_s": 0.0}, "perfetto": {}, "chrome-json": {}}, 2) == []
