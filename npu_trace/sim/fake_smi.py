"""The simulated NPU's `npu-smi`: the real tool's output formats (reference §8, as npu_trace.device.npusmi parses
them), with values that follow a scenario's own state over time.

`npu-trace sim run` writes two files into one directory (`install`, `write_state`):
    npu-smi       a small executable script (shebang: the interpreter that ran `sim run`, with `-IS`: no
                  site-packages, no package __init__s, ~50 ms a call) that loads this module by its path and
                  calls `main`; this module imports only the standard library for that reason
    npu-smi.json  the state: t0 (the executor's start on CLOCK_MONOTONIC), the device count, and the steps
                  (offset_ns from t0, device, the full readings from then on)
The script reads the state on every call and answers for "now" (CLOCK_MONOTONIC): before the first step of a
device its baseline, after the run its final state. A later run overwrites the state. Each call that answered
appends the time it answered for (CLOCK_MONOTONIC ns) and its arguments to `npu-smi.calls` beside the state
(`polls_since`), so a test waits for a poll of the final state instead of sleeping for one.

The readings (`schedule`) follow the planned actions: each `dms_event_report` (an ECC event) sets the HBM
single/double-bit counts, the chip and HBM temperature (the event's temp_c) and the health (correctable:
Warning, uncorrectable: Alarm, with the event ids as error codes); the reset's last step (`heartbeat_resume`)
brings the health back to OK and the temperature back to the baseline (the ECC counts stay).

Memory (`memory_schedule`), the way the real npu-smi counts it: a chip's HBM used is HBM_USED_MB (the
driver's and runtime's own) plus the bytes its allocations hold; each process row is the bytes that process
allocated plus the shared regions it maps (`scenarios.Share`: memory that several processes map is counted in
each of them, so the rows can add up to more than the chip uses). Changes closer than MEMORY_STEP_NS to the
next one are taken together (at the later one's time): a long run's state stays small.

Commands answered (what npu_trace.sources.npusmi_source invokes, and a few more):
    npu-smi info                                      the 910B "v1" device table
    npu-smi info -t ecc|temp|health|pcie-err|sensors|memory -i <npu> [-c <chip>]
    npu-smi -v | -h
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

SCRIPT_NAME = "npu-smi"
STATE_NAME = "npu-smi.json"
CALLS_NAME = "npu-smi.calls"
CALLS_MAX = 1 << 20  # bytes of the call record (about 25,000 calls) before it starts again
STATE_VERSION = 2
MEMORY_STEP_NS = 10_000_000
MIB = 1 << 20
SMI_VERSION = "23.0.rc3"
CHIP_NAME = "910B3"
BASE_TEMP_C = 55
HBM_TOTAL_MB = 65536
HBM_USED_MB = 3162
POWER_W = 93.6
RESUME_STEP = "heartbeat_resume"
# ECC event state (event_id & 0x1ff, sensor 0x0C memory) -> (health, "event state" text)
ECC_STATES = {
    0: ("Warning", "correctable ECC"),
    1: ("Alarm", "uncorrectable ECC"),
    5: ("Warning", "correctable ECC logging limit reached"),
    9: ("Alarm", "scrub uncorrectable ECC"),
}
SEVERITY = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3}

Values = Dict[str, Any]  # ce, uce, npu_temp_c, hbm_temp_c, health, error_code, error_info
Step = Tuple[int, int, Values]  # (offset_ns from t0, device, readings from then on)
# (offset_ns from t0, device, bytes its allocations hold, {process index: bytes it holds or maps}) from then on
MemoryStep = Tuple[int, int, int, Dict[int, int]]


def baseline() -> Values:
    return {"ce": 0, "uce": 0, "npu_temp_c": BASE_TEMP_C, "hbm_temp_c": BASE_TEMP_C,
            "health": "OK", "error_code": "NA", "error_info": "NA"}  # fmt: skip


# ---- the schedule (computed by `sim run` from the plan) --------------------------------------------------
def schedule(actions: Iterable[Any], devices: int) -> List[Step]:
    """The readings' steps for planned actions (scenarios.Action: t_ns, func, args), in time order."""
    current = {dev: baseline() for dev in range(devices)}
    steps: List[Step] = []
    for a in sorted(actions, key=lambda a: a.t_ns):
        dev = int(a.args[0])
        if dev not in current:
            continue
        if a.func == "dms_event_report":
            values = _ecc_event(current[dev], int(a.args[1]), int(a.args[2]), int(a.args[3]), int(a.args[4]))
        elif a.func == "devdrv_reset_step" and str(a.args[2]) == RESUME_STEP:
            values = {**baseline(), "ce": current[dev]["ce"], "uce": current[dev]["uce"]}
        else:
            continue
        current[dev] = values
        steps.append((int(a.t_ns), dev, values))
    return steps


