"""The simulated NPU on a real kernel: load -> trace a scenario in a private instance -> exactly the truth -> unload."""

from __future__ import annotations

import collections
import os
import re
from typing import Dict, List, Tuple

import pytest

from npu_trace import sim
from npu_trace.device import hal
from npu_trace.errors import SimulatorError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import probes

pytestmark = pytest.mark.privileged

_LINE = re.compile(
    r"^\s*(.+?)-(\d+)\s+\[\d+\]\s+\S+\s+(\d+)\.(\d+): "  # comm-pid [cpu] flags sec.usec:
    r"(ascend_\w+): \(0x[0-9a-f]+(?: <- 0x[0-9a-f]+)?\) ?(.*)$"  # event: (ip) fields
)
_FIELD = re.compile(r"^\s*field:.*?\s(\w+)(?:\[\])?;", re.M)


def _tracefs() -> Tracefs:
    if os.geteuid() != 0:
        pytest.skip("needs root (tracefs + uprobes)")
    fs = Tracefs.find()
    if not os.path.exists(fs.path("uprobe_events")):
        pytest.skip("kernel has no uprobe events")
    return fs


def _parse(text: str, pid: int) -> List[Tuple[str, str, int]]:
    """(event, fields, ts_us) of every ascend line written by `pid`, in order."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and int(m.group(2)) == pid:
            out.append((m.group(5), m.group(6).strip(), int(m.group(3)) * 1_000_000 + int(m.group(4))))
    return out


def _check_formats(fs: Tracefs) -> None:
    available = set(fs.available_events())
    for func in hal.FUNCS:
        assert f"ascend:{func.event}" in available
        fields = _FIELD.findall(fs.event_format("ascend", func.event))
        assert [f for f in fields if not f.startswith(("common_", "__probe"))] == list(func.field_names)
        if func.hal:
            assert f"ascend:{func.ret_event}" in available
            assert "ret" in _FIELD.findall(fs.event_format("ascend", func.ret_event))


def _check_trace(seen: List[Tuple[str, str, int]], truth: Dict[str, object]) -> None:
    expected = sim.expected_events(truth)
    assert collections.Counter((e, f) for e, f, _ in seen) == collections.Counter(expected)
    assert [(e, f) for e, f, _ in seen] == expected  # one thread, sequential calls: same order too
    entries = [s for s in seen if not s[0].endswith("_ret")]
    for (_, _, ts_us), rec in zip(entries, truth["actions"]):  # type: ignore[call-overload]
        assert rec["start_ns"] // 1000 - 1 <= ts_us <= rec["end_ns"] // 1000 + 1


def test_load_trace_exact_truth_unload(tmp_path: object) -> None:
    fs = _tracefs()
    name = f"npu-trace-{os.getpid()}-simtest"
    inst = None
    try:
        loaded = sim.load(fs)
        assert sim.is_loaded(fs) and not sim.load(fs).changed
        assert sorted(loaded.events) == sorted(hal.event_names())
        _check_formats(fs)
        inst = fs.create_instance(name)
        inst.set_clock("mono")
        inst.set_buffer_size_kb(8192)
        for ev in hal.event_names():
            inst.enable_event(ev)
        inst.tracing_on(True)
        run = sim.start_scenario("mixed", 11, 1.0, 300, 2, truth_path=os.path.join(str(tmp_path), "t.json"),
                                 host=sim.SINGLE)  # one thread: the kernel text in plan order
        truth = run.wait(timeout=60)
        inst.tracing_on(False)
        assert os.path.exists(os.path.join(str(tmp_path), "t.json"))
        assert all(v.get("overrun", 0) == 0 for v in (inst.cpu_stats(c) for c in inst.cpus()))
        _check_trace(_parse(inst.trace_text(), run.pid), truth)
        with pytest.raises(SimulatorError, match=name):
            sim.unload(fs)  # still enabled in our instance: a clear error naming it
    finally:
        if inst is not None:
            fs.remove_instance(name)
        sim.unload(fs)
    assert not [ln for ln in fs.uprobe_events() if "ascend" in ln]
    assert name not in fs.instance_names()
    assert not any(ev.startswith("ascend:") for ev in fs.available_events())


def test_load_replaces_stale_events() -> None:
    fs = _tracefs()
    try:
        loaded = sim.load(fs)
        sim.unload(fs)
        fs.add_uprobe_event(f"p:ascend/ascend_stale {loaded.binary}:0x{0:x} dev=%di:u32")
        assert not sim.is_loaded(fs)
        assert sim.load(fs).changed and sim.is_loaded(fs)
        assert not [ln for ln in probes.registered(fs) if "ascend_stale" in ln]
    finally:
        sim.unload(fs)
    assert probes.registered(fs) == []
