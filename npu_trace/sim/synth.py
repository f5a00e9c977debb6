"""Synthesize the raw TraceEvents the kernel would record for a simulator run, from its plan or its truth.

What the tests (ground truth without a kernel) and the benchmarks (large generated recordings) share; no I/O.

`formats()` builds an EventFormat for every simulator probe event from `npu_trace.device.hal`, through
`parse_format` on format texts shaped like the kernel's uprobe formats (entry: `__probe_ip` then the typed
parameters; return: `__probe_func`, `__probe_ret_ip`, `ret` s32), their print fmts as the kernel writes them.

`synth_events(source)` takes a truth dict (its "actions" records), a list of truth records, or a list of
planner `Action`s. Timestamps: a record's `start_ns`/`end_ns` when present (the executor's real times);
otherwise the executor is replayed: one thread, each action starting at max(t_ns, end of the previous one)
and a HAL call returning `delay_ns` later (so a 50 ms spike delays what follows, as on the real executor).

`host_events(actions, host)` does the same for a plan placed on a host-like executor's threads: the executor
replayed in time by `npu_trace.sim.timing` (each thread on its CPU, tasks completed on another CPU than their
submit, calls that return on another CPU); `probe_rows` gives one action's events, for a stream of them.

`truth_expectations(truth_or_actions)` says what the detectors must find (see its docstring); `TruthTally` adds
the records up one at a time.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from npu_trace.device import hal
from npu_trace.events import TraceEvent
from npu_trace.ftrace.format import EventFormat, parse_format
from npu_trace.sim.scenarios import Action
from npu_trace.sim.threads import Host
from npu_trace.sim.timing import HostTiming, Run

PID = 4242
FIRST_ID = 2300
_TYPES = {  # uprobe fetch type -> (C declaration type, size, signed)
    "u32": ("u32", 4, 0), "s32": ("s32", 4, 1), "x32": ("u32", 4, 0),
    "u64": ("u64", 8, 0), "s64": ("s64", 8, 1), "x64": ("u64", 8, 0),
}  # fmt: skip
# the kernel's print of each fetch type in a probe event's print fmt (kernel/trace/trace_probe.c)
_PRINTS = {"u32": "%u", "s32": "%d", "x32": "0x%x", "u64": "%Lu", "s64": "%Ld", "x64": "0x%Lx", "string": '\\"%s\\"'}
_COMMON = """\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
"""

ActionSource = Union[Mapping[str, Any], Sequence[Mapping[str, Any]], Sequence[Action]]


def _field(decl: str, offset: int, size: int, signed: int) -> str:
    return f"\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{signed};\n"


def entry_format_text(func: hal.Func, ev_id: int) -> str:
    lines, offset = [_field("unsigned long __probe_ip", 8, 8, 0)], 16
    prints, args = ["(%lx)"], ["REC->__probe_ip"]
    for p in func.params:
        prints.append(f"{p.name}={_PRINTS[p.type]}")
        args.append(f"__get_str({p.name})" if p.type == "string" else f"REC->{p.name}")
        if p.type == "string":
            lines.append(_field(f"__data_loc char[] {p.name}", offset, 4, 1))
            offset += 4
        else:
            ctype, size, signed = _TYPES[p.type]
            lines.append(_field(f"{ctype} {p.name}", offset, size, signed))
            offset += size
    fmt = f'"{" ".join(prints)}", {", ".join(args)}'
    return f'name: {func.event}\nID: {ev_id}\nformat:\n{_COMMON}\n{"".join(lines)}\nprint fmt: {fmt}\n'


def ret_format_text(func: hal.Func, ev_id: int) -> str:
    body = _field("unsigned long __probe_func", 8, 8, 0) + _field("unsigned long __probe_ret_ip", 16, 8, 0)
    body += _field("s32 ret", 24, 4, 1)
    fmt = '"(%lx <- %lx) ret=%d", REC->__probe_func, REC->__probe_ret_ip, REC->ret'
    return f"name: {func.ret_event}\nID: {ev_id}\nformat:\n{_COMMON}\n{body}\nprint fmt: {fmt}\n"


def marker_format() -> EventFormat:
    body = _field("unsigned long ip", 8, 8, 0) + _field("char buf[]", 16, 0, 0)
    return parse_format(f'name: print\nID: 5\nformat:\n{_COMMON}\n{body}\nprint fmt: "%ps: %s"\n', "ftrace")


def format_texts() -> Dict[str, str]:
    """Event name (without the group) -> its format text, for every entry and return probe of the simulator."""
    out: Dict[str, str] = {}
    ev_id = FIRST_ID
    for func in hal.FUNCS:
        out[func.event] = entry_format_text(func, ev_id)
        ev_id += 1
        if func.hal:
            out[func.ret_event] = ret_format_text(func, ev_id)
            ev_id += 1
    return out


def formats() -> Dict[str, EventFormat]:
    """Event name (without the group) -> EventFormat, for every entry and return probe of the simulator."""
    return {name: parse_format(text, hal.GROUP) for name, text in format_texts().items()}


_FORMATS = formats()


def records(source: ActionSource) -> List[Dict[str, Any]]:
    """Uniform action records: func, kind, dev, args (dict), ret, delay_ns, t_ns, start_ns?, end_ns?."""
    items: Iterable[Any] = source["actions"] if isinstance(source, Mapping) else source
    out = []
    for item in items:
        if isinstance(item, Action):
            rec = {"func": item.func, "kind": item.kind, "dev": item.dev, "args": item.fields(), "ret": item.ret,
                   "delay_ns": item.delay_ns, "t_ns": item.t_ns}  # fmt: skip
        else:
            rec = dict(item)
        out.append(rec)
    return out


def timed(recs: List[Dict[str, Any]]) -> List[Tuple[int, int, Dict[str, Any]]]:
    """(start, end, record): the executor's times when given, else a replay of its one thread."""
    out, cursor = [], 0
    for rec in recs:
        if rec.get("start_ns") is not None and rec.get("end_ns") is not None:
            out.append((int(rec["start_ns"]), int(rec["end_ns"]), rec))
            continue
        start = max(cursor, int(rec["t_ns"]))
        cursor = start + int(rec.get("delay_ns") or 0)
        out.append((start, cursor, rec))
    return out