def memory_schedule(actions: Iterable[Any], devices: int, shares: Iterable[Any] = ()) -> List[MemoryStep]:
    """The memory steps of planned actions (successful devmm_alloc_done, halMemFree) and shared mappings
    (scenarios.Share: t_ns, dev, size, proc), in time order, changes within MEMORY_STEP_NS taken together."""
    changes: List[Tuple[int, int, int, int]] = []  # (t_ns, dev, process, delta bytes)
    live: Dict[Tuple[int, int], Tuple[int, int]] = {}  # (dev, va) -> (size, process)
    for a in sorted(actions, key=lambda a: a.t_ns):
        dev = int(a.args[0])
        if dev >= devices:
            continue
        if a.func == "devmm_alloc_done" and int(a.args[3]) == 0:
            live[(dev, int(a.args[2]))] = (int(a.args[1]), a.proc)
            changes.append((a.t_ns, dev, a.proc, int(a.args[1])))
        elif a.func == "halMemFree" and (dev, int(a.args[1])) in live:
            size, proc = live.pop((dev, int(a.args[1])))
            changes.append((a.t_ns, dev, proc, -size))
    shared = [(int(sh.t_ns), int(sh.dev), int(sh.proc), int(sh.size)) for sh in shares if int(sh.dev) < devices]
    used = dict.fromkeys(range(devices), 0)
    rows: Dict[int, Dict[int, int]] = {dev: {} for dev in range(devices)}
    steps: List[MemoryStep] = []
    ordered = sorted([(t, 0, dev, proc, d) for t, dev, proc, d in changes]
                     + [(t, 1, dev, proc, d) for t, dev, proc, d in shared])  # fmt: skip
    for i, (t, is_share, dev, proc, delta) in enumerate(ordered):
        if not is_share:
            used[dev] += delta
        rows[dev][proc] = rows[dev].get(proc, 0) + delta
        later = ordered[i + 1] if i + 1 < len(ordered) else None
        if later is not None and later[2] == dev and later[0] - t < MEMORY_STEP_NS:
            continue  # taken together with the next change of this device
        steps.append((int(t), dev, used[dev], {k: v for k, v in sorted(rows[dev].items()) if v}))
    return steps


def _ecc_event(prev: Values, event_id: int, ce: int, uce: int, temp_c: int) -> Values:
    health, text = ECC_STATES.get(event_id & 0x1FF, ("Warning", "memory event"))
    code = f"{event_id:08X}"
    codes = [] if prev["error_code"] == "NA" else str(prev["error_code"]).split()
    if code not in codes:
        codes.append(code)
    if SEVERITY.get(prev["health"], 0) > SEVERITY[health]:
        health = prev["health"]
    info = f"node type=HBM, sensor type=Memory, event state={text}"
    return {"ce": ce, "uce": uce, "npu_temp_c": temp_c, "hbm_temp_c": temp_c, "health": health,
            "error_code": " ".join(codes), "error_info": info}  # fmt: skip


