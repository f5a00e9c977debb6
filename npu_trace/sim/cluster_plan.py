"""A simulated cluster: N hosts of one distributed job, one card's incident on one host, and what it takes down.

Pure and deterministic: (hosts, devices, scenario, seed, duration, rate, lag) -> a `ClusterPlan`, randomness only
from the seed. Every device of every host is a rank of the job. With `ecc-reset`, one card (the origin: a host
and a device drawn from the seed) goes through the simulator's ECC climb, timeouts, heartbeat lost and hot reset
(`scenarios.ecc_reset`); its uncorrectable ECC error is when it stops serving the job (`fail_ns`). Every other
rank, on every host (the origin's other cards too), then waits for it in a collective that never completes: each
host `lag` seconds after the failure (drawn in [lag_min, lag_max] per host, each card up to 50 ms later within
that range) a driver-level wait times out on the card (a cq_wait timeout and a halCqReportRecv returning
-ETIMEDOUT: what a rank shows, never a fault of its own) and the application reports the collective's failure
in its log (HCCL's EI0002 notify wait timeout with the runtime's 507048, or EI0006 getting a socket timed out
behind an HcclAllreduce error). From then on that card is idle: the job has stopped. `steady` is the healthy
cluster: background traffic only.

Each host has its own identity (hostname, machine id, boot id) and a wall clock off by an offset within
+-`MAX_OFFSET_NS`, declaring `DECLARED_ERROR_NS` of uncertainty (npu_trace.recording.host.SimulatedHost): what
the recordings' headers carry, so the cluster view must align the hosts within it.

The application's texts (`HCCL_NOTIFY`, `HCCL_SOCKET`) follow real pastes, sources named beside each; the
simulator fills in the process, time, device and ranks.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.device import hal
from npu_trace.errors import InputError
from npu_trace.recording.host import SimulatedHost
from npu_trace.sim.scenarios import MS, NS, Action, Planner, ecc_reset, steady, validate
from npu_trace.sim.threads import SINGLE, Host, place

SCENARIOS = ("ecc-reset", "steady")
MAX_HOSTS = 16
MAX_OFFSET_NS = 50 * MS
DECLARED_ERROR_NS = 50 * MS
DEVICE_JITTER_NS = 50 * MS
DEFAULT_LAG_S = (1.0, 5.0)
COLLECTIVE = "collective_timeout"
INCIDENT_AT = 0.05  # the origin's ECC climb starts this share of the run in
INCIDENT_SPAN_S = 1.5  # ... and its hot reset ends this long after (scenarios.ecc_reset's phases)
UCE_SHARE = 0.46  # where in that span the uncorrectable error comes (ecc_reset)
TAIL_NS = 500 * MS  # the run goes on this long after the last consequence

# HCCL's notify wait timeout as torch_npu and CANN print it on a rank whose peer stopped (the EI0002 block: a
# paste in https://github.com/vllm-project/vllm-ascend/issues/3413, 2025-10-11; the RuntimeError line: torch_npu's
# form, https://github.com/vllm-project/vllm-ascend/issues/7676, with 507048, the runtime's "execution of the
# internal task times out" that CANN's HCCL timeout guide pairs with EI0002); message text: hicann/hcomm's error
# table (EI0002 Communication_Error_Timeout).
HCCL_NOTIFY = (
    "RuntimeError: synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:361 NPU function error: "
    "c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is 507048\n"
    "[ERROR] {t_s} (PID:{pid}, Device:{dev}, RankID:<rank>) ERR00100 PTA call acl api failed.\n"
    "EI0002: [PID: {pid}] {t} The wait execution of the Notify register times out. Reason: The Notify register "
    "has not received the Notify record from remote rank: [<remote>]. base information: [streamID:[<stream>], "
    "taskID[<task>], taskType[Notify Wait], tag[AllReduce_group_name_1NHRAllReduceComm_device], "
    "AlgType(level 0-1-2):[ring-NHR-NHR].]. task information: [notify id:[0x0000000000000213], stage:[0], "
    "remote rank:[<remote>]]. group information: [group:[group_name_1], user define information[Unspecified], "
    "rankSize[<ranks>], rankId[<rank> <remote>]]\n"
    "        Possible Cause: 1. An exception occurs during the execution on some NPUs in the cluster. As a result, "
    "collective communication operation failed.2. The execution speed on some NPU in the cluster is too slow to "
    "complete a communication operation within the timeout interval. (default 1800s, You can set the interval by "
    "using HCCL_EXEC_TIMEOUT.)3. The number of training samples of each NPU is inconsistent.4. Packet loss or other "
    "connectivity problems occur on the communication link.\n"
)  # fmt: skip
# HCCL's socket timeout behind a failed all-reduce (torch_npu's RuntimeError, its OPS line and CANN's EI0006 as
# public vLLM-Ascend worker logs show them; fingerprint "Communication_Error_Get_Socket(EI0006)":
# https://github.com/vllm-project/afd-plugin/issues/229; message and solution: hicann/hcomm's error table).
HCCL_SOCKET = (
    "RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllreduce, "
    "error code is 6\n"
    "[ERROR] {t_s} (PID:{pid}, Device:{dev}, RankID:<rank>) ERR01100 OPS call acl api failed.\n"
    "EI0006: [PID: {pid}] {t} Getting socket times out. Reason: Remote Rank did not send the data in time. Please "
    "check the reason for the rank being stuck\n"
    "        Solution: 1. Check the rank service processes with other errors or no errors in the cluster.2. If this "
    "error is reported for all NPUs, check whether the time difference between the earliest and latest errors is "
    "greater than the connect timeout interval (120s by default). If so, adjust the timeout interval by using the "
    "HCCL_CONNECT_TIMEOUT environment variable.3. Check the connectivity of the communication link between nodes. "
    "(For example, run the 'hccn_tool -i $devid -tls -g' command to check the TLS status of each NPU).\n"
)  # fmt: skip
SOCKET_SHARE = 0.25  # ranks that report EI0006 rather than EI0002
REPORT_AFTER_NS = 25 * MS  # the application reports this long after its wait timed out (its sync call returned)

Report = Tuple[int, int, str, str]  # (offset ns, device, what, template): sim.side_channels.AppLogChannel's reports


@dataclass(frozen=True)
class ClusterHost:
    index: int
    identity: SimulatedHost
    actions: Tuple[Action, ...]  # this host's executor's plan (Action.proc = index)
    reports: Tuple[Report, ...]  # the job's reports in its application log, beside those of its own driver errors

    @property
    def name(self) -> str:
        return self.identity.hostname


@dataclass(frozen=True)
class Consequence:
    host: int
    device: int
    offset_ns: int  # when the rank's wait timed out, from the executors' start
    text: str  # "EI0002" or "EI0006"


@dataclass(frozen=True)
class ClusterPlan:
    scenario: str
    seed: int
    devices: int
    duration_s: float
    rate: float
    hosts: Tuple[ClusterHost, ...]
    origin: Optional[Tuple[int, int]]  # (host index, device)
    first_ns: Optional[int]  # the origin's first driver-level evidence (its first ECC report), from the start
    fail_ns: Optional[int]  # when the origin card stopped serving the job (its uncorrectable error)
    consequences: Tuple[Consequence, ...]

    def actions(self) -> List[Action]:
        """Every host's plan, host after host (`after` counted in this whole list, as the runner wants it)."""
        out: List[Action] = []
        for h in self.hosts:
            base = len(out)
            out += [replace(a, after=None if a.after is None else a.after + base) for a in h.actions]
        return out

    def truth(self, t0_ns: int) -> Dict[str, Any]:
        """{"origin": {"host", "device", ...}, "consequences": [{"host", "device", "kind", ...}], "hosts": ...};
        times on the executors' CLOCK_MONOTONIC (t0_ns: their start) and as true wall-clock offsets from it."""
        origin = None
        if self.origin is not None:
            h, d = self.origin
            origin = {"host": self.hosts[h].name, "device": d, "first_ns": t0_ns + (self.first_ns or 0),
                      "fail_ns": t0_ns + (self.fail_ns or 0)}  # fmt: skip
        cons = [{"host": self.hosts[c.host].name, "device": c.device, "kind": COLLECTIVE, "text": c.text,
                 "t_ns": t0_ns + c.offset_ns} for c in self.consequences]  # fmt: skip
        hosts = [{"host": h.name, "index": h.index, **h.identity.to_json()} for h in self.hosts]
        return {"scenario": self.scenario, "seed": self.seed, "devices": self.devices, "duration_s": self.duration_s,
                "rate": self.rate, "t0_ns": t0_ns, "origin": origin, "consequences": cons, "hosts": hosts}  # fmt: skip