def _entry_values(func: hal.Func, args: Mapping[str, Any], ip: int) -> Tuple[Any, ...]:
    return (ip, *(args[p.name] if p.type == "string" else int(args[p.name]) for p in func.params))


def synth_events(source: ActionSource, pid: int = PID, cpu: int = 0) -> List[TraceEvent]:
    """The TraceEvents (entry and return probes) of every action, sorted by timestamp (stable)."""
    evs: List[Tuple[int, int, TraceEvent]] = []
    for seq, (start, end, rec) in enumerate(timed(records(source))):
        func = hal.FUNC_BY_NAME[rec["func"]]
        values = _entry_values(func, rec["args"], 0x400000 + seq % 4096)
        evs.append((start, 2 * seq, TraceEvent(start, cpu, pid, _FORMATS[func.event], values)))
        if func.hal:
            ret = int(rec["ret"] or 0)
            ret_values = (0x400000, 0x401000, ret)
            evs.append((end, 2 * seq + 1, TraceEvent(end, cpu, pid, _FORMATS[func.ret_event], ret_values)))
    evs.sort(key=lambda e: (e[0], e[1]))
    return [e for _, _, e in evs]


# ---- host-like runs: each thread's events on the CPU it runs on -----------------------------------------
ProbeRow = Tuple[int, int, int, str, Tuple[Any, ...]]  # (ts_ns, cpu, tid, event name without its group, values)
_IP = {f.name: 0x401000 + 0x100 * i for i, f in enumerate(hal.FUNCS)}  # each probed function's address
RET_IP = 0x4FF000  # where the HAL calls return to


