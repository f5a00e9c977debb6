"""Scope, offline: the kernel filter expressions, which event gets which filter, the pipeline's part (device,
NPU interrupts, task names the kernel refused), the recording header's `scope` entry, and TraceOptions."""

from __future__ import annotations

import argparse
import os
import pickle
from typing import Any, Dict, List, Optional

import pytest

from goldens import DATA, by_name, load_formats, read
from npu_trace.device.profiles import PROFILES
from npu_trace.errors import InputError, UsageError
from npu_trace.events import Loss, NpuEvent, TraceEvent
from npu_trace.ftrace.columns import plans
from npu_trace.ftrace.filters import all_of, comm_expr, fits, int_in, int_ranges
from npu_trace.ftrace.format import EventFormat, parse_format
from npu_trace.pipeline.blocks import objects_block, records_of
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.scope import Applied, RawScope, Scope, ScopeFilter, irq_table
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sources.options import TraceOptions
from npu_trace.sources.scoping import kernel_dev_fields, plan_filters
from reference import scope as ref_scope

KERNEL = os.path.join(DATA, "kernel-6.18.44-x86_64")
FORMATS = by_name(load_formats(KERNEL)[1])
WAKEUP = parse_format(read(os.path.join(DATA, "scope", "sched_wakeup.format")), "sched")
SIM_DEV_FIELDS = kernel_dev_fields(PROFILES["sim"].mapping)


# ---- filter expressions --------------------------------------------------------------------------------------
def test_int_in_folds_runs_of_three_or_more_into_ranges() -> None:
    assert int_ranges([7, 3, 1, 2, 2]) == [(1, 3), (7, 7)]
    assert int_in("irq", [130]) == "irq == 130"
    assert int_in("irq", [131, 130]) == "irq == 130 || irq == 131"
    assert int_in("irq", [130, 131, 132, 140]) == "(irq >= 130 && irq <= 132) || irq == 140"


def test_comm_uses_the_task_name_even_where_the_event_has_a_comm_field() -> None:
    assert comm_expr(["npu_sim"]) == 'comm == "npu_sim"'
    assert comm_expr(["a", "b"], own_comm_field=True) == 'COMM == "a" || COMM == "b"'


@pytest.mark.parametrize("name", ["", "x" * 16, 'a"b', "a\\b", "tab\there"])
def test_comm_names_the_kernel_cannot_match_are_usage_errors(name: str) -> None:
    with pytest.raises(UsageError):
        comm_expr([name])


def test_all_of_parenthesizes_disjunctions() -> None:
    assert all_of(['comm == "a"', "dev == 0 || dev == 1"]) == 'comm == "a" && (dev == 0 || dev == 1)'
    assert all_of(["dev == 1"]) == "dev == 1"
    assert fits(int_in("irq", range(0, 2000, 2))) is False  # 1000 values apart: more than a page


# ---- what goes into which event's filter ---------------------------------------------------------------------
def plan(scope: Scope, names: List[str], irq_events: tuple = ()) -> Dict[str, List[Any]]:
    formats = [FORMATS.get(n) or WAKEUP for n in names]
    return plan_filters(scope, formats, SIM_DEV_FIELDS, irq_events)


def test_device_goes_to_events_with_a_plain_device_field_that_are_not_paired_call_entries() -> None:
    names = ["ascend:ascend_irq_handler_entry", "ascend:ascend_devmm_alloc_done", "ascend:ascend_halMemAlloc",
             "ascend:ascend_halMemAlloc_ret", "ftrace:print"]  # fmt: skip
    got = plan(Scope(devices=(1,)), names)
    assert got == {
        "ascend:ascend_irq_handler_entry": [("device", "dev == 1")],
        "ascend:ascend_devmm_alloc_done": [("device", "dev == 1")],
    }  # the HAL entry's return has no device: the pair is matched after normalization, both halves at once


