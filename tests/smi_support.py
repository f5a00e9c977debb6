"""Waiting for the simulated npu-smi's polls (npu_trace.sim.fake_smi records each call it answers)."""

from __future__ import annotations

import time

from npu_trace.sim import fake_smi

WAIT_S = 60.0  # a failing wait gives up after this (never reached when the health channel polls)


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def wait_for_polls(smi_dir: str, since_ns: int, polls: int = 1) -> None:
    """Until `polls` whole health polls of the npu-smi in `smi_dir` began at or after `since_ns` (a poll of the
    final state, once `since_ns` is the run's end), instead of a sleep that may hold no poll on a busy host."""
    deadline = time.monotonic() + WAIT_S
    while (got := fake_smi.polls_since(smi_dir, since_ns)) < polls:
        assert time.monotonic() < deadline, f"{got} of {polls} npu-smi polls in {smi_dir} after {WAIT_S:g} s"
        time.sleep(0.05)