def summary(steps: Sequence[Step], t0_ns: int) -> Dict[str, Any]:
    """What the fake reports, for the truth file: every step, the ECC climb (steps where a count changed) and
    the temperature peak per device (its first time at the maximum)."""
    out: Dict[str, Any] = {"steps": [], "ecc_climb": [], "temp_peak": []}
    last: Dict[int, Tuple[int, int]] = {}
    peak: Dict[int, Dict[str, Any]] = {}
    for off, dev, v in steps:
        t = t0_ns + off
        out["steps"].append({"t_ns": t, "offset_ns": off, "dev": dev, **v})
        if (v["ce"], v["uce"]) != last.get(dev, (0, 0)):
            out["ecc_climb"].append({"t_ns": t, "dev": dev, "ce": v["ce"], "uce": v["uce"]})
        last[dev] = (v["ce"], v["uce"])
        if dev not in peak or v["npu_temp_c"] > peak[dev]["temp_c"]:
            peak[dev] = {"t_ns": t, "dev": dev, "temp_c": v["npu_temp_c"], "hbm_temp_c": v["hbm_temp_c"]}
    out["temp_peak"] = [peak[d] for d in sorted(peak)]
    return out


# ---- the state file -----------------------------------------------------------------------------------------
class State:
    """t0, the device count, the steps, the memory steps and the executor processes ([index, pid, name]);
    `values(dev, now_ns)` -> the readings at that time, `memory(dev, now_ns)` -> (used MB, process rows)."""

    def __init__(self, t0_ns: int, devices: int, steps: Sequence[Step], memory: Sequence[MemoryStep] = (),
                 processes: Sequence[Tuple[int, int, str]] = ()) -> None:  # fmt: skip
        self.t0_ns = t0_ns
        self.devices = devices
        self.steps = sorted(steps, key=lambda s: s[0])
        self.memory_steps = sorted(memory, key=lambda s: s[0])
        self.processes = {int(k): (int(pid), str(name)) for k, pid, name in processes}

    def to_dict(self) -> Dict[str, Any]:
        memory = [[off, dev, used, [[k, n] for k, n in rows.items()]] for off, dev, used, rows in self.memory_steps]
        return {"version": STATE_VERSION, "clock": "CLOCK_MONOTONIC", "t0_ns": self.t0_ns,
                "devices": self.devices, "steps": [list(s) for s in self.steps], "memory": memory,
                "processes": [[k, pid, name] for k, (pid, name) in sorted(self.processes.items())]}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> State:
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"state version {d.get('version')!r}, expected {STATE_VERSION}")
        steps = [(int(off), int(dev), dict(v)) for off, dev, v in d["steps"]]
        memory = [(int(off), int(dev), int(used), {int(k): int(n) for k, n in rows})
                  for off, dev, used, rows in d.get("memory", [])]  # fmt: skip
        procs = [(int(k), int(pid), str(name)) for k, pid, name in d.get("processes", [])]
        return cls(int(d["t0_ns"]), int(d["devices"]), steps, memory, procs)

    @classmethod
    def load(cls, path: str) -> State:
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def values(self, dev: int, now_ns: int) -> Values:
        out = baseline()
        for off, d, v in self.steps:
            if self.t0_ns + off > now_ns:
                break
            if d == dev:
                out = v
        return dict(out)

    def memory(self, dev: int, now_ns: int) -> Tuple[int, List[Tuple[int, str, int]]]:
        """(HBM used MB, [(pid, name, MB)] of the processes holding memory on the chip) at that time (a
        process whose pid is not known yet is left out)."""
        used, rows = 0, {}
        for off, d, u, r in self.memory_steps:
            if self.t0_ns + off > now_ns:
                break
            if d == dev:
                used, rows = u, r
        listed = [(*self.processes[k], mb(n)) for k, n in sorted(rows.items()) if k in self.processes]
        return HBM_USED_MB + mb(used), [(pid, name, mb) for pid, name, mb in listed if mb]


