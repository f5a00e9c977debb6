"""Normalization: raw simulator/driver/marker events and loss records -> NpuEvents, by the profile's data.

Every case runs the production normalizer (a block at a time: the records re-encoded as columns, and again as
objects, as BPF hands them over) and the reference (one event at a time, tests/reference/normalize.py): both
must give the same events and counters."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import pytest

from npu_trace.device.profiles import PROFILES
from npu_trace.errors import UsageError
from npu_trace.events import KINDS, Loss, NpuEvent, TraceEvent
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.format import parse_format
from npu_trace.pipeline.blocks import records_of
from npu_trace.pipeline.normalize import Normalizer as Production
from npu_trace.pipeline.normalize import compile_mapping, field_value
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sim.synth import PID, formats, marker
from reference.normalize import Normalizer as Reference

F = formats()
SIM = PROFILES["sim"].mapping


class Normalizer:
    """The production normalizer and the reference over the same items: feed() checks they agree."""

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        self.mapping = mapping
        self.reference = Reference(mapping)
        self.blocks = [BlockNormalizer(Production(mapping)) for _ in range(2)]  # records as columns; as objects

    @property
    def stats(self) -> Dict[str, int]:
        return self.reference.stats

    def feed(self, items: Sequence[Any]) -> List[NpuEvent]:
        want = self.reference.feed(items)
        columns = plans({x.fmt.id: x.fmt for x in items if isinstance(x, TraceEvent)}.values())
        for as_objects, normalizer in enumerate(self.blocks):
            nb = normalizer.normalize(records_of(items, columns, objects_too=range(len(items)) if as_objects else ()))
            assert [nb.event(i) for i in range(len(nb))] == want
            assert normalizer.normalizer.stats == self.reference.stats
        return want


def ev(name: str, ts: int, *values: object, pid: int = PID) -> TraceEvent:
    return TraceEvent(ts, 1, pid, F[name], (0x4000, *values))


def ret(name: str, ts: int, value: int, pid: int = PID) -> TraceEvent:
    return TraceEvent(ts, 1, pid, F[name], (0x4000, 0x4100, value))


def test_every_sim_event_is_mapped_to_a_known_kind() -> None:
    for name in F:
        assert f"ascend:{name}" in SIM
    for rules in compile_mapping(SIM).values():
        assert all(r.kind in KINDS for r in rules)


def test_call_return_takes_device_args_and_latency_from_its_entry() -> None:
    out = Normalizer(SIM).feed([ev("ascend_halMemAlloc", 1000, 3, 4096, 0), ret("ascend_halMemAlloc_ret", 6000, 0)])
    assert out[0] == NpuEvent(1000, "call", 3, "halMemAlloc", PID, 1, {"size": 4096, "flag": 0})
    assert out[1].dev == 3 and out[1].kind == "call"
    assert out[1].args == {"size": 4096, "flag": 0, "ret": 0, "latency_ns": 5000, "entry_ts_ns": 1000}


def test_pairing_is_per_pid_and_nested() -> None:
    items = [
        ev("ascend_halMemFree", 10, 0, 0xA, pid=1),
        ev("ascend_halMemFree", 20, 1, 0xB, pid=2),
        ev("ascend_halMemFree", 30, 2, 0xC, pid=1),
        ret("ascend_halMemFree_ret", 40, 0, pid=1),
        ret("ascend_halMemFree_ret", 50, 0, pid=2),
        ret("ascend_halMemFree_ret", 60, 0, pid=1),
    ]
    out = Normalizer(SIM).feed(items)[3:]
    assert [(e.kind, e.dev, e.args["va"], e.args["latency_ns"]) for e in out] == [
        ("free", 2, 0xC, 10),
        ("free", 1, 0xB, 30),
        ("free", 0, 0xA, 50),
    ]


def test_return_without_entry_has_no_device() -> None:
    norm = Normalizer(SIM)
    (out,) = norm.feed([ret("ascend_halMemFree_ret", 5, 0)])
    assert out.dev is None and "latency_ns" not in out.args
    assert norm.stats["unpaired_returns"] == 1


def test_kind_if_turns_results_into_failures_and_timeouts() -> None:
    out = Normalizer(SIM).feed(
        [
            ev("ascend_devmm_alloc_done", 1, 0, 1 << 30, 0, 6, 5 << 30, 1 << 29),
            ev("ascend_devmm_alloc_done", 2, 0, 4096, 0x1000, 0, 5 << 30, 1 << 29),
            ev("ascend_halCqReportRecv", 3, 0, 0, 5, 20),
            ret("ascend_halCqReportRecv_ret", 20_000_003, -110),
            ev("ascend_halSqTaskSend", 30_000_000, 1, 0, 2, 7),
            ret("ascend_halSqTaskSend_ret", 30_000_010, 0),
        ]
    )
    assert [e.kind for e in out] == ["alloc_fail", "alloc", "call", "timeout", "call", "submit"]
    assert out[3].op == "halCqReportRecv" and out[3].args["latency_ns"] == 20_000_000
    assert out[5].dev == 1 and out[5].args["stream"] == 2 and out[5].args["task"] == 7


def test_timeouts_resets_ecc_irqs() -> None:
    out = Normalizer(SIM).feed(
        [
            ev("ascend_drv_timeout", 1, 2, 2, 0, 3000),
            ev("ascend_hb_report_heart_beat_lost_event", 2, 2, 4),
            ev("ascend_devdrv_reset_step", 3, 2, 4, "reset_begin", 0),
            ev("ascend_dms_event_report", 4, 2, 0x80E01800, 7, 0, 81),
            ev("ascend_irq_handler_entry", 5, 2, 160, "cq_update_irq"),
        ]
    )
    assert [(e.kind, e.dev, e.op) for e in out] == [
        ("timeout", 2, "mbox"),
        ("timeout", 2, "heartbeat"),
        ("reset_step", 2, "reset"),
        ("ecc", 2, "dms_event"),
        ("irq", 2, "irq"),
    ]
    assert out[0].args == {"code": 2, "chan": 0, "wait_us": 3000}
    assert out[2].args == {"step": "reset_begin", "index": 4, "ret": 0}
    assert out[4].args == {"irq": 160, "name": "cq_update_irq", "edge": "entry"}


def test_loss_marker_and_unmapped_events() -> None:
    other = parse_format(
        "name: sched_foo\nID: 9\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n",
        "sched",
    )
    out = Normalizer(SIM).feed(
        [Loss("tracefs", 3, "overrun", 12, 77), marker(80, "phase two"), TraceEvent(90, 0, 5, other, (4,))]
    )
    assert out[0] == NpuEvent(77, "lost", None, "overrun", -1, 3, {"source": "tracefs", "lost": 12})
    assert out[1].kind == "marker" and out[1].args == {"text": "phase two"} and out[1].dev is None
    assert out[2] == NpuEvent(90, "log", None, "sched:sched_foo", 5, 0, {"x": 4})


def test_ascend_profile_maps_trs_tracepoints_by_their_string() -> None:
    mapping = PROFILES["ascend"].mapping
    fields = {"str": "Task Send", "inst": {"devid": 3, "tsid": 0}, "sq_trace": {"stream_id": 5, "task_id": 100}}
    assert field_value(fields, "inst.devid") == 3 and field_value(fields, "sq_trace.nope") is None
    (rule,) = compile_mapping(mapping)["trs_chan:sqe"]
    assert rule.kind == "submit" and dict(rule.match) == {"str": "Task Send"}


def test_bad_rules_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        compile_mapping({"x:y": {"kind": "nope"}})
    with pytest.raises(UsageError):
        compile_mapping({"x:y": {"kind": "call", "frobnicate": 1}})
    with pytest.raises(UsageError):
        compile_mapping({"x:y": {"kind": "call", "kind_if": [["ret", "~", 0, "call"]]}})


def test_synth_formats_match_the_real_kernel_formats() -> None:
    import pathlib

    base = pathlib.Path(__file__).parent / "data/kernel-6.18.44-x86_64/events/ascend"
    for path in sorted(base.glob("*/format")):
        real = parse_format(path.read_text(), "ascend")
        ours = F[real.name]
        assert [(f.name, f.offset, f.size, f.signed, f.kind) for f in ours.fields] == [
            (f.name, f.offset, f.size, f.signed, f.kind) for f in real.fields
        ]


@pytest.mark.parametrize("scenario", ["mixed", "ecc-reset", "fragmentation"])
def test_positional_plans_give_what_the_general_rules_give(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The precompiled plans (kind_if included, returns without a device field) are an optimisation only."""
    from npu_trace.pipeline import normalize as model
    from npu_trace.sim.scenarios import plan
    from npu_trace.sim.synth import synth_events
    from reference import normalize as reference

    items = synth_events(plan(scenario, seed=5, duration_s=1.0, rate=800, devices=2))
    items += [ret("ascend_halMemFree_ret", 10**12, -5), ret("ascend_halCqReportRecv_ret", 10**12 + 1, -110)]
    planned = Normalizer(SIM)
    fast = planned.feed(items)
    assert sum(1 for cached in planned.reference._formats.values() if cached[4] is not None) >= 12
    monkeypatch.setattr(model, "positional_plan", lambda *a: None)
    monkeypatch.setattr(reference, "positional_plan", lambda *a: None)
    general = Normalizer(SIM).feed(items)
    assert fast == general and {e.kind for e in fast} >= {"call", "free", "submit", "timeout"}