def validate_cluster(hosts: int, devices: int, scenario: str, duration_s: float, lag_s: Tuple[float, float]) -> None:
    if scenario not in SCENARIOS:
        raise InputError(f"--scenario {scenario!r}: a cluster runs one of {', '.join(SCENARIOS)}")
    if not 1 <= hosts <= MAX_HOSTS:
        raise InputError(f"--hosts must be in [1, {MAX_HOSTS}], not {hosts}")
    if not 1 <= devices <= 16:
        raise InputError(f"--devices must be in [1, 16] per host, not {devices}")
    lo, hi = lag_s
    if not 0 < lo <= hi:
        raise InputError(f"--lag {lo:g}:{hi:g}: two positive seconds, the first not above the second")
    need = _fail_offset(duration_s) / NS + hi + TAIL_NS / NS
    if scenario == "ecc-reset" and duration_s < need:
        raise InputError(f"--duration {duration_s:g} s is too short for consequences up to {hi:g} s after the "
                         f"failure at {_fail_offset(duration_s) / NS:.2f} s: give at least {need:.2f} s")  # fmt: skip


def _incident_span(duration_s: float) -> Tuple[int, int]:
    start = int(INCIDENT_AT * duration_s * NS)
    return start, start + int(min(INCIDENT_SPAN_S, 0.5 * duration_s) * NS)