def mb(n: int) -> int:
    return (n + MIB // 2) // MIB


def write_state(directory: str, state: State) -> str:
    path = os.path.join(directory, STATE_NAME)
    _write_atomic(path, json.dumps(state.to_dict()) + "\n", 0o644)
    return path


def install(directory: str) -> str:
    """Write the `npu-smi` script into `directory` (created if needed); returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SCRIPT_NAME)
    module = os.path.abspath(__file__)
    lines = [
        f"#!{sys.executable} -IS",
        "# npu-smi of the simulated NPU, written by `npu-trace sim run`: answers from npu-smi.json next to it.",
        "import importlib.util",
        "import os",
        "import sys",
        "",
        f"spec = importlib.util.spec_from_file_location('npu_trace_sim_fake_smi', {module!r})",
        "mod = importlib.util.module_from_spec(spec)",
        "sys.modules[spec.name] = mod",
        "spec.loader.exec_module(mod)",
        f"sys.exit(mod.main(sys.argv[1:], os.path.join(os.path.dirname(os.path.abspath(__file__)), {STATE_NAME!r})))",
    ]
    _write_atomic(path, "\n".join(lines) + "\n", 0o755)
    return path


def _write_atomic(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# ---- output formats -----------------------------------------------------------------------------------------
def _kv(key: str, value: object, width: int = 30) -> str:
    return f"\t{key:<{width}} : {value}"


def _head(npu: int) -> List[str]:
    return [_kv("NPU ID", npu), _kv("Chip Count", 1), ""]


RULE = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
DOUBLE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"


def _row(a: str, b: str, c: str) -> str:
    return f"| {a:<26}| {b:<14}| {c:<51}|"


def bus_id(npu: int) -> str:
    """The device's PCI address as npu-smi prints it (the simulator's bdf, npu_trace.sim.side_channels.bdf_of)."""
    return f"0000:{0x3B + npu:02X}:00.0"


def render_info(state: State, now_ns: int) -> str:
    out = ["+" + "-" * 96 + "+", f"| {'npu-smi ' + SMI_VERSION:<33}{'Version: ' + SMI_VERSION:<62}|", RULE,
           _row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
           _row("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"), DOUBLE]  # fmt: skip
    memory = [state.memory(npu, now_ns) for npu in range(state.devices)]
    for npu in range(state.devices):
        v = state.values(npu, now_ns)
        used = memory[npu][0]
        out.append(_row(f"{npu:<6}{CHIP_NAME}", v["health"], f"{POWER_W:<12}{v['npu_temp_c']:<18}{0:<5}/ {0:<14}"))
        out.append(_row("0", bus_id(npu), f"{0:<12}{0:<5}/ {0:<11}{used:<5}/ {HBM_TOTAL_MB:<14}"))
        out.append(DOUBLE)
    out += [RULE, f"| {'NPU     Chip':<26}| {'Process id':<14}| {'Process name':<25}| {'Process memory(MB)':<24}|",
            DOUBLE]  # fmt: skip
    for npu in range(state.devices):
        rows = memory[npu][1]
        for pid, name, mb in rows:
            out.append(f"| {f'{npu:<8}0':<26}| {pid:<14}| {name[:24]:<25}| {mb:<24}|")
        out += [] if rows else [f"| {f'No running processes found in NPU {npu}':<95}|"]
        out.append(DOUBLE)
    return "\n".join(out) + "\n"


def render_type(kind: str, npu: int, v: Values) -> Optional[str]:
    """`info -t <kind>` for one chip; None for a type the fake does not know."""
    if kind == "ecc":
        rows = [(f"DDR {w} Bit {k}", 0) for k in ("Error Count", "Aggregate Total Err Cnt", "Isolated Pages Count")
                for w in ("Single", "Double")]  # fmt: skip
        rows += [
            ("HBM Single Bit Error Count", v["ce"]),
            ("HBM Double Bit Error Count", v["uce"]),
            ("HBM Single Bit Aggregate Total Err Cnt", v["ce"]),
            ("HBM Double Bit Aggregate Total Err Cnt", v["uce"]),
            ("HBM Single Bit Isolated Pages Count", 0),
            ("HBM Double Bit Isolated Pages Count", v["uce"]),
            ("HBM Single Bit Next-Isolated Pages Count", 0),
            ("HBM Double Bit Next-Isolated Pages Count", 0),
        ]
        return "\n".join(_head(npu) + [_kv(k, val, 40) for k, val in rows]) + "\n"
    body = _TYPES.get(kind)
    if body is None:
        return None
    lines = [] if kind == "memory" else _head(npu)
    return "\n".join(lines + [_kv(k, val) for k, val in body(v)]) + "\n"


_TYPES = {
    "temp": lambda v: [("NPU Temperature (C)", v["npu_temp_c"])],
    "sensors": lambda v: [("Soc Max Temperature (C)", v["npu_temp_c"]), ("SFP Temperature (C)", "NA"),
                          ("NDIE Temperature (C)", v["npu_temp_c"] - 10), ("HBM Temperature (C)", v["hbm_temp_c"])],
    "health": lambda v: [("Health", v["health"]), ("Error Code", v["error_code"]),
                         ("Error Information", v["error_info"])],
    "pcie-err": lambda v: [(k, 0) for k in ("TX Error Count", "RX Error Count", "Lcrc Error Count",
                                            "Ecrc Error Count", "Retry Count", "Pcs Rx Error Count",
                                            "Phy Lane Error Count", "Dl Lcrc Error Count", "Dl Dcrc Error Count")],
    "memory": lambda v: [("DDR Capacity(MB)", 0), ("DDR Clock Speed(MHz)", 0), ("HBM Capacity(MB)", HBM_TOTAL_MB),
                         ("HBM Clock Speed(MHz)", 1600), ("HBM Temperature(C)", v["hbm_temp_c"]),
                         ("HBM Manufacturer ID", "0x1")],
}  # fmt: skip
USAGE = ("Usage: npu-smi info [-t <type> -i <id> [-c <chip_id>]]\n"
         "       npu-smi -v | -h\n"
         "Types: ecc, temp, health, pcie-err, sensors, memory (simulated NPU)\n")  # fmt: skip


def render(argv: Sequence[str], state: State, now_ns: int) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of `npu-smi argv` at time now_ns."""
    if not argv or argv[0] in ("-h", "--help"):
        return 0, USAGE, ""
    if argv[0] == "-v":
        return 0, f"npu-smi version: {SMI_VERSION}\n", ""
    if argv[0] != "info":
        return 1, "", f"Error: unknown command {argv[0]!r}\n" + USAGE
    if len(argv) == 1:
        return 0, render_info(state, now_ns), ""
    opts = dict(zip(argv[1::2], argv[2::2]))
    if len(argv) % 2 == 0 or not set(opts) <= {"-t", "-i", "-c"} or "-t" not in opts or "-i" not in opts:
        return 1, "", "Error: bad arguments\n" + USAGE
    npu, chip = _number(opts["-i"]), _number(opts.get("-c", "0"))
    if npu is None or chip != 0 or not 0 <= npu < state.devices:
        return 1, "", f"Error: the device (id={opts['-i']}, chip={opts.get('-c', '0')}) does not exist\n"
    text = render_type(opts["-t"], npu, state.values(npu, now_ns))
    if text is None:
        return 1, "", f"Error: type {opts['-t']!r} is not supported by the simulated NPU\n" + USAGE
    return 0, text, ""