def probe_rows(a: Action, run: Run) -> List[ProbeRow]:
    """The probe events of one action as the executor ran it (`timing.Run`): its entry [and its return]."""
    func = hal.FUNC_BY_NAME[a.func]
    args = (v if p.type == "string" else int(v) for p, v in zip(func.params, a.args))
    rows = [(run.start_ns, run.cpu_in, run.tid, func.event, (_IP[a.func], *args))]
    if func.hal:
        rows.append((run.end_ns, run.cpu_out, run.tid, func.ret_event, (_IP[a.func], RET_IP, int(a.ret or 0))))
    return rows


def host_events(
    actions: Sequence[Action], host: Host, cpus: Sequence[int] = (0, 1), t0_ns: int = 0, pid: int = PID
) -> List[TraceEvent]:
    """The TraceEvents of a placed plan run by the host-like executor (`npu_trace.sim.timing`), each on the CPU
    its probe fires on, sorted by timestamp (stable)."""
    timing = HostTiming(host, cpus, t0_ns, pid)
    rows = [row for a in actions for row in probe_rows(a, timing.run(a))]
    rows.sort(key=itemgetter(0))
    return [TraceEvent(ts, cpu, tid, _FORMATS[name], values) for ts, cpu, tid, name, values in rows]


def marker(ts_ns: int, text: str, pid: int = PID, cpu: int = 0) -> TraceEvent:
    return TraceEvent(ts_ns, cpu, pid, _MARKER, (0xFFFF0000, text + "\n"))


_MARKER = marker_format()


# ---- what the detectors must find -----------------------------------------------------------------------
def truth_expectations(source: ActionSource) -> Dict[str, Any]:
    """What the truth implies, as Counters/dicts comparable with the findings:

    spikes      Counter[(dev, func)] of actions of kind "spike" (the HAL call carrying the injected delay)
    alloc_fail  Counter[dev] of failed devmm_alloc_done actions (kind "alloc_fail")
    timeouts    Counter[(dev, op)]: drv_timeout by its kind name, halCqReportRecv returning -ETIMEDOUT,
                heartbeat lost as op "heartbeat"
    resets      {dev: [step names in order]} of devdrv_reset_step actions
    precursor   {dev: {"ce_last", "uce_last", "max_temp_c"}} from the ECC reports before the reset
    leaks       {dev: (count, bytes)} of successful allocations never freed
    """
    tally = TruthTally()
    for rec in records(source):
        tally.add(rec)
    return tally.expectations()


# the functions the truth looks at (memory, resets, ECC, timeouts); any other action counts only as a spike
_TALLIED = frozenset(("devmm_alloc_done", "halMemFree", "devdrv_reset_step", "dms_event_report", "drv_timeout",
                      "hb_report_heart_beat_lost_event", "halCqReportRecv"))  # fmt: skip


