"""Waiting for the simulated npu-smi's polls (npu_trace.sim.fake_smi records each call it answers)."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Sequence

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


def answers(smi_dir: str, dev: int, query: str) -> List[Dict[str, Any]]:
    """What each `info -t <query> -i <dev> -c 0` call the npu-smi in `smi_dir` recorded answered, in call order:
    the readings of the state file (the run's) at the call's time. A health poll's readings are its queries'
    answers, so the readings a poller reports are these, each change once, however late its polls ran."""
    state = fake_smi.State.load(os.path.join(smi_dir, fake_smi.STATE_NAME))
    with open(os.path.join(smi_dir, fake_smi.CALLS_NAME)) as f:
        calls = [line.split(" ", 1) for line in f]
    command = f"info -t {query} -i {dev} -c 0"
    return [state.values(dev, int(at)) for at, argv in calls if argv.strip() == command]


def changes(values: Sequence[Any]) -> List[Any]:
    """`values` without a value equal to the one before it (what a tracker of changes reports)."""
    return [v for k, v in enumerate(values) if k == 0 or v != values[k - 1]]


def health_changes(smi_dir: str, dev: int) -> List[str]:
    """The health changes the npu-smi in `smi_dir` reported for device `dev`, as the health detector makes its
    findings of them (each time the health leaves OK, or changes while not OK), from what each of its `-t health`
    answers said: every call it recorded, answered for its time from the state file (the last scenario's: a call
    before that scenario began answered its baseline, OK). A poll on a loaded host may come too late to see a
    state: what it saw is what the trace holds."""
    from npu_trace.detectors.health import OK_HEALTH

    state = fake_smi.State.load(os.path.join(smi_dir, fake_smi.STATE_NAME))
    with open(os.path.join(smi_dir, fake_smi.CALLS_NAME)) as f:
        calls = [line.split(" ", 1) for line in f]
    query = f"info -t health -i {dev} -c 0"
    out: List[str] = []
    previous: Optional[str] = None
    for at, argv in calls:
        if argv.strip() != query:
            continue
        health = state.values(dev, int(at))["health"]
        if health not in OK_HEALTH and health != previous:
            out.append(health)
        previous = health
    return out
