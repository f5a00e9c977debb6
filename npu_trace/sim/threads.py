"""Where each planned action runs: which executor thread, what it waits for, and when it changes CPU.

A real Ascend host submits a task from an application thread on one CPU and completes it in the driver's
interrupt handler on another, and its threads migrate between CPUs, even inside a call. `place(actions, seed,
host)` spreads a plan (sorted by scenarios.plan) over the executor's threads the same way:

    thread 0  IRQ_THREAD     interrupt context: irq_handler_entry, trs_logic_cq_enque, irq_handler_exit
    thread 1  DRIVER_THREAD  the driver's own work: devmm_alloc_done, ECC reports, timeouts, heartbeat, reset steps
    thread 2.. app threads   the HAL calls: a task's send and reap on the thread of its (device, stream),
                             each memory call on a thread drawn for it

Order across threads (`Action.after`, the index of an earlier action that must have returned first; set only
when that action runs on another thread, the executor keeps each thread's own actions in plan order):
- within one operation (`group`), each action waits for the one before it: a task's interrupt for its send,
  the reap for the interrupt's exit, an allocation's devmm_alloc_done for its halMemAlloc, a reset's load
  interrupt for the step before it and the next step for that interrupt ...;
- a halMemFree waits for the devmm_alloc_done that handed out its address, and a halMemAlloc that gets an
  address freed before waits for that free (the memory detector sees every address live once at a time).
CPU moves: a task's interrupt runs `away` from the CPU its send returned on; a share of the HAL calls
(`Host.hop_share`, drawn from the seed) `hop` to another CPU inside the call; with `Host.migrate_ms` the
executor also moves threads 1.. to another CPU every so many milliseconds.

All draws come from a generator of their own seeded by the seed, so the scenario's actions (times,
arguments, results) are the same whatever the host: only their placement differs. With SINGLE
(app_threads 0) every action stays on thread 0 with no waits and no moves: the executor of old.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from npu_trace.device import hal
from npu_trace.errors import InputError

if TYPE_CHECKING:  # scenarios.plan calls place(): only the type comes from there
    from npu_trace.sim.scenarios import Action

IRQ_THREAD = 0
DRIVER_THREAD = 1
FIRST_APP_THREAD = 2
MAX_APP_THREADS = 32
MAX_MIGRATE_MS = 1000.0
IRQ_FUNCS = frozenset(("irq_handler_entry", "trs_logic_cq_enque", "irq_handler_exit"))
STREAM_FUNCS = frozenset(("halSqTaskSend", "halCqReportRecv"))


@dataclass(frozen=True)
class Host:
    """The executor's shape: application threads (0: the single-thread executor), periodic CPU moves."""

    app_threads: int = 0
    migrate_ms: float = 0.0  # move threads 1.. to another CPU this often (0: never)
    hop_share: float = 0.25  # share of the HAL calls that change CPU inside the call

    @property
    def threaded(self) -> bool:
        return self.app_threads > 0

    @property
    def threads(self) -> int:
        return FIRST_APP_THREAD + self.app_threads if self.threaded else 1

    @property
    def migrate_us(self) -> int:
        return round(self.migrate_ms * 1000)

    def describe(self) -> Dict[str, object]:
        """What the truth file says about it."""
        return {"threads": self.threads, "app_threads": self.app_threads, "migrate_ms": self.migrate_ms,
                "hop_share": self.hop_share if self.threaded else 0.0}  # fmt: skip


SINGLE = Host()
HOST_LIKE = Host(app_threads=4, migrate_ms=2.0)


def validate_host(host: Host) -> None:
    if not 0 <= host.app_threads <= MAX_APP_THREADS:
        raise InputError(f"--threads must be in [0, {MAX_APP_THREADS}], not {host.app_threads}")
    if not 0 <= host.migrate_ms <= MAX_MIGRATE_MS:
        raise InputError(f"--migrate-ms must be in [0, {MAX_MIGRATE_MS:.0f}], not {host.migrate_ms}")
    if host.migrate_ms and not host.threaded:
        raise InputError("--migrate-ms needs application threads (--threads 1 or more)")
    if host.migrate_ms and host.migrate_us == 0:
        raise InputError(f"--migrate-ms {host.migrate_ms} is below a microsecond: use 0 (no moves) or more")
    if not 0.0 <= host.hop_share <= 1.0:
        raise InputError(f"hop_share must be in [0, 1], not {host.hop_share}")