class TruthTally:
    """`truth_expectations` one record at a time (`records()` form), for runs too large to hold at once."""

    def __init__(self) -> None:
        self.spikes: Counter[Tuple[int, str]] = Counter()
        self.alloc_fail: Counter[int] = Counter()
        self.timeouts: Counter[Tuple[int, str]] = Counter()
        self.resets: Dict[int, List[str]] = {}
        self.precursor: Dict[int, Dict[str, int]] = {}
        self.live: Dict[Tuple[int, int], int] = {}  # (dev, va) -> size of the allocations not freed yet

    def add_action(self, a: Action) -> None:
        """add() for a planner action: only those the truth counts are turned into records."""
        if a.kind == "spike" or a.func in _TALLIED:
            self.add(records([a])[0])

    def add(self, rec: Mapping[str, Any]) -> None:
        func, dev = rec["func"], rec["dev"]
        if rec["kind"] == "spike":
            self.spikes[(dev, func)] += 1
        timeout = _timeout_key(rec)
        if timeout is not None:
            self.timeouts[timeout] += 1
        if func == "devmm_alloc_done":
            self._allocated(rec)
        elif func == "halMemFree" and (rec["ret"] or 0) == 0:
            self.live.pop((dev, int(rec["args"]["va"])), None)
        elif func == "devdrv_reset_step":
            self.resets.setdefault(dev, []).append(str(rec["args"]["step_name"]))
        elif func == "dms_event_report":
            self._ecc(dev, rec["args"])

    def _allocated(self, rec: Mapping[str, Any]) -> None:
        args = rec["args"]
        if rec["kind"] == "alloc_fail":
            self.alloc_fail[rec["dev"]] += 1
        if int(args["ret"]) == 0:
            self.live[(rec["dev"], int(args["va"]))] = int(args["size"])

    def _ecc(self, dev: int, args: Mapping[str, Any]) -> None:
        cur = self.precursor.setdefault(dev, {"ce_last": 0, "uce_last": 0, "max_temp_c": -999})
        cur.update(ce_last=int(args["ce_count"]), uce_last=int(args["uce_count"]))
        cur["max_temp_c"] = max(cur["max_temp_c"], int(args["temp_c"]))

    def expectations(self) -> Dict[str, Any]:
        """What the records so far imply (see truth_expectations)."""
        leaks: Dict[int, Tuple[int, int]] = {}
        for (dev, _), size in sorted(self.live.items()):
            count, total = leaks.get(dev, (0, 0))
            leaks[dev] = (count + 1, total + size)
        return {"spikes": Counter(self.spikes), "alloc_fail": Counter(self.alloc_fail),
                "timeouts": Counter(self.timeouts), "resets": {d: list(s) for d, s in self.resets.items()},
                "precursor": {d: dict(p) for d, p in self.precursor.items()}, "leaks": leaks}  # fmt: skip


def accounting_expectations(truth: Mapping[str, Any]) -> Dict[str, Any]:
    """What the accounting detector must find in a run whose health channel polled the fake npu-smi (the truth
    of a run with side channels: `channels.npu_smi.memory`, the fake's memory steps):

    counted_twice  {dev: {"used_mb", "process_sum_mb", "pids"}}: the first state of each chip whose process
                   rows add up to more than it uses (the rows' pids in order), for a scenario whose memory
                   stays as it is from then on (shared-weights: the workers map the weights last)
    explained      [(dev, explanation, size)] of the failed allocations the fake's chip showed room for (at
                   its last step before the failure): fragmentation when the driver's largest free block was
                   below the size though its free bytes sufficed, accounting when its free bytes were below
    """
    steps = ((truth.get("channels") or {}).get("npu_smi") or {}).get("memory") or []
    twice: Dict[int, Dict[str, Any]] = {}
    for step in steps:
        rows = step["processes"]
        total = sum(r["memory_mb"] for r in rows)
        if step["dev"] not in twice and total > step["used_mb"] + len(rows):
            twice[step["dev"]] = {"used_mb": step["used_mb"], "process_sum_mb": total,
                                  "pids": [r["pid"] for r in rows]}  # fmt: skip
    explained = []
    total_mb = 65536
    for rec in truth.get("actions", []):
        if rec["func"] != "devmm_alloc_done" or rec["kind"] != "alloc_fail":
            continue
        before = [st for st in steps if st["dev"] == rec["dev"] and st["t_ns"] <= rec["t_ns"] + truth["t0_ns"]]
        used = before[-1]["used_mb"] if before else None
        args = rec["args"]
        size, free, largest = int(args["size"]), int(args["free_bytes"]), int(args["largest_free"])
        if used is None or (total_mb - used) * (1 << 20) < size:
            continue
        how = "fragmentation" if largest < size <= free else "accounting" if free < size else "unexplained"
        explained.append((rec["dev"], how, size))
    return {"counted_twice": twice, "explained": explained}


def _timeout_key(rec: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
    if rec["func"] == "drv_timeout":
        return rec["dev"], hal.TIMEOUT_KINDS[int(rec["args"]["kind"])]
    if rec["func"] == "halCqReportRecv" and rec["ret"] == hal.ETIMEDOUT:
        return rec["dev"], "halCqReportRecv"
    if rec["func"] == "hb_report_heart_beat_lost_event":
        return rec["dev"], "heartbeat"
    return None
