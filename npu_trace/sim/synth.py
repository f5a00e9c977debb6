"""Synthesize the raw TraceEvents the kernel would record for a simulator run, from its plan or its truth.

What the tests (ground truth without a kernel) and the benchmarks (large generated recordings) share; no I/O.

`formats()` builds an EventFormat for every simulator probe event from `npu_trace.device.hal`, through
`parse_format` on format texts shaped like the kernel's uprobe formats (entry: `__probe_ip` then the typed
parameters; return: `__probe_func`, `__probe_ret_ip`, `ret` s32).

`synth_events(source)` takes a truth dict (its "actions" records), a list of truth records, or a list of
planner `Action`s. Timestamps: a record's `start_ns`/`end_ns` when present (the executor's real times);
otherwise the executor is replayed: one thread, each action starting at max(t_ns, end of the previous one)
and a HAL call returning `delay_ns` later (so a 50 ms spike delays what follows, as on the real executor).

`truth_expectations(truth_or_actions)` says what the detectors must find (see its docstring).
"""

from __future__ import annotations

import collections
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from npu_trace.device import hal
from npu_trace.events import TraceEvent
from npu_trace.ftrace.format import EventFormat, parse_format
from npu_trace.sim.scenarios import Action

PID = 4242
FIRST_ID = 2300
_TYPES = {  # uprobe fetch type -> (C declaration type, size, signed)
    "u32": ("u32", 4, 0), "s32": ("s32", 4, 1), "x32": ("u32", 4, 0),
    "u64": ("u64", 8, 0), "s64": ("s64", 8, 1), "x64": ("u64", 8, 0),
}  # fmt: skip
_COMMON = """\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
"""

Source = Union[Mapping[str, Any], Sequence[Mapping[str, Any]], Sequence[Action]]


def _field(decl: str, offset: int, size: int, signed: int) -> str:
    return f"\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{signed};\n"


def entry_format_text(func: hal.Func, ev_id: int) -> str:
    lines, offset = [_field("unsigned long __probe_ip", 8, 8, 0)], 16
    for p in func.params:
        if p.type == "string":
            lines.append(_field(f"__data_loc char[] {p.name}", offset, 4, 1))
            offset += 4
        else:
            ctype, size, signed = _TYPES[p.type]
            lines.append(_field(f"{ctype} {p.name}", offset, size, signed))
            offset += size
    return f'name: {func.event}\nID: {ev_id}\nformat:\n{_COMMON}\n{"".join(lines)}\nprint fmt: "(%lx)"\n'


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


def records(source: Source) -> List[Dict[str, Any]]:
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


def synth_events(source: Source, pid: int = PID, cpu: int = 0) -> List[TraceEvent]:
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


def marker(ts_ns: int, text: str, pid: int = PID, cpu: int = 0) -> TraceEvent:
    return TraceEvent(ts_ns, cpu, pid, _MARKER, (0xFFFF0000, text + "\n"))


_MARKER = marker_format()


# ---- what the detectors must find -----------------------------------------------------------------------
def truth_expectations(source: Source) -> Dict[str, Any]:
    """What the truth implies, as Counters/dicts comparable with the findings:

    spikes      Counter[(dev, func)] of actions of kind "spike" (the HAL call carrying the injected delay)
    alloc_fail  Counter[dev] of failed devmm_alloc_done actions (kind "alloc_fail")
    timeouts    Counter[(dev, op)]: drv_timeout by its kind name, halCqReportRecv returning -ETIMEDOUT,
                heartbeat lost as op "heartbeat"
    resets      {dev: [step names in order]} of devdrv_reset_step actions
    precursor   {dev: {"ce_last", "uce_last", "max_temp_c"}} from the ECC reports before the reset
    leaks       {dev: (count, bytes)} of successful allocations never freed
    """
    recs = records(source)
    exp: Dict[str, Any] = {
        "spikes": collections.Counter((r["dev"], r["func"]) for r in recs if r["kind"] == "spike"),
        "alloc_fail": collections.Counter(
            r["dev"] for r in recs if r["func"] == "devmm_alloc_done" and r["kind"] == "alloc_fail"
        ),
        "timeouts": collections.Counter(t for t in map(_timeout_key, recs) if t is not None),
        "resets": _resets(recs),
        "precursor": _precursors(recs),
        "leaks": _leaks(recs),
    }
    return exp


def _timeout_key(rec: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
    if rec["func"] == "drv_timeout":
        return rec["dev"], hal.TIMEOUT_KINDS[int(rec["args"]["kind"])]
    if rec["func"] == "halCqReportRecv" and rec["ret"] == hal.ETIMEDOUT:
        return rec["dev"], "halCqReportRecv"
    if rec["func"] == "hb_report_heart_beat_lost_event":
        return rec["dev"], "heartbeat"
    return None


def _resets(recs: List[Dict[str, Any]]) -> Dict[int, List[str]]:
    out: Dict[int, List[str]] = {}
    for r in recs:
        if r["func"] == "devdrv_reset_step":
            out.setdefault(r["dev"], []).append(str(r["args"]["step_name"]))
    return out


def _precursors(recs: List[Dict[str, Any]]) -> Dict[int, Dict[str, int]]:
    out: Dict[int, Dict[str, int]] = {}
    for r in recs:
        if r["func"] == "dms_event_report":
            a, cur = r["args"], out.setdefault(r["dev"], {"ce_last": 0, "uce_last": 0, "max_temp_c": -999})
            cur.update(ce_last=int(a["ce_count"]), uce_last=int(a["uce_count"]))
            cur["max_temp_c"] = max(cur["max_temp_c"], int(a["temp_c"]))
    return out


def _leaks(recs: List[Dict[str, Any]]) -> Dict[int, Tuple[int, int]]:
    live: Dict[Tuple[int, int], int] = {}
    for r in recs:
        if r["func"] == "devmm_alloc_done" and int(r["args"]["ret"]) == 0:
            live[(r["dev"], int(r["args"]["va"]))] = int(r["args"]["size"])
        elif r["func"] == "halMemFree" and (r["ret"] or 0) == 0:
            live.pop((r["dev"], int(r["args"]["va"])), None)
    out: Dict[int, Tuple[int, int]] = {}
    for (dev, _), size in sorted(live.items()):
        count, total = out.get(dev, (0, 0))
        out[dev] = (count + 1, total + size)
    return out