def _number(text: str) -> Optional[int]:
    return int(text) if text.isdigit() else None


def main(argv: Sequence[str], state_path: Optional[str] = None) -> int:
    path = os.environ.get("NPU_SIM_SMI_STATE") or state_path or STATE_NAME
    try:
        state = State.load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"npu-smi (simulated NPU): no usable state in {path} ({exc}): run `npu-trace sim run`\n")
        return 1
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    rc, out, err = render(argv, state, now)
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    try:  # one short line in append mode: whole even with calls at once
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), CALLS_NAME), "a") as f:
            if f.tell() > CALLS_MAX:  # a demo polled for days: the record stays bounded (started again)
                f.truncate(0)
            f.write(f"{now} {' '.join(argv)}\n")
    except OSError:
        pass  # a read-only directory: the answer stands, only the record of it is missing
    return rc


def polls_since(directory: str, since_ns: int) -> int:
    """How many whole health polls (npu_trace.sources.npusmi_source: `npu-smi info`, then its `-t` queries) the
    npu-smi in `directory` answered, begun at or after `since_ns`: a poll is whole once the next one began."""
    try:
        with open(os.path.join(directory, CALLS_NAME)) as f:
            rows = [line.split(" ", 1) for line in f]
    except OSError:
        return 0
    starts = sum(1 for row in rows if len(row) == 2 and row[1].strip() == "info" and int(row[0]) >= since_ns)
    return max(starts - 1, 0)