def test_comm_goes_to_every_event_and_combines_with_the_device() -> None:
    got = plan(Scope(comms=("npu_sim",), devices=(0, 1)), ["ascend:ascend_drv_timeout", "ascend:ascend_halMemFree_ret"])
    assert got["ascend:ascend_drv_timeout"] == [("comm", 'comm == "npu_sim"'), ("device", "dev == 0 || dev == 1")]
    assert got["ascend:ascend_halMemFree_ret"] == [("comm", 'comm == "npu_sim"')]
    assert plan(Scope(comms=("x",)), ["sched:sched_wakeup"]) == {"sched:sched_wakeup": [("comm", 'COMM == "x"')]}


def test_npu_interrupts_filter_the_profiles_interrupt_events_to_the_scoped_devices() -> None:
    irqs = irq_table({130: 0, 131: 0, 132: 0, 160: 1})
    events = ("irq:irq_handler_entry", "irq:irq_handler_exit")
    names = ["irq:irq_handler_entry", "irq:irq_handler_exit"]
    assert plan(Scope(irqs=irqs), names, events)["irq:irq_handler_exit"] == [
        ("irq", "(irq >= 130 && irq <= 132) || irq == 160")]  # fmt: skip
    assert plan(Scope(devices=(1,), irqs=irqs), names, events)["irq:irq_handler_entry"] == [("irq", "irq == 160")]
    assert plan(Scope(irqs=irqs), names) == {}  # -e replaced the profile's events: no interrupt scoping


def test_the_ascend_profile_filters_no_device_field_in_the_kernel() -> None:
    """The real driver's device is a struct member (inst.devid): matched after normalization."""
    fields = kernel_dev_fields(PROFILES["ascend"].mapping)
    assert not any(event.startswith(("trs_chan:", "trs_core:", "irq:")) for event in fields)


# ---- the pipeline's part -------------------------------------------------------------------------------------
def ev(kind: str, dev: Optional[int], op: str = "x", **args: Any) -> NpuEvent:
    return NpuEvent(1, kind, dev, op, 10, 0, dict(args))


class Both:
    """A scope's pipeline part over a block (the production stage) and one event at a time (the reference):
    each call checks that both keep the same events and count the same, and returns what they kept."""

    def __init__(self, scope: Scope, comm_of: Any = None) -> None:
        self.flt, self.ref = ScopeFilter(scope, comm_of), ScopeFilter(scope, comm_of)

    @property
    def dropped(self) -> Any:
        return self.flt.dropped

    def events(self, events: List[NpuEvent]) -> List[NpuEvent]:
        want = ref_scope.events(self.ref, events)
        nb = BlockNormalizer(Normalizer({})).normalize(objects_block(events))
        kept = self.flt.event_rows(nb)
        nb = nb if kept is None else nb.select(kept)
        got = [nb.event(i) for i in range(len(nb))]
        assert got == want and self.flt.dropped == self.ref.dropped
        return got

    def raw(self, items: List[Any]) -> List[Any]:
        want = list(ref_scope.raw(self.ref, items))
        block = records_of(items, plans({x.fmt.id: x.fmt for x in items if isinstance(x, TraceEvent)}.values()))
        kept = self.flt.raw_rows(block)
        got = (block if kept is None else block.select(kept)).items()
        assert got == want and self.flt.dropped == self.ref.dropped
        return got


def test_device_scope_keeps_that_device_and_the_traces_own_records() -> None:
    flt = Both(Scope(devices=(1,)))
    events = [ev("call", 1), ev("call", 0), ev("timeout", None), ev("lost", None), ev("marker", None), ev("log", None)]
    assert [(e.kind, e.dev) for e in flt.events(events)] == [("call", 1), ("lost", None), ("marker", None)]
    assert flt.dropped == {"device": 3}


def test_npu_interrupts_get_their_device_and_the_hosts_others_are_left_out() -> None:
    flt = Both(Scope(irqs=irq_table({130: 0, 160: 1, 170: None})))
    events = [ev("irq", None, irq=160), ev("irq", None, irq=36), ev("irq", None, irq=170), ev("call", 0),
              ev("irq", None, irq="160"), ev("irq", 2, irq=130), ev("irq", None)]  # fmt: skip
    assert [(e.dev, e.args.get("irq")) for e in flt.events(events)] == [(1, 160), (None, 170), (0, None), (2, 130),
                                                                       (None, None)]  # fmt: skip
    assert flt.dropped == {"irq": 2}  # 36, and a number that is text (a field of another type)
    assert Both(Scope(irqs=())).events([ev("irq", None, irq=5)]) == []  # no NPU interrupt: none kept


