"""The benches' rounds: every tool once per round, the rounds one after another; a ratio taken round by round."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.checks import Job, figure, paired, rounds


def test_each_round_runs_every_tool_once_in_turn_every_other_round_in_reverse(tmp_path: Any) -> None:
    log = tmp_path / "order"
    jobs = {name: Job(["sh", "-c", f"echo {name} >> {log}"]) for name in ("a", "b", "c")}
    got = rounds(jobs, 3)
    assert log.read_text().split() == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert all(len(fig["runs"]) == 3 and fig["wall_s"] > 0 for fig in got.values())


def test_a_tool_that_fails_is_an_error_naming_it() -> None:
    from benchmarks.common import BenchError

    with pytest.raises(BenchError, match=r"^sh -c exit 3 \.\.\. exited with 3$"):
        rounds({"bad": Job(["sh", "-c", "exit 3"])}, 1)
    wrapped = ["sh", "-c", "exit 4", "PEAK", "export", "rec.npt", "-o", "out.json"]  # as npu_trace_argv makes it
    with pytest.raises(BenchError, match=r"^export rec\.npt -o \.\.\. exited with 4$"):
        figure(Job(wrapped, (0,), "PEAK"), [{"rc": 4, "wall_s": 0.1, "cpu_s": 0.1, "rss_mib": 1.0}])


def test_the_ratio_is_taken_round_by_round_less_each_tools_start_up() -> None:
    def fig(*walls: float) -> Any:
        return {"runs": [{"wall_s": w} for w in walls], "wall_s": sorted(walls)[len(walls) // 2]}

    # a: 1000 events in 0.1 s of work each round but the second (0.2 s); b: 1000 events in 0.5 s, then 1.0 s
    a, b = (fig(0.3, 0.4), fig(0.2)), (fig(0.6, 1.1), fig(0.1))
    assert paired(a, 1000, b, 1000) == pytest.approx([5.0, 5.0])
    assert paired((fig(0.2), fig(0.2)), 10, b, 1000) == []  # no work left after the start-up: no ratio


def test_the_stream_bench_judges_the_lossless_rate_round_by_round() -> None:
    """Both tools lossless at full speed in every round: each round's rates compared (the rounds' median judged,
    the ratio of the medians beside it); a round with a loss leaves the ratio of the medians alone."""
    from benchmarks.common import Run, judged_ratio
    from benchmarks.ingest import lossless_rounds

    def run(tool: str, seconds: float, lost: int = 0) -> Run:
        return Run(tool, 1000, 0.0, gen_elapsed_ns=int(seconds * 1e9), events=1000 - lost, lost=lost)

    npu = [run("npu", s) for s in (1.0, 2.0, 1.0)]
    anchor = [run("tc", s) for s in (1.1, 2.2, 0.9)]
    rounds_ = lossless_rounds(npu, anchor)
    assert [round(x, 3) for x in rounds_] == [1.1, 1.1, 0.9]
    judged, text = judged_ratio(0.95, rounds_, "trace-cmd's lossless rate")
    assert judged == pytest.approx(1.1)
    assert text == ("1.100x trace-cmd's lossless rate round by round (median of 1.10, 1.10, 0.90; of the medians: "
                    "0.95x)")  # fmt: skip
    assert lossless_rounds([*npu[:2], run("npu", 1.0, lost=5)], anchor) == []
    assert judged_ratio(0.95, [], "trace-cmd's lossless rate") == (0.95, "0.95x trace-cmd's lossless rate")
    # as the check bench says it, the anchor's own figure beside
    assert judged_ratio(4.0, [5.0], "trace-cmd report", "report 0.600 M ev/s") == (
        5.0, "5.000x trace-cmd report round by round (median of 5.00; of the medians: 4.00x, report 0.600 M ev/s)")
    assert judged_ratio(4.0, [], "trace-cmd report", "report 0.600 M ev/s") == (
        4.0, "4.00x trace-cmd report (report 0.600 M ev/s)")