class Placer:
    """One pass over the sorted plan, in one piece or in consecutive parts (`extend`); see the module docstring
    for the rules. `after` counts from the first action placed (or is the id `extend` was given for it).

    Its memory is bounded by what is still open, whatever the length of the plan: an operation's last action
    (with its thread) is kept only while `ahead` still holds actions of that operation, and a task's send
    only until its interrupt or its operation's end, an allocation until its address is freed. The last free
    of each address is kept (an allocation may get it again): as many as the heaps' distinct addresses."""

    def __init__(self, seed: int, host: Host) -> None:
        validate_host(host)
        self.host = host
        self.rng = random.Random(f"npu-sim-threads:{seed}")
        self.stream_threads: Dict[Tuple[int, int], int] = {}
        self.placed = 0  # actions placed so far
        self.sends: Dict[int, int] = {}  # id of a halSqTaskSend an interrupt may still wait for -> its group
        self.last_in_group: Dict[int, Placed] = {}  # operations with actions still to come
        self.made_at: Dict[Tuple[int, int], Placed] = {}  # (dev, va) -> the devmm_alloc_done handing it out
        self.freed_at: Dict[Tuple[int, int], Placed] = {}  # (dev, va) -> the halMemFree releasing it
        self.alloc_va: Dict[int, int] = {}  # group of an allocation being placed -> the address it hands out

    def extend(self, actions: Sequence[Action], ahead: Sequence[Action] = (),
               ids: Optional[Sequence[int]] = None) -> List[Action]:  # fmt: skip
        """The next `actions` of the plan, placed; `ahead`: every action planned after them (the devmm_alloc_done
        of an allocation in `actions` may be among them: the address it gets decides what it waits for; an
        operation none of them continues is done). `ids`: what `after` calls each of `actions` (default: its
        index among every action placed)."""
        if not self.host.threaded:
            return list(actions)
        allocs = {a.group for a in actions if a.func == "halMemAlloc"}
        found = {**_alloc_addresses(ahead), **_alloc_addresses(actions)}
        self.alloc_va = {group: va for group, va in found.items() if group in allocs}
        ids = range(self.placed, self.placed + len(actions)) if ids is None else ids
        self.placed += len(actions)
        out = [self.place(i, a) for i, a in zip(ids, actions)]
        self.forget_done({a.group for a in ahead})
        return out

    def forget_done(self, still_open: Set[int]) -> None:
        """The operations with no action ahead are done: nothing will wait for them again."""
        self.last_in_group = {g: w for g, w in self.last_in_group.items() if g in still_open}
        self.sends = {i: g for i, g in self.sends.items() if g in still_open}

    def place(self, i: int, a: Action) -> Action:
        thread = self.thread(a)
        after = self.after(i, a, thread)
        self.remember(i, a, thread)
        away = a.func == "irq_handler_entry" and self.completes(after)
        hop = hal.FUNC_BY_NAME[a.func].hal and self.rng.random() < self.host.hop_share
        return replace(a, thread=thread, after=after, away=away, hop=hop)

    def completes(self, after: Optional[int]) -> bool:
        """The interrupt waits for a task's send (it completes that task: it runs away from its CPU)."""
        return after is not None and self.sends.pop(after, None) is not None

    def thread(self, a: Action) -> int:
        if a.func in IRQ_FUNCS:
            return IRQ_THREAD
        if not hal.FUNC_BY_NAME[a.func].hal:
            return DRIVER_THREAD
        if a.func in STREAM_FUNCS:
            key = (a.dev, int(a.args[2]))
            if key not in self.stream_threads:
                self.stream_threads[key] = self.app_thread()
            return self.stream_threads[key]
        return self.app_thread()

    def app_thread(self) -> int:
        return FIRST_APP_THREAD + self.rng.randrange(self.host.app_threads)

    def after(self, i: int, a: Action, thread: int) -> Optional[int]:
        waits = [w for w in (self.last_in_group.get(a.group), self.memory_wait(i, a)) if w is not None]
        waits = [w for w in waits if w.thread != thread]
        if len(waits) > 1:  # the planner never makes one: a memory call opens its operation
            raise AssertionError(f"action {i} ({a.func}) would wait for two actions: {[w.id for w in waits]}")
        return waits[0].id if waits else None

    def memory_wait(self, i: int, a: Action) -> Optional[Placed]:
        """A free waits for the allocation of its address (forgotten then: the planner frees an allocation
        once), an allocation for the last free of the address it gets."""
        if a.func == "halMemFree":
            return self.made_at.pop((a.dev, int(a.args[1])), None)
        if a.func == "halMemAlloc" and a.group in self.alloc_va:
            return self.freed_at.get((a.dev, self.alloc_va.pop(a.group)))
        return None

    def remember(self, i: int, a: Action, thread: int) -> None:
        here = Placed(i, thread)
        self.last_in_group[a.group] = here
        if a.func == "devmm_alloc_done" and int(a.args[3]) == 0:
            self.made_at[(a.dev, int(a.args[2]))] = here
        elif a.func == "halMemFree":
            self.freed_at[(a.dev, int(a.args[1]))] = here
        elif a.func == "halSqTaskSend":
            self.sends[i] = a.group


class Placed(NamedTuple):
    """An action placed: what `after` calls it, and its thread."""

    id: int
    thread: int


def _alloc_addresses(actions: Sequence[Action]) -> Dict[int, int]:
    """Group of each successful allocation -> the address its devmm_alloc_done hands out (one halMemAlloc per
    allocation group)."""
    return {a.group: int(a.args[2]) for a in actions if a.func == "devmm_alloc_done" and int(a.args[3]) == 0}


def place(actions: List[Action], seed: int, host: Host) -> List[Action]:
    """The plan with every action placed on a thread (see the module docstring); unchanged for SINGLE."""
    validate_host(host)
    if not host.threaded:
        return actions
    return Placer(seed, host).extend(actions)