def trace_event(fmt: EventFormat, pid: int, ts: int = 1, **fields: Any) -> TraceEvent:
    """A record of `fmt` with these fields (the others, probe addresses included, 0)."""
    return TraceEvent(ts, 0, pid, fmt, tuple(fields.get(name, 0) for name in fmt.field_names))


def test_task_names_the_kernel_refused_are_matched_on_the_raw_events() -> None:
    applied = Applied(comm_events=("sched:sched_wakeup",))
    flt = Both(Scope(comms=("npu_sim",), applied=applied), comm_of={7: "npu_sim", 8: "bash"}.get)
    other = FORMATS["ascend:ascend_drv_timeout"]
    items = [trace_event(WAKEUP, 7, comm="bash"), trace_event(WAKEUP, 8, comm="npu_sim"), trace_event(other, 8),
             Loss("tracefs", 0, "overrun", 3)]  # fmt: skip
    kept = flt.raw(items)
    assert [getattr(x, "pid", None) for x in kept] == [7, 8, None]  # the kernel filtered the other event itself
    assert flt.dropped == {"comm": 1}


def test_raw_scope_keeps_a_call_return_with_its_entrys_device() -> None:
    """stream prints raw records: the return of a device-0 call goes with its entry, the other device's pair
    and the unrelated event are left out."""
    alloc, ret = FORMATS["ascend:ascend_halMemAlloc"], FORMATS["ascend:ascend_halMemAlloc_ret"]
    items = [trace_event(alloc, 5, 1, dev=0, size=4096), trace_event(alloc, 6, 2, dev=1, size=4096),
             trace_event(ret, 6, 3), trace_event(ret, 5, 4), Loss("tracefs", 1, "overrun", 2, 5)]  # fmt: skip
    keep = RawScope(ScopeFilter(Scope(devices=(0,))), PROFILES["sim"].mapping)
    block = records_of(items, plans([alloc, ret]))
    assert [x.ts_ns for x in keep.keep(block).items()] == [1, 4, 5]
    assert keep.filter.dropped == {"device": 2}
    reference = ref_scope.RawScope(ScopeFilter(Scope(devices=(0,))), PROFILES["sim"].mapping)
    assert keep.keep(records_of(items, plans([alloc, ret]))).items() == reference.keep(items)
    assert reference.filter.dropped == {"device": 2}


# ---- the header's entry --------------------------------------------------------------------------------------
def test_scope_header_round_trips_and_says_where_each_part_went() -> None:
    applied = Applied((("ascend:ascend_drv_timeout", 'comm == "x" && dev == 1', ("comm", "device")),),
                      (41, 42), ("sched:sched_wakeup",), ("a note",))  # fmt: skip
    scope = Scope((41,), ("x",), (1,), irq_table({130: 0}), applied)
    entry = scope.header()
    assert entry == {
        "pid": [41], "comm": ["x"], "device": [1], "irqs": {"130": 0}, "notes": ["a note"],
        "kernel": {"filters": {"ascend:ascend_drv_timeout": {"filter": 'comm == "x" && dev == 1',
                                                             "scope": ["comm", "device"]}},
                   "event_pid": [41, 42], "event_fork": True},
        "pipeline": {"comm": ["sched:sched_wakeup"], "device": True, "irq": True},
    }  # fmt: skip
    assert Scope.from_header(entry) == scope
    assert Scope.from_header(None) == Scope() and Scope().empty
    where = scope.where()
    assert "pid 41 (kernel: set_event_pid, 2 tasks" in where and "comm x (kernel: 1 event filters; 1 in" in where


