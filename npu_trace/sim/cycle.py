"""Scenarios one after another, until stopped: what `npu-trace demo` runs so that a newcomer sees each
incident happen live (steady load, latency spikes, fragmentation ending in a failed allocation, an ECC climb
ending in a hot reset), round after round.

`ScenarioCycle.poll()` is called from the loop that reads the trace (the pump's `until`): when the running
executor has ended it is reaped (its truth read, its side channels drained) and the next scenario starts; it
returns True once the asked number of rounds is done (never, by default). `terminate()` stops the running
executor and its side channels on every exit path. No thread of its own: the executor is a process and the
side channels' threads are the simulator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from npu_trace.sim.runner import ScenarioRun
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sim.threads import HOST_LIKE, Host

# (scenario, seconds): long enough for each incident to show, short enough that a newcomer sees them all
DEMO_CYCLE: Tuple[Tuple[str, float], ...] = (("steady", 20.0), ("spikes", 15.0), ("fragmentation", 15.0),
                                             ("ecc-reset", 25.0))  # fmt: skip

Start = Callable[..., ScenarioRun]  # npu_trace.sim.start_scenario's signature


@dataclass(frozen=True)
class CyclePlan:
    """What to run: the steps (scenario, seconds), their rate and devices, the first seed (one more per
    scenario run), how many rounds (0: until stopped)."""

    steps: Tuple[Tuple[str, float], ...] = DEMO_CYCLE
    rate: float = 200.0
    devices: int = 2
    seed: int = 1
    rounds: int = 0
    host: Host = HOST_LIKE

    @classmethod
    def of(cls, scenario: str, duration: Optional[float], **kw: object) -> CyclePlan:
        """`cycle`: the demo's steps (each `duration` long when given); a scenario's name: that one alone,
        `duration` (default 10 s) long, over and over."""
        if scenario == "cycle":
            steps = DEMO_CYCLE if duration is None else tuple((name, duration) for name, _ in DEMO_CYCLE)
        else:
            steps = ((scenario, 10.0 if duration is None else duration),)
        return cls(steps, **kw)  # type: ignore[arg-type]


class ScenarioCycle:
    def __init__(self, plan: CyclePlan, start: Start, channels: Optional[SideChannels] = None,
                 on_start: Optional[Callable[[str], None]] = None) -> None:  # fmt: skip
        self.plan = plan
        self.start = start
        self.channels = channels
        self.on_start = on_start or (lambda _text: None)
        self.run: Optional[ScenarioRun] = None
        self.index = 0  # scenario runs started so far
        self.status = ""

    @property
    def done(self) -> bool:
        return self.plan.rounds > 0 and self.index >= self.plan.rounds * len(self.plan.steps)

    def poll(self) -> bool:
        """Start the first scenario, or the next once the running one ended; True when every round is done."""
        run = self.run
        if run is not None and run.poll() is None:
            return False
        if run is not None:
            self.run = None
            run.wait()  # reaps it and drains its side channels (a failure: SimulatorError, one line)
        if self.done:
            return True
        self._next()
        return False

    def _next(self) -> None:
        steps = self.plan.steps
        name, seconds = steps[self.index % len(steps)]
        round_no, step = divmod(self.index, len(steps))
        p = self.plan
        self.run = self.start(name, p.seed + self.index, seconds, p.rate, p.devices, ensure_loaded=False,
                              channels=self.channels, host=p.host)  # fmt: skip
        self.index += 1
        of = f" ({step + 1}/{len(steps)})" if len(steps) > 1 else ""
        self.status = f"scenario {name}{of}, {seconds:g} s, round {round_no + 1}"
        self.on_start(self.status)

    def terminate(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.terminate()


def scenario_steps(steps: Sequence[Tuple[str, float]]) -> str:
    return ", ".join(f"{name} {seconds:g} s" for name, seconds in steps)