def _fail_offset(duration_s: float) -> int:
    t0, t1 = _incident_span(duration_s)
    return t0 + int(UCE_SHARE * (t1 - t0))


def plan_cluster(hosts: int, devices: int, scenario: str, seed: int, duration_s: float, rate: float,
                 lag_s: Tuple[float, float] = DEFAULT_LAG_S, host: Host = SINGLE) -> ClusterPlan:  # fmt: skip
    """The cluster's plan (see the module docstring); `rate`: each host's background calls per second."""
    validate_cluster(hosts, devices, scenario, duration_s, lag_s)
    validate("steady", duration_s, rate, devices, host)
    rng = random.Random(f"npu-sim-cluster:{seed}:{hosts}:{devices}")
    origin = (rng.randrange(hosts), rng.randrange(devices)) if scenario == "ecc-reset" else None
    identities = [_identity(seed, h, rng) for h in range(hosts)]
    cons = _consequences(rng, hosts, devices, origin, duration_s, lag_s)
    end = int(duration_s * NS)
    built = []
    for h in range(hosts):
        mine = [c for c in cons if c.host == h]
        actions, reports = _host_plan(seed, h, devices, origin, mine, end, rate, host, hosts * devices)
        built.append(ClusterHost(h, identities[h], tuple(actions), tuple(reports)))
    first = _incident_span(duration_s)[0] + int(0.05 * (_incident_span(duration_s)[1] - _incident_span(duration_s)[0]))
    fail = _fail_offset(duration_s) if origin is not None else None
    return ClusterPlan(scenario, seed, devices, duration_s, rate, tuple(built), origin,
                       first if origin is not None else None, fail, tuple(cons))  # fmt: skip


def _identity(seed: int, h: int, rng: random.Random) -> SimulatedHost:
    digest = hashlib.blake2b(f"npu-sim-cluster:{seed}:{h}".encode(), digest_size=32).hexdigest()
    boot = f"{digest[32:40]}-{digest[40:44]}-4{digest[45:48]}-8{digest[49:52]}-{digest[52:64]}"
    offset = rng.randint(-MAX_OFFSET_NS, MAX_OFFSET_NS)
    return SimulatedHost(f"npu-node-{h + 1:02d}", digest[:32], boot, offset, DECLARED_ERROR_NS)


def _consequences(rng: random.Random, hosts: int, devices: int, origin: Optional[Tuple[int, int]],
                  duration_s: float, lag_s: Tuple[float, float]) -> List[Consequence]:  # fmt: skip
    if origin is None:
        return []
    fail, lo, hi = _fail_offset(duration_s), int(lag_s[0] * NS), int(lag_s[1] * NS)
    out = []
    for h in range(hosts):
        lag = rng.randint(lo, hi)
        for d in range(devices):
            if (h, d) == origin:
                continue
            late = min(hi, lag + rng.randint(0, DEVICE_JITTER_NS))
            text = "EI0006" if rng.random() < SOCKET_SHARE else "EI0002"
            out.append(Consequence(h, d, fail + late, text))
    return out


def _host_plan(seed: int, h: int, devices: int, origin: Optional[Tuple[int, int]], mine: Sequence[Consequence],
               end: int, rate: float, host: Host, ranks: int) -> Tuple[List[Action], List[Report]]:  # fmt: skip
    p = Planner(seed * 1000 + h, devices)
    if origin is not None and origin[0] == h:
        t0, t1 = _incident_span(end / NS)
        ecc_reset(p, t0, t1, origin[1])
    reports = []
    for c in mine:
        stream = collective_timeout(p, c.offset_ns, c.device)
        p.quiet.append((c.device, c.offset_ns, end))  # the job has stopped: this rank is idle from now on
        rank = h * devices + c.device
        remote = origin[0] * devices + origin[1] if origin is not None else 0
        template = (HCCL_SOCKET if c.text == "EI0006" else HCCL_NOTIFY).replace("<rank>", str(rank)).replace(
            "<remote>", str(remote)).replace("<ranks>", str(ranks)).replace("<stream>", str(stream)).replace(
            "<task>", str(p.rng.randrange(1, 4096)))  # fmt: skip
        reports.append((c.offset_ns + 20 * MS + REPORT_AFTER_NS, c.device, COLLECTIVE, template))
    steady(p, 0, end, float(rate))
    actions = place(p.finish(), seed * 1000 + h, host)
    return [replace(a, proc=h) for a in actions], sorted(reports)


def collective_timeout(p: Planner, t: float, dev: int) -> int:
    """A rank's wait for a collective that never completes: the driver's completion-queue wait times out and
    the HAL's reap returns -ETIMEDOUT after its 20 ms; returns the stream."""
    g, stream = p.group(), p.rng.randrange(8)
    p.add(t, "drv_timeout", (dev, 1, stream, 20_000), kind="timeout", group=g, phase="collective")
    p.add(t + 5_000, "halCqReportRecv", (dev, 0, stream, 20), ret=hal.ETIMEDOUT, delay_ns=20 * MS, kind="timeout",
          group=g, phase="collective")  # fmt: skip
    return stream
