"""When and where each placed action runs: the host-like executor (npu_sim.c) replayed in time, without running.

`HostTiming(host, cpus).run(action)` takes the actions of a placed plan (`scenarios.plan` or `plan_stream`
with a threaded `Host`), one at a time in plan order, and says what the executor would observe for each: its
start and end (trace clock), the thread id, and the CPU its entry and its return probe fire on. It follows the
executor's rules (npu_sim.c) with ideal timing:

- thread i runs its actions in plan order, one after another (`STEP_NS` between two of them), never before
  the action's planned time, and after the action it waits for (`after`) has returned (`STEP_NS` later);
- a HAL call returns `delay_ns` after it started; the other functions are instants (entry probe only);
- thread i starts on the (i mod n)-th CPU of `cpus`; with `Host.migrate_ms`, every thread but thread 0 is
  asked to move to the ((i + tick) mod n)-th CPU at every tick, and follows at its next action or while it
  sleeps inside a HAL call (so a long call can return on another CPU);
- an `away` action (an interrupt completing a task) runs on another CPU than the one its `after` returned on;
  a `hop` call changes CPU inside the call: its return fires on another CPU than its entry.

Pure and deterministic: the same actions always give the same times and CPUs. With one CPU nothing moves.
Memory is bounded whatever the run's length: an action's end and CPU are kept until the planned time has
passed its end by `KEEP_NS` (an action waiting for it then starts at its own planned time all the same; an
interrupt runs `away` from a send that returned microseconds before it).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Sequence, Tuple

from npu_trace.device import hal
from npu_trace.sim.scenarios import Action
from npu_trace.sim.threads import Host

STEP_NS = 1_000  # a thread's next action, or a waiting thread's wake-up, comes this long after
KEEP_NS = 1_000_000_000  # an action's end and CPU are kept this long past its end (planned time)


class Run(NamedTuple):
    """What the executor observes for one action (its output line: see npu_trace.sim.runner)."""

    start_ns: int
    end_ns: int
    tid: int
    cpu_in: int
    cpu_out: int


class _Thread:
    __slots__ = ("cpu", "free_ns", "tick")

    def __init__(self, cpu: int, free_ns: int) -> None:
        self.cpu = cpu
        self.free_ns = free_ns  # when its previous action ended
        self.tick = 0  # the migrator's last tick it followed


class HostTiming:
    """Replays the placed actions of one run in plan order (see the module docstring); `t0_ns` is the executor's
    start on the trace clock and `pid` its main thread's id (thread i has id pid + i)."""

    def __init__(self, host: Host, cpus: Sequence[int] = (0, 1), t0_ns: int = 0, pid: int = 4242) -> None:
        if not cpus:
            raise ValueError("HostTiming needs at least one CPU")
        self.cpus = list(cpus)
        self.t0_ns = t0_ns
        self.pid = pid
        self.moves = len(self.cpus) > 1 and host.threaded
        self.migrate_ns = host.migrate_us * 1000 if self.moves else 0
        self.threads = [_Thread(self.cpus[i % len(self.cpus)], t0_ns - STEP_NS) for i in range(host.threads)]
        self.done: Dict[int, Tuple[int, int]] = {}  # plan index -> (end, the CPU it returned on), recent ones
        self.count = 0  # actions run

    def run(self, a: Action) -> Run:
        th = self.threads[a.thread]
        planned = self.t0_ns + a.t_ns
        self._forget(planned)
        start = max(planned, th.free_ns + STEP_NS)
        waited = self.done.get(a.after) if a.after is not None else None
        if waited is not None:
            start = max(start, waited[0] + STEP_NS)
        self._follow(a.thread, th, start)
        if a.away and waited is not None and self.moves and th.cpu == waited[1]:
            th.cpu = self._next(th.cpu)
        cpu_in = th.cpu
        end = start + a.delay_ns if hal.FUNC_BY_NAME[a.func].hal else start
        if end > start:
            self._inside_call(a, th, cpu_in, end)
        th.free_ns = end
        self.done[self.count] = (end, th.cpu)
        self.count += 1
        return Run(start, end, self.pid + a.thread, cpu_in, th.cpu)

    def _forget(self, planned: int) -> None:
        """The oldest actions that ended KEEP_NS before `planned` (plan order: later actions are planned no
        earlier): waiting for one of them no longer changes a start. The keys are the last len(done) plan
        indexes, so the oldest is computed, not looked up: next(iter(done)) walks past every key deleted since
        the dict last grew, which made a long run's timing quadratic (3 s of plan at 100 k calls/s: 33 s, not 10)."""
        done = self.done
        while done:
            first = self.count - len(done)
            if done[first][0] + STEP_NS + KEEP_NS > planned:
                return
            del done[first]

    def _inside_call(self, a: Action, th: _Thread, cpu_in: int, end: int) -> None:
        if a.hop and self.moves:
            th.cpu = self._next(th.cpu)
        self._follow(a.thread, th, end)
        if a.hop and self.moves and th.cpu == cpu_in:  # the migrator moved it back: it hops again
            th.cpu = self._next(th.cpu)

    def _follow(self, index: int, th: _Thread, now: int) -> None:
        """A thread but thread 0 takes the CPU the migrator asked for at its latest tick, if it has not yet."""
        if not self.migrate_ns or index == 0:
            return
        tick = max(0, now - self.t0_ns) // self.migrate_ns
        if tick > th.tick:
            th.tick = tick
            th.cpu = self.cpus[(index + tick) % len(self.cpus)]

    def _next(self, cpu: int) -> int:
        return self.cpus[(self.cpus.index(cpu) + 1) % len(self.cpus)]
