"""Deterministic scenario planner: (scenario, seed, duration, rate, devices) -> the list of actions to inject.

Pure: no I/O, randomness only from random.Random(seed). `rate` is the steady background traffic in calls per
second (all devices together); special phases (spikes, failures, ECC climb, reset steps, IRQ storm) add
their calls on top. Each Action is one call of one exported simulator function; `args` follow hal.FUNCS'
parameter order. `host` (npu_trace.sim.threads) places the actions on the executor's threads (which thread,
what it waits for, where it changes CPU) without changing what they are.

`plan_stream` yields the same actions one window of time at a time, without `plan`'s size limit (the planner's
state, its heaps and task ids, carries over): for plans too large to hold at once (the benchmarks' generated
recordings), never for the executor, whose rate and size limits stay `plan`'s.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from npu_trace.device import hal
from npu_trace.errors import InputError
from npu_trace.sim.threads import SINGLE, Host, Placer, place, validate_host

SCENARIOS = ("steady", "spikes", "fragmentation", "ecc-reset", "irq-storm", "mixed", "shared-weights")
KINDS = ("call", "spike", "alloc_fail", "timeout", "heartbeat_lost", "ecc", "reset_step", "irq")
NS = 1_000_000_000
US = 1_000
MS = 1_000_000
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
HBM_BYTES = 64 * GIB
VA_BASE = 0x100000000000
VA_STRIDE = 0x10000000000
IRQ_NAMES = ("cq_update_irq", "func_cq_irq", "sq_send_trigger_irq", "dma_done_irq", "devdrv_load_irq")
MAX_ACTIONS = 2_000_000
MAX_DURATION_S = 3600.0
STREAM_MAX_DURATION_S = 86400.0

Value = Union[int, str]


@dataclass(frozen=True)
class Action:
    t_ns: int  # planned start offset from the executor's start
    func: str
    args: Tuple[Value, ...]  # in abi parameter order (args[0] is the device)
    ret: Optional[int] = None  # HAL calls only: what the call returns
    delay_ns: int = 0  # HAL calls only: latency injected inside the call
    kind: str = "call"
    group: int = 0  # actions of one logical operation (alloc + alloc_done, send + completion ...)
    phase: str = "steady"
    # placement (npu_trace.sim.threads): the executor thread, the index of an earlier action to wait for,
    # run on a CPU other than that action's (away), change CPU inside the call (hop)
    thread: int = 0
    after: Optional[int] = None
    away: bool = False
    hop: bool = False
    proc: int = 0  # the executor process that runs it (0: the first; shared-weights runs several)

    @property
    def dev(self) -> int:
        return int(self.args[0])

    def fields(self) -> Dict[str, Value]:
        names = hal.FUNC_BY_NAME[self.func].field_names
        return dict(zip(names, self.args))


def irq_number(dev: int, name: str) -> int:
    """A stable MSI-X vector number per (device, IRQ name)."""
    idx = IRQ_NAMES.index(name) if name in IRQ_NAMES else len(IRQ_NAMES)
    return 128 + dev * 16 + idx


def mbox_irq_name(dev: int, ts: int = 0) -> str:
    return f"trs-mbox-{dev}-{ts}"


class Heap:
    """First-fit device memory model, so alloc results and free/largest-free hints are consistent."""

    def __init__(self, dev: int, capacity: int = HBM_BYTES) -> None:
        self.base = VA_BASE + dev * VA_STRIDE
        self.holes: List[Tuple[int, int]] = [(0, capacity)]
        self.live: Dict[int, int] = {}

    @property
    def free_bytes(self) -> int:
        return sum(size for _, size in self.holes)

    @property
    def largest(self) -> int:
        return max((size for _, size in self.holes), default=0)

    def alloc(self, size: int) -> Optional[int]:
        for i, (off, hole) in enumerate(self.holes):
            if hole >= size:
                self.holes[i : i + 1] = [(off + size, hole - size)] if hole > size else []
                self.live[self.base + off] = size
                return self.base + off
        return None

    def release(self, va: int) -> None:
        size = self.live.pop(va)
        holes = sorted([*self.holes, (va - self.base, size)])
        merged: List[Tuple[int, int]] = []
        for off, sz in holes:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + sz)
            else:
                merged.append((off, sz))
        self.holes = merged


Window = Tuple[int, int, int]  # (dev, from_ns, to_ns): no background traffic on dev meanwhile


@dataclass(frozen=True)
class Share:
    """Process `proc` maps, from `t_ns` on, the device memory another process allocated at (dev, va): memory
    shared between processes (model weights opened through the driver's IPC calls, which the simulator does
    not probe: only npu-smi's per-process memory shows the mapping, as on a real host)."""

    t_ns: int
    dev: int
    va: int
    size: int
    proc: int


class Planner:
    """Accumulates actions; the scenario functions below drive it."""

    def __init__(self, seed: int, devices: int) -> None:
        self.rng = random.Random(seed)
        self.devices = devices
        self.actions: List[Action] = []
        self.heaps = {d: Heap(d) for d in range(devices)}
        self.next_task = dict.fromkeys(range(devices), 0)
        self.groups = 0
        self.quiet: List[Window] = []
        self.no_alloc: set = set()
        self.shares: List[Share] = []
        self.procs = 1  # executor processes

    def group(self) -> int:
        self.groups += 1
        return self.groups

    def add(self, t: float, func: str, args: Tuple[Value, ...], **kw: object) -> None:
        self.actions.append(Action(int(t), func, args, **kw))  # type: ignore[arg-type]

    def hal_delay(self) -> int:
        return self.rng.randint(1 * US, 20 * US)

    def is_quiet(self, dev: int, t: float) -> bool:
        return any(d == dev and lo <= t < hi for d, lo, hi in self.quiet)

    def finish(self) -> List[Action]:
        return self.take_before(None)

    def take_before(self, cut: Optional[int]) -> List[Action]:
        """The actions planned so far that start before `cut` (None: all), in plan order (by start, then as
        planned); the others stay for a later take."""
        if cut is None:
            early, self.actions = self.actions, []
        else:
            early = [a for a in self.actions if a.t_ns < cut]
            self.actions = [a for a in self.actions if a.t_ns >= cut]
        return sorted(early, key=_start)  # stable: equal starts keep their planned order


def _start(a: Action) -> int:
    return a.t_ns


# ---- operations (each returns how many calls it planned) ------------------------------------------------
def op_alloc(
    p: Planner,
    t: float,
    dev: int,
    size: int,
    kind: str = "call",
    phase: str = "steady",
    delay: Optional[int] = None,
    proc: int = 0,
) -> int:
    heap = p.heaps[dev]
    va = heap.alloc(size)
    ret = 0 if va is not None else hal.ENOMEM
    kind = kind if va is not None else "alloc_fail"
    g = p.group()
    d = p.hal_delay() if delay is None else delay
    p.add(t, "halMemAlloc", (dev, size, 0), ret=ret, delay_ns=d, kind=kind, group=g, phase=phase, proc=proc)
    done = (dev, size, va or 0, ret, heap.free_bytes, heap.largest)
    p.add(t + d + 2 * US, "devmm_alloc_done", done, kind="call" if va else kind, group=g, phase=phase, proc=proc)
    return 2


def op_free(p: Planner, t: float, dev: int, va: int, phase: str = "steady", proc: int = 0) -> int:
    p.heaps[dev].release(va)
    p.add(t, "halMemFree", (dev, va), ret=0, delay_ns=p.hal_delay(), group=p.group(), phase=phase, proc=proc)
    return 1


def op_irq(
    p: Planner, t: float, dev: int, name: str, dur_ns: int, phase: str = "steady", group: Optional[int] = None
) -> int:
    g = p.group() if group is None else group
    irq = irq_number(dev, name)
    p.add(t, "irq_handler_entry", (dev, irq, name), kind="irq", group=g, phase=phase)
    p.add(t + dur_ns, "irq_handler_exit", (dev, irq, hal.IRQ_HANDLED), kind="irq", group=g, phase=phase)
    return 2


def op_task(
    p: Planner,
    t: float,
    dev: int,
    kind: str = "call",
    phase: str = "steady",
    delay: Optional[int] = None,
    proc: int = 0,
) -> int:
    g = p.group()
    task = p.next_task[dev]
    p.next_task[dev] = (task + 1) & 0xFFFF
    stream = p.rng.randrange(8)
    d = p.hal_delay() if delay is None else delay
    p.add(t, "halSqTaskSend", (dev, 0, stream, task), ret=0, delay_ns=d, kind=kind, group=g, phase=phase, proc=proc)
    t_irq = t + d + p.rng.randint(30 * US, 200 * US)
    irq = irq_number(dev, "cq_update_irq")
    p.add(t_irq, "irq_handler_entry", (dev, irq, "cq_update_irq"), kind="irq", group=g, phase=phase, proc=proc)
    p.add(t_irq + 2 * US, "trs_logic_cq_enque", (dev, stream, task, 0), group=g, phase=phase, proc=proc)
    p.add(t_irq + 4 * US, "irq_handler_exit", (dev, irq, hal.IRQ_HANDLED), kind="irq", group=g, phase=phase, proc=proc)
    p.add(
        t_irq + 6 * US,
        "halCqReportRecv",
        (dev, 0, stream, 100),
        ret=1,
        delay_ns=p.hal_delay(),
        group=g,
        phase=phase,
        proc=proc,
    )
    return 5


def op_random(p: Planner, t: float, dev: int) -> int:
    roll = p.rng.random()
    heap = p.heaps[dev]
    if roll < 0.45:
        return op_task(p, t, dev)
    if roll < 0.75 and dev not in p.no_alloc:
        size = p.rng.randint(1, 4096) * 4 * KIB
        if len(heap.live) < 64 and heap.largest >= size:
            return op_alloc(p, t, dev, size)
    if roll < 0.9 and heap.live and dev not in p.no_alloc:
        return op_free(p, t, dev, p.rng.choice(sorted(heap.live)))
    name = p.rng.choice(("dma_done_irq", mbox_irq_name(dev), "func_cq_irq"))
    return op_irq(p, t, dev, name, p.rng.randint(2 * US, 30 * US))


# ---- phases ---------------------------------------------------------------------------------------------
def steady(p: Planner, t0: float, t1: float, rate: float, stop: Optional[float] = None) -> float:
    """Background traffic at `rate` calls/s over [t0, t1) on every device not in a quiet window; with `stop`,
    only the operations starting before it: returns where the next one starts (to go on from there)."""
    t, end = t0, t1 if stop is None else min(t1, stop)
    while t < end:
        devs = [d for d in range(p.devices) if not p.is_quiet(d, t)]
        n = op_random(p, t, p.rng.choice(devs)) if devs else 1
        t += n * NS / rate * p.rng.uniform(0.5, 1.5)
    return t


SPIKE_MIN_NS, SPIKE_MAX_NS = 20 * MS, 60 * MS


def spikes(p: Planner, t0: float, t1: float, count: int) -> None:
    """`count` HAL calls with 20-60 ms of injected latency, at random times in [t0, t1): well above the
    profile's 10 ms spike threshold, which itself sits above a busy VM's scheduling hiccups."""
    for _ in range(count):
        t = p.rng.uniform(t0, t1)
        devs = [d for d in range(p.devices) if not p.is_quiet(d, t)]
        if not devs:
            continue
        dev, delay = p.rng.choice(devs), p.rng.randint(SPIKE_MIN_NS, SPIKE_MAX_NS)
        if dev in p.no_alloc or p.rng.random() < 0.6:
            op_task(p, t, dev, kind="spike", phase="spike", delay=delay)
        else:
            op_alloc(p, t, dev, p.rng.randint(1, 256) * 4 * KIB, kind="spike", phase="spike", delay=delay)


def fragmentation(p: Planner, t0: float, t1: float, dev: int, holes: int = 16, hole: int = 8 * MIB) -> None:
    """Fill `dev`'s memory with alternating hole/filler blocks, free the holes, then fail a large allocation
    (enough free bytes in total, no block large enough) three times; finally free the fillers and succeed."""
    heap, step = p.heaps[dev], max(20 * US, int((t1 - t0) / 200))
    filler = (heap.free_bytes - holes * hole) // holes // (4 * KIB) * (4 * KIB)
    t, kept, gaps = t0, [], []
    for i in range(holes):
        op_alloc(p, t, dev, hole, phase="fragment")
        gaps.append(max(heap.live))
        size = filler if i < holes - 1 else heap.largest
        op_alloc(p, t + step / 2, dev, size, phase="fragment")
        kept.append(max(heap.live))
        t += step
    for va in gaps:
        op_free(p, t, dev, va, phase="fragment")
        t += step / 2
    request = min(heap.free_bytes, 4 * heap.largest)
    for i in range(3):
        op_alloc(p, t + i * (t1 - t) / 6, dev, request, phase="fragment")
    t += (t1 - t) / 2
    for va in kept:
        op_free(p, t, dev, va, phase="recover")
        t += step / 2
    op_alloc(p, t, dev, request, phase="recover")
    op_free(p, t + step, dev, max(heap.live), phase="recover")


WEIGHTS_BYTES = 24 * GIB  # the model's weights, loaded once and shared
POOL_BLOCK = 1 * GIB  # the loader's activation pool: the rest of the HBM in blocks, every other one freed
WORKERS = 2  # processes that map the weights (and one of them asks for more than the largest hole)
WORKER_REQUEST = 4 * GIB


def shared_weights(p: Planner, t0: float, t1: float, dev: int) -> None:
    """Process 0 (the loader) allocates the weights, fills the rest of the HBM with its pool and frees every other
    block of it (holes of POOL_BLOCK); then WORKERS processes map the weights (`Share`s: npu-smi counts them in
    each process that maps them, so its process table adds up to more than the chip uses); then a worker asks
    for WORKER_REQUEST, more than the largest hole though npu-smi shows that much free, and fails."""
    p.procs = max(p.procs, 1 + WORKERS)
    span = t1 - t0
    heap = p.heaps[dev]
    op_alloc(p, t0, dev, WEIGHTS_BYTES, phase="load")
    weights = max(heap.live)
    blocks = heap.free_bytes // POOL_BLOCK
    step = 0.15 * span / (blocks + blocks // 2 + 1)
    t = t0 + 0.02 * span
    pool = []
    for _ in range(blocks):
        op_alloc(p, t, dev, POOL_BLOCK, phase="load")
        pool.append(max(heap.live))
        t += step
    for va in pool[::2]:
        op_free(p, t, dev, va, phase="load")
        t += step
    t_share = t0 + 0.3 * span
    p.shares += [Share(int(t_share), dev, weights, WEIGHTS_BYTES, w) for w in range(1, 1 + WORKERS)]
    for w in range(1, 1 + WORKERS):  # the workers serve: tasks on the chip, with the weights mapped
        for k in range(4):
            op_task(p, t_share + (0.02 + 0.05 * k + 0.01 * w) * span, dev, phase="serve", proc=w)
    op_alloc(p, t0 + 0.6 * span, dev, WORKER_REQUEST, phase="serve", proc=1)


def ecc_reset(p: Planner, t0: float, t1: float, dev: int) -> None:
    """ECC counts and temperature climb, timeouts, heartbeat lost, full hot reset, then healthy."""
    span = t1 - t0
    p.quiet.append((dev, int(t0 + 0.5 * span), int(t0 + 0.87 * span)))
    ce = 0
    for k in range(8):
        ce += 1 << k
        args = (dev, hal.ECC_CE_EVENT, ce, 0, 62 + 4 * k)
        t = t0 + span * 0.05 * (k + 1)
        p.add(t, "dms_event_report", args, kind="ecc", group=p.group(), phase="degrade")
    uce = (dev, hal.ECC_UCE_EVENT, ce, 1, 96)
    p.add(t0 + 0.46 * span, "dms_event_report", uce, kind="ecc", group=p.group(), phase="degrade")
    _timeouts(p, t0 + 0.5 * span, t0 + 0.6 * span, dev)
    lost = (dev, 4)
    p.add(
        t0 + 0.62 * span,
        "hb_report_heart_beat_lost_event",
        lost,
        kind="heartbeat_lost",
        group=p.group(),
        phase="degrade",
    )
    _reset_steps(p, t0 + 0.65 * span, t0 + 0.85 * span, dev)


def _timeouts(p: Planner, t0: float, t1: float, dev: int) -> None:
    for i in range(3):
        t, g, stream = t0 + i * (t1 - t0) / 3, p.group(), p.rng.randrange(8)
        p.add(t, "drv_timeout", (dev, 1, stream, 20_000), kind="timeout", group=g, phase="degrade")
        p.add(
            t + 5 * US,
            "halCqReportRecv",
            (dev, 0, stream, 20),
            ret=hal.ETIMEDOUT,
            delay_ns=20 * MS,
            kind="timeout",
            group=g,
            phase="degrade",
        )
        mbox = (dev, 2, 0, 1_000 * (i + 1))
        p.add(t + 21 * MS, "drv_timeout", mbox, kind="timeout", group=g, phase="degrade")


def _reset_steps(p: Planner, t0: float, t1: float, dev: int) -> None:
    g, n = p.group(), len(hal.RESET_STEPS)
    for i, name in enumerate(hal.RESET_STEPS):
        t = t0 + i * (t1 - t0) / n
        if name == "os_load_success":
            op_irq(p, t - 20 * US, dev, "devdrv_load_irq", 5 * US, phase="reset", group=g)
        p.add(t, "devdrv_reset_step", (dev, i + 1, name, 0), kind="reset_step", group=g, phase="reset")


def irq_storm(p: Planner, t0: float, t1: float, dev: int, per_s: int = 20_000) -> None:
    """IRQ entry/exit pairs at `per_s` on `dev`: mostly cq_update_irq, some mailbox ACKs."""
    gap, t = NS / per_s, t0
    while t < t1:
        name = mbox_irq_name(dev) if p.rng.random() < 0.2 else "cq_update_irq"
        op_irq(p, t, dev, name, 2 * US, phase="storm")
        t += gap


# ---- scenarios ------------------------------------------------------------------------------------------
def _plan_steady(p: Planner, end: int) -> None:
    """Background traffic only: no special phase."""


def _plan_spikes(p: Planner, end: int) -> None:
    spikes(p, 0.05 * end, 0.95 * end, max(3, int(4 * end / NS)))


def _plan_fragmentation(p: Planner, end: int) -> None:
    p.no_alloc.update(range(p.devices))
    fragmentation(p, 0.05 * end, 0.95 * end, 0)


def _plan_ecc_reset(p: Planner, end: int) -> None:
    ecc_reset(p, 0.05 * end, end, 0)


def _plan_irq_storm(p: Planner, end: int) -> None:
    start = 0.4 * end
    irq_storm(p, start, start + min(0.2 * NS, 0.2 * end), 0)


def _plan_mixed(p: Planner, end: int) -> None:
    p.no_alloc.add(0)
    ecc_dev = p.devices - 1
    fragmentation(p, 0.03 * end, 0.35 * end, 0)
    irq_storm(p, 0.36 * end, 0.36 * end + min(0.1 * NS, 0.05 * end), 0)
    ecc_reset(p, 0.4 * end, end, ecc_dev)
    spikes(p, 0.05 * end, 0.95 * end, max(3, int(2 * end / NS)))


def _plan_shared_weights(p: Planner, end: int) -> None:
    p.no_alloc.add(0)
    shared_weights(p, 0.05 * end, end, 0)


# Each scenario's special phases; the steady background traffic (`steady`) is planned after them, over the whole
# run, on every device not in one of their quiet windows.
_PLANNERS: Dict[str, Callable[[Planner, int], None]] = {
    "steady": _plan_steady,
    "spikes": _plan_spikes,
    "fragmentation": _plan_fragmentation,
    "ecc-reset": _plan_ecc_reset,
    "irq-storm": _plan_irq_storm,
    "mixed": _plan_mixed,
    "shared-weights": _plan_shared_weights,
}


def validate(
    scenario: str,
    duration_s: float,
    rate: float,
    devices: int,
    host: Host = SINGLE,
    max_duration_s: float = MAX_DURATION_S,
    max_actions: Optional[int] = MAX_ACTIONS,
) -> None:
    validate_host(host)
    if scenario not in _PLANNERS:
        raise InputError(f"unknown scenario {scenario!r} (one of: {', '.join(SCENARIOS)})")
    if not 0 < duration_s <= max_duration_s:
        raise InputError(f"--duration must be in (0, {max_duration_s:g}] seconds, not {duration_s}")
    if not 0 < rate <= 200_000:
        raise InputError(f"--rate must be in (0, 200000] calls/s, not {rate}")
    if not 1 <= devices <= 64:
        raise InputError(f"--devices must be in [1, 64], not {devices}")
    if max_actions is not None and duration_s * rate > max_actions:
        raise InputError(f"duration x rate is over {max_actions} calls: shorten the run or lower the rate")


def plan(scenario: str, seed: int, duration_s: float, rate: float, devices: int, host: Host = SINGLE) -> List[Action]:
    """The actions of `scenario`, sorted by planned start and placed on `host`'s threads; the same arguments
    always give the same plan, and the same actions whatever the host."""
    return plan_run(scenario, seed, duration_s, rate, devices, host)[0]


def plan_run(
    scenario: str, seed: int, duration_s: float, rate: float, devices: int, host: Host = SINGLE
) -> Tuple[List[Action], List[Share], int]:
    """`plan`'s actions, the scenario's shared mappings (in time order; only shared-weights has any) and how
    many executor processes run them (Action.proc 0..n-1; a process may have no action of its own)."""
    validate(scenario, duration_s, rate, devices, host)
    p = Planner(seed, devices)
    end = int(duration_s * NS)
    _PLANNERS[scenario](p, end)
    steady(p, 0, end, float(rate))
    actions = place_processes(p.finish(), seed, host)
    procs = max([p.procs] + [a.proc + 1 for a in actions])
    return actions, sorted(p.shares, key=lambda s: (s.t_ns, s.proc)), procs


def place_processes(actions: List[Action], seed: int, host: Host) -> List[Action]:
    """`place` on each executor process's actions by itself (ProcessPlacer)."""
    if all(a.proc == 0 for a in actions):
        return place(actions, seed, host)
    return ProcessPlacer(seed, host).extend(actions)


class ProcessPlacer:
    """A Placer per executor process (a process's threads wait only for its own actions; process k's draws
    seeded by seed + k, so process 0's placement is the one-process plan's), `after` counted in the whole plan;
    in one piece or in consecutive parts, like Placer."""

    def __init__(self, seed: int, host: Host) -> None:
        self.seed, self.host = seed, host
        self.placers: Dict[int, Placer] = {}
        self.count = 0  # actions placed, every process's

    def extend(self, actions: Sequence[Action], ahead: Sequence[Action] = ()) -> List[Action]:
        out = list(actions)
        for proc in sorted({a.proc for a in actions}):
            if proc not in self.placers:
                self.placers[proc] = Placer(self.seed + proc, self.host)
            mine = [i for i, a in enumerate(actions) if a.proc == proc]
            ids = [self.count + i for i in mine]  # `after` counts in the whole plan
            placed = self.placers[proc].extend([actions[i] for i in mine], [a for a in ahead if a.proc == proc], ids)
            for i, a in zip(mine, placed):
                out[i] = a
        self.count += len(actions)
        return out


def plan_stream(
    scenario: str,
    seed: int,
    duration_s: float,
    rate: float,
    devices: int,
    host: Host = SINGLE,
    window_s: float = 1.0,
) -> Iterator[Action]:
    """`plan`'s actions in the same order, placed the same way, planned `window_s` of run time at a time (see
    the module docstring); `plan`'s checks but its size limit, on a run of at most a day."""
    validate(scenario, duration_s, rate, devices, host, max_duration_s=STREAM_MAX_DURATION_S, max_actions=None)
    p, placer = Planner(seed, devices), ProcessPlacer(seed, host)
    end, window = int(duration_s * NS), max(1, int(window_s * NS))
    _PLANNERS[scenario](p, end)
    t: float = 0
    for cut in range(window, end + window, window):
        t = steady(p, t, end, float(rate), stop=cut)
        yield from placer.extend(p.take_before(cut), p.actions)
    yield from placer.extend(p.finish())