@pytest.mark.parametrize(
    "entry",
    [[], {"pid": "1"}, {"pid": [True]}, {"irqs": {"x": 1}}, {"irqs": []}, {"kernel": {"filters": {"e": 3}}},
     {"pipeline": {"comm": [1]}}],
)  # fmt: skip
def test_a_malformed_scope_entry_is_an_input_error(entry: Any) -> None:
    with pytest.raises(InputError):
        Scope.from_header(entry)


# ---- TraceOptions --------------------------------------------------------------------------------------------
def args(**kw: Any) -> argparse.Namespace:
    base = {"events": [], "profile": "sim", "duration": None, "channels": None, "npu_smi": "npu-smi",
            "health_interval": 2.0, "bpf": False, "bpf_binary": None, "buffer_kb": 8192, "pid": None,
            "comm": None, "device": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_options_are_one_frozen_picklable_value() -> None:
    opts = TraceOptions.from_args(args(pid=[os.getpid(), os.getpid()], comm=["npu_sim"], device=[1, 0, 1],
                                       channels="kmsg,uevent", duration=3.0))  # fmt: skip
    assert (opts.pids, opts.comms, opts.devices) == ((os.getpid(),), ("npu_sim",), (1, 0))
    assert opts.channels == ("kmsg", "uevent")
    assert pickle.loads(pickle.dumps(opts)) == opts
    with pytest.raises(AttributeError):
        opts.duration = 1.0  # type: ignore[misc]
    assert opts.make_session().scope == Scope((os.getpid(),), ("npu_sim",), (1, 0))


def test_a_threads_id_stands_for_its_process() -> None:
    import threading

    tids: List[int] = []
    started, done = threading.Event(), threading.Event()

    def thread() -> None:
        tids.append(threading.get_native_id())
        started.set()
        done.wait(10)

    t = threading.Thread(target=thread)
    t.start()
    try:
        started.wait(10)
        assert tids[0] != os.getpid()
        assert TraceOptions.from_args(args(pid=[tids[0]])).pids == (os.getpid(),)
    finally:
        done.set()
        t.join()


@pytest.mark.parametrize(
    "kw, message",
    [({"duration": 0.0}, "--duration must be positive"), ({"buffer_kb": 0}, "--buffer-kb must be positive"),
     ({"health_interval": -1.0}, "--health-interval must be positive"), ({"profile": "nope"}, "unknown profile"),
     ({"channels": "kmsg,bogus"}, "unknown channel"), ({"bpf_binary": "/x"}, "--hal needs --bpf"),
     ({"pid": [0]}, "a process id is positive"), ({"pid": [2**22 + 12345]}, "no such process"),
     ({"device": [-1]}, "not negative"), ({"device": list(range(9))}, "at most 8"),
     ({"comm": ["a" * 16]}, "15 characters")],
)  # fmt: skip
def test_bad_options_are_one_usage_error(kw: Dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        TraceOptions.from_args(args(**kw))


def test_the_ascend_profile_scopes_interrupts_to_the_npus_unless_events_replace_its_own() -> None:
    from npu_trace.device.irqs import NpuIrq

    found = {130: NpuIrq(130, "cq_update_irq", 0)}
    ascend = TraceOptions(profile_name="ascend", devices=(0,))
    assert ascend.scope(found) == Scope(devices=(0,), irqs=((130, 0),))
    assert ascend.make_session(irqs=found).irq_events == ("irq:irq_handler_entry", "irq:irq_handler_exit")
    replaced = TraceOptions(profile_name="ascend", events=("irq:*",))
    assert replaced.scope(found).irqs is None and replaced.irq_events() == ()
    assert TraceOptions().scope().irqs is None  # the sim profile's interrupts are its own uprobe events


# ---- the session writing its scope (a fake instance: what the kernel takes and refuses) ----------------------
class FakeInstance:
    """Takes every filter except a task-name filter on sched:sched_wakeup (as an old kernel without COMM)."""

    def __init__(self, event_fork: bool = True) -> None:
        self.filters: Dict[str, str] = {}
        self.pids: List[int] = []
        self.options: Dict[str, bool] = {}
        self.event_fork = event_fork

    def set_event_filter(self, event: str, expr: str) -> str:
        if event == "sched:sched_wakeup" and "COMM" in expr:
            self.filters.pop(event, None)
            return "parse_error: Field not found"
        self.filters[event] = expr
        return ""

    def has_file(self, name: str) -> bool:
        return name == "set_event_pid"

    def has_option(self, name: str) -> bool:
        return self.event_fork

    def set_option(self, name: str, on: bool) -> None:
        assert not self.pids, "event-fork must be on before the first task is written"
        self.options[name] = on

    def add_event_pids(self, pids: List[int]) -> None:
        self.pids += pids


def scoped_session(scope: Scope, listings: List[List[int]]) -> Any:
    from npu_trace.sources.tracefs_source import TracefsSession

    calls = iter(listings)
    session = TracefsSession(["ascend:*"], scope=scope, dev_fields=SIM_DEV_FIELDS, list_tasks=lambda pids: next(calls))
    session.formats = [FORMATS["ascend:ascend_drv_timeout"], FORMATS["ascend:ascend_halMemAlloc"], WAKEUP]
    session.selected = [f.full_name for f in session.formats]
    return session


def test_the_tasks_started_are_traced_unfiltered_by_the_task_name() -> None:
    """A process a task of another name starts (the shell starting npu-sim) is still known to be a process."""
    import os

    from npu_trace.ftrace.format import parse_format

    with open(os.path.join(os.path.dirname(__file__), "data", "task", "task_newtask.format")) as f:
        newtask = parse_format(f.read(), "task")
    session = scoped_session(Scope(comms=("npu_sim",)), [])
    session.formats.append(newtask)
    session.selected.append(newtask.full_name)
    inst = FakeInstance()
    session._apply_scope(inst)
    assert "task:task_newtask" not in inst.filters and "ascend:ascend_halMemAlloc" in inst.filters


def test_the_host_context_is_traced_host_wide_and_an_irq_event_the_profile_scopes_is_scoped_after_reading() -> None:
    """--host-context: its events take none of the scope's per-event filters (the NPU's interrupts included: the
    pipeline keeps the analysis to them), the ones missing on the host are said, the start line names them."""
    from npu_trace.commands.session_text import announce_lines
    from npu_trace.ftrace.context import HOST_CONTEXT
    from npu_trace.sources.tracefs_source import TracefsSession

    entry = "irq:irq_handler_entry"
    scope = Scope(comms=("npu_sim",), irqs=irq_table({130: 0}))
    session = TracefsSession(["ascend:*"], optional=[entry], scope=scope, irq_events=(entry,),
                             context=HOST_CONTEXT)  # fmt: skip
    session.selected = session._select(["ascend:ascend_halMemAlloc", entry, "sched:sched_switch"])
    session._chosen_first = list(session.selected)
    session.selected += session._context(["ascend:ascend_halMemAlloc", entry, "sched:sched_switch"])
    session.formats = [FORMATS["ascend:ascend_halMemAlloc"], FORMATS[entry]]
    inst = FakeInstance()
    session._apply_scope(inst)
    assert session.selected == ["ascend:ascend_halMemAlloc", entry, "sched:sched_switch"]
    assert list(inst.filters) == ["ascend:ascend_halMemAlloc"]  # the interrupts unfiltered: host-wide
    assert session.notes[0] == ("host context: not on this host: sched:sched_waking, irq:irq_handler_exit, "
                                "irq:softirq_entry, irq:softirq_exit")  # fmt: skip
    assert session.chosen() == ["ascend:ascend_halMemAlloc", entry]
    assert session.context_traced() == ["sched:sched_switch"]
    assert "and the host's context (sched_switch)" in announce_lines(session)[-1]
    assert Both(session.scope).events([ev("irq", None, irq=3), ev("irq", None, irq=130)])[0].dev == 0


def test_a_refused_task_name_filter_is_left_to_the_pipeline_and_said() -> None:
    session = scoped_session(Scope(comms=("npu_sim",), devices=(1,)), [])
    inst = FakeInstance()
    session._apply_scope(inst)
    assert inst.filters == {"ascend:ascend_drv_timeout": 'comm == "npu_sim" && dev == 1',
                            "ascend:ascend_halMemAlloc": 'comm == "npu_sim"'}  # fmt: skip
    applied = session.scope.applied
    assert applied.comm_events == ("sched:sched_wakeup",)
    assert applied.filters[0] == ("ascend:ascend_drv_timeout", 'comm == "npu_sim" && dev == 1', ("comm", "device"))
    assert session.notes == ["the kernel refused the filter 'COMM == \"npu_sim\"' on sched:sched_wakeup "
                             "(parse_error: Field not found): its comm is matched in the pipeline"]  # fmt: skip
    assert ScopeFilter(session.scope).comm_events == {"sched:sched_wakeup"}


def test_a_process_threads_are_written_until_a_listing_finds_no_new_one() -> None:
    """Threads started while the list is written: listed again until nothing is new (those created later are
    created by a written thread: the kernel's event-fork follows them)."""
    session = scoped_session(Scope(pids=(40,)), [[40, 41], [40, 41, 42], [40, 41, 42]])
    inst = FakeInstance()
    session._apply_scope(inst)
    assert inst.options == {"event-fork": True} and inst.pids == [40, 41, 42]
    assert session.scope.applied.tasks == (40, 41, 42)
    assert "pid 40 (kernel: set_event_pid, 3 tasks" in session.scope.where()


def test_a_process_gone_before_its_tasks_are_written_is_a_usage_error() -> None:
    session = scoped_session(Scope(pids=(40,)), [[]])
    with pytest.raises(UsageError, match="no such process"):
        session._apply_scope(FakeInstance())


def test_without_event_fork_the_threads_started_later_are_not_followed_and_it_is_said() -> None:
    session = scoped_session(Scope(pids=(40,)), [[40], [40]])
    session._apply_scope(FakeInstance(event_fork=False))
    assert session.notes == ["this kernel has no event-fork option: threads a process starts later are not traced"]


@pytest.mark.parametrize("command", [["stream"], ["record", "-o", "x.npt"], ["live"], ["bpf"]])
def test_the_scope_flags_of_every_command_and_bpfs_old_dev_spelling(command: List[str]) -> None:
    from npu_trace.cli import build_parser

    ns = build_parser().parse_args([*command, "--pid", "1", "--pid", "2", "--comm", "a", "--dev", "0", "--device", "3"])
    assert (ns.pid, ns.comm, ns.device) == ([1, 2], ["a"], [0, 3])


@pytest.mark.parametrize("command", [["stream"], ["record", "-o", "x.npt"], ["live"]])
def test_host_context_is_an_option_of_the_tracing_commands(command: List[str]) -> None:
    from npu_trace.cli import build_parser
    from npu_trace.ftrace.context import HOST_CONTEXT
    from npu_trace.sources.options import TraceOptions

    options = TraceOptions._of(build_parser().parse_args([*command, "--host-context"]))
    assert options.host_context and options.make_session().context == HOST_CONTEXT
    assert TraceOptions._of(build_parser().parse_args(command)).make_session().context == ()


def test_npu_interrupts_too_many_for_a_filter_are_left_to_the_pipeline_and_said() -> None:
    from npu_trace.sources.tracefs_source import TracefsSession

    irqs = irq_table({irq: 0 for irq in range(0, 2000, 2)})  # no runs: a thousand predicates, over a page
    entry = "irq:irq_handler_entry"
    session = TracefsSession([entry], scope=Scope(irqs=irqs), irq_events=(entry,))
    session.formats, session.selected = [FORMATS[entry]], [entry]
    inst = FakeInstance()
    session._apply_scope(inst)
    assert inst.filters == {} and session.scope.applied.filters == ()
    assert session.notes == ["1000 NPU interrupts make an irq filter longer than the kernel takes: the host's "
                             "other interrupts are left out after reading"]  # fmt: skip
    assert Both(session.scope).events([ev("irq", None, irq=3), ev("irq", None, irq=4)])[0].dev == 0
