"""Run a planned scenario through the native executor and produce its ground truth.

Plan file (one action per line): `t_ns func ret delay_ns a0 a1 a2 a3 a4 a5 str` (numeric arguments in C order
with the string argument left out and given last, "-" when none). The executor answers one line per action:
`start_ns end_ns ret` on CLOCK_MONOTONIC (the `mono` trace clock).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from npu_trace.errors import SimulatorError
from npu_trace.sim import abi, build
from npu_trace.sim.scenarios import Action, plan

Truth = Dict[str, Any]


def plan_line(a: Action) -> str:
    func = abi.FUNC_BY_NAME[a.func]
    nums: List[int] = []
    text = "-"
    for param, value in zip(func.params, a.args):
        if param.type == "string":
            text = str(value)
        else:
            nums.append(int(value))
    nums += [0] * (6 - len(nums))
    ret = 0 if a.ret is None else a.ret
    return f"{a.t_ns} {a.func} {ret} {a.delay_ns} " + " ".join(map(str, nums)) + f" {text}\n"


def parse_output(text: str, count: int) -> List[Tuple[int, int, int]]:
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    if len(rows) != count:
        raise SimulatorError(f"executor reported {len(rows)} of {count} actions")
    return rows


def action_record(seq: int, a: Action, row: Tuple[int, int, int]) -> Dict[str, Any]:
    func = abi.FUNC_BY_NAME[a.func]
    events = [func.event] + ([func.ret_event] if func.hal else [])
    return {
        "seq": seq,
        "kind": a.kind,
        "phase": a.phase,
        "group": a.group,
        "func": a.func,
        "events": events,
        "dev": a.dev,
        "args": a.fields(),
        "ret": a.ret,
        "delay_ns": a.delay_ns,
        "t_ns": a.t_ns,
        "start_ns": row[0],
        "end_ns": row[1],
    }


def build_truth(meta: Dict[str, Any], actions: List[Action], rows: List[Tuple[int, int, int]]) -> Truth:
    for a, row in zip(actions, rows):
        if a.ret is not None and a.ret != row[2]:
            raise SimulatorError(f"executor returned {row[2]} from {a.func}, planned {a.ret}")
    records = [action_record(i, a, r) for i, (a, r) in enumerate(zip(actions, rows))]
    truth = dict(meta)
    truth["actions"] = records
    truth["counts"] = dict(sorted(collections.Counter(a.func for a in actions).items()))
    truth["event_counts"] = dict(sorted(collections.Counter(e for r in records for e in r["events"]).items()))
    truth["kind_counts"] = dict(sorted(collections.Counter(a.kind for a in actions).items()))
    truth["start_ns"] = rows[0][0] if rows else 0
    truth["end_ns"] = rows[-1][1] if rows else 0
    return truth


class ScenarioRun:
    """A running executor (Popen-like): poll(), terminate(), pid, and wait() -> the truth dict."""

    def __init__(
        self, meta: Dict[str, Any], actions: List[Action], binary: str, truth_path: Optional[str] = None
    ) -> None:
        self.meta, self.actions, self.truth_path = meta, actions, truth_path
        self.workdir = tempfile.mkdtemp(prefix="npu-sim-run.")
        self.plan_path = os.path.join(self.workdir, "plan.txt")
        self.out_path = os.path.join(self.workdir, "out.txt")
        with open(self.plan_path, "w") as f:
            f.writelines(plan_line(a) for a in actions)
        self.proc = subprocess.Popen(
            [binary, self.plan_path, self.out_path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.pid = self.proc.pid
        self.truth: Optional[Truth] = None

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def wait(self, timeout: Optional[float] = None) -> Truth:
        if self.truth is not None:
            return self.truth
        try:
            _, err = self.proc.communicate(timeout=timeout)
            if self.proc.returncode != 0:
                msg = err.decode(errors="replace").strip() or f"exit code {self.proc.returncode}"
                raise SimulatorError(f"simulator executor failed: {msg}")
            with open(self.out_path) as f:
                rows = parse_output(f.read(), len(self.actions))
        finally:
            if self.proc.poll() is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
        self.truth = build_truth(self.meta, self.actions, rows)
        if self.truth_path:
            write_truth(self.truth, self.truth_path)
        return self.truth


def write_truth(truth: Truth, path: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise SimulatorError(f"cannot write truth file {path}: {exc.strerror}") from exc


def start(
    scenario: str,
    seed: int,
    duration_s: float,
    rate: float,
    devices: int,
    truth_path: Optional[str] = None,
    binary: Optional[str] = None,
) -> ScenarioRun:
    actions = plan(scenario, seed, duration_s, rate, devices)
    path = binary or build.ensure_built()
    meta = {
        "scenario": scenario,
        "seed": seed,
        "params": {"duration_s": duration_s, "rate": rate, "devices": devices},
        "clock": "mono",
        "binary": path,
        "group": abi.GROUP,
        "events": list(abi.event_names()),
        "fields": {f.event: list(f.field_names) for f in abi.FUNCS},
    }
    return ScenarioRun(meta, actions, path, truth_path)


def expected_events(truth: Truth) -> List[Tuple[str, str]]:
    """What the kernel's text rendering shows for every truth action, in order: (event, "f=v f=v ...")."""
    types = {f.name: f for f in abi.FUNCS}
    out = []
    for rec in truth["actions"]:
        func = types[rec["func"]]
        text = " ".join(f"{p.name}={abi.render_value(p.type, rec['args'][p.name])}" for p in func.params)
        out.append((func.event, text))
        if func.hal:
            out.append((func.ret_event, f"ret={rec['ret']}"))
    return out
