"""Scope: what a session traces (which processes, task names, devices, interrupts) and the pipeline's part of it.

`Scope` is a value: what was asked (`pids`, `comms`, `devices`), the NPU interrupts in scope with their device
(`irqs`; None when the profile does not scope interrupts), and where each part was applied (`Applied`: the
kernel's filters and task list, what the pipeline matches instead). A recording keeps it in its header (`header()`,
`Scope.from_header`) so a replay and `check` apply the same pipeline part and say what was traced.

`ScopeFilter(scope)` is that pipeline part, a pure stage over blocks (`scoped` runs it around normalization):
- `raw_rows(block)`: the task-name match for the trace events whose kernel filter was refused
  (`Applied.comm_events`), by the task's name from `comm_of(pid)`, before normalization;
- `event_rows(nb)`, after normalization: an interrupt (kind "irq" with an "irq" arg) gets its device from
  `irqs`, and one that is not the NPU's is left out; with `devices`, an event of another device, or of none, is
  left out, except the trace's own records (kind "lost", "marker", "task"). An event the kernel already
  filtered passes again unchanged, so the stage needs to know only what the kernel could not do for the task
  name.
What it leaves out is counted in `dropped`, by reason. (tests/reference/scope.py applies the same rules to one
event at a time: the tests' reference.)

The other channels' events (kernel log, uevents, npu-smi and PCIe readings) tell of a device, not of a task:
processes and task names do not scope them; a device scope does, as any event's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from npu_trace.errors import InputError
from npu_trace.events import TraceEvent
from npu_trace.ftrace.filters import int_ranges
from npu_trace.pipeline.blocks import OBJECT, Block
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.order import member_of
from npu_trace.pipeline.vnormalize import KIND_CODE, MISSING, BlockNormalizer, NormBlock, kind_in

# the trace's own records (and the tasks started, which say which process a thread is): in every device's scope
KEEP_KINDS: FrozenSet[str] = frozenset(("lost", "marker", "task"))
IrqTable = Tuple[Tuple[int, Optional[int]], ...]  # (irq, device or None), sorted by irq


@dataclass(frozen=True)
class Applied:
    """Where the scope was applied. kernel: the per-event filters the kernel took ((event, expression, the
    parts of the scope it carries: "comm", "device", "irq"), sorted) and the task ids written to set_event_pid
    at the start (followed to the tasks they create: event-fork); pipeline: the events whose task-name filter the
    kernel refused (matched by `ScopeFilter.raw`); `notes`: what was said once about it."""

    filters: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = ()
    tasks: Tuple[int, ...] = ()
    comm_events: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()

    def filtered(self, part: str) -> int:
        """How many events the kernel filters for this part of the scope."""
        return sum(1 for _, _, parts in self.filters if part in parts)


@dataclass(frozen=True)
class Scope:
    pids: Tuple[int, ...] = ()  # processes (thread-group ids)
    comms: Tuple[str, ...] = ()  # task names
    devices: Tuple[int, ...] = ()  # NPU device ids
    irqs: Optional[IrqTable] = None  # the NPU's interrupts, when the profile scopes interrupts to them
    applied: Applied = field(default_factory=Applied)

    @property
    def empty(self) -> bool:
        """Nothing is scoped: every event of the profile is traced."""
        return not (self.pids or self.comms or self.devices) and self.irqs is None

    def irq_devices(self) -> Dict[int, Optional[int]]:
        return dict(self.irqs or ())

    def describe(self) -> str:
        """ "pid 1234, device 1" for messages; "" when nothing is scoped."""
        parts = [f"pid {', '.join(map(str, self.pids))}" if self.pids else "",
                 f"comm {', '.join(self.comms)}" if self.comms else "",
                 f"device {', '.join(map(str, self.devices))}" if self.devices else ""]  # fmt: skip
        if self.irqs is not None:
            parts.append(f"{len(self.irqs)} NPU interrupts" if self.irqs else "no NPU interrupt")
        return ", ".join(p for p in parts if p)

    def where(self) -> str:
        """Each part of the scope and where it is applied, for people: "pid 42 (kernel: set_event_pid, 6 tasks
        and those they start), device 1 (kernel: 8 event filters; the others after normalization)"."""
        a = self.applied
        parts = []
        if self.pids:
            parts.append(f"pid {_join(self.pids)} (kernel: set_event_pid, {len(a.tasks)} tasks and those they start)")
        if self.comms:
            late = f"; {len(a.comm_events)} in the pipeline" if a.comm_events else ""
            parts.append(f"comm {_join(self.comms)} (kernel: {a.filtered('comm')} event filters{late})")
        if self.devices:
            parts.append(f"device {_join(self.devices)} (kernel: {a.filtered('device')} event filters; the others "
                         "after normalization, events naming no device left out)")  # fmt: skip
        if self.irqs is not None:
            runs = _join(f"{lo}-{hi}" if hi > lo else lo for lo, hi in int_ranges(irq for irq, _ in self.irqs))
            kernel = f"kernel: {a.filtered('irq')} event filters"
            parts.append(f"NPU interrupts {runs} ({kernel})" if runs else "no NPU interrupt (none traced)")
        return ", ".join(parts) or "everything"

    def header(self) -> Dict[str, Any]:
        """The recording header's `scope` entry (docs/recording-format.md)."""
        a = self.applied
        out: Dict[str, Any] = {
            "pid": list(self.pids), "comm": list(self.comms), "device": list(self.devices),
            "kernel": {"filters": {ev: {"filter": expr, "scope": list(parts)} for ev, expr, parts in a.filters},
                       "event_pid": list(a.tasks), "event_fork": bool(a.tasks)},
            "pipeline": {"comm": list(a.comm_events), "device": bool(self.devices), "irq": self.irqs is not None},
            "notes": list(a.notes),
        }  # fmt: skip
        if self.irqs is not None:
            out["irqs"] = {str(irq): dev for irq, dev in self.irqs}
        return out

    @classmethod
    def from_header(cls, entry: Any) -> Scope:
        """A recording's `scope` entry (absent: nothing scoped); a malformed one is an InputError."""
        if entry is None:
            return cls()
        where = "recording header scope"
        if not isinstance(entry, dict):
            raise InputError(f"{where} is {type(entry).__name__}, not a map")
        kernel = _get(entry, "kernel", dict, where, {})
        pipeline = _get(entry, "pipeline", dict, where, {})
        applied = Applied(
            filters=_filters(_get(kernel, "filters", dict, where, {}), where),
            tasks=_ints(_get(kernel, "event_pid", list, where, []), where),
            comm_events=_strs(_get(pipeline, "comm", list, where, []), where),
            notes=_strs(_get(entry, "notes", list, where, []), where),
        )
        pids = _ints(_get(entry, "pid", list, where, []), where)
        comms = _strs(_get(entry, "comm", list, where, []), where)
        devices = _ints(_get(entry, "device", list, where, []), where)
        return cls(pids, comms, devices, _irq_table(entry.get("irqs"), where), applied)


def irq_table(irqs: Mapping[int, Optional[int]]) -> IrqTable:
    return tuple(sorted(irqs.items()))


class ScopeFilter:
    """The pipeline's part of a scope (see the module docstring), a block at a time."""

    def __init__(self, scope: Scope, comm_of: Optional[Callable[[int], str]] = None) -> None:
        self.comm_of = comm_of or (lambda pid: "")
        self.dropped: Counter[str] = Counter()
        self.set_scope(scope)

    def set_scope(self, scope: Scope) -> None:
        """Apply this scope from now on (a session's, once it started: what its kernel filters took)."""
        self.scope = scope
        self.devices = frozenset(scope.devices)
        self.irqs = scope.irq_devices() if scope.irqs is not None else None
        self.comms = frozenset(scope.comms)
        self.comm_events = frozenset(scope.applied.comm_events) if scope.comms else frozenset()

    @property
    def active(self) -> bool:
        """Whether the pipeline has anything to do (else every event passes as it is)."""
        return bool(self.devices or self.comm_events) or self.irqs is not None

    def raw_rows(self, block: Block) -> Optional[np.ndarray]:
        """The rows of a block (before normalization) not left out by their task's name, for the events whose
        kernel filter was refused; None when none is left out."""
        if not self.comm_events:
            return None
        out: np.ndarray = np.zeros(len(block), dtype=bool)
        names = {e: t.plan.fmt.full_name for e, t in block.tables.items() if t.plan is not None}
        for e in (e for e, name in names.items() if name in self.comm_events):
            out |= block.etype == e
        for r in np.flatnonzero(block.etype == OBJECT).tolist():
            item = block.objects[int(block.ref[r])]
            out[r] = item.__class__ is TraceEvent and item.fmt.full_name in self.comm_events
        out[out] = self._other_tasks(block.pid[out])
        if not out.any():
            return None
        self.dropped["comm"] += int(out.sum())
        return np.flatnonzero(~out)

    def _other_tasks(self, pids: np.ndarray) -> np.ndarray:
        """Which of these tasks' names are out of scope."""
        unique, inverse = np.unique(pids, return_inverse=True)
        other = np.array([self.comm_of(int(pid)) not in self.comms for pid in unique.tolist()], dtype=bool)
        return other[inverse]

    def event_rows(self, nb: NormBlock) -> Optional[np.ndarray]:
        """The rows of a normalized block in scope, the NPU's interrupts given their device (`NormBlock.place`);
        None when every row is (what is left out is counted by reason)."""
        keep: np.ndarray = np.ones(len(nb), dtype=bool)
        if self.irqs is not None:
            self._interrupts(nb, keep)
        if self.devices:
            in_scope = member_of(nb.dev, np.array(sorted(self.devices), dtype=np.int64))
            in_scope |= (nb.dev < 0) & kind_in(nb.kind, KEEP_CODES)
            self.dropped["device"] += int((keep & ~in_scope).sum())
            keep &= in_scope
        return None if keep.all() else np.flatnonzero(keep)

    def _interrupts(self, nb: NormBlock, keep: np.ndarray) -> None:
        """An interrupt (kind "irq" with an "irq" arg) that is not the NPU's is left out; one of a device is
        given it when it names none."""
        rows = np.flatnonzero(nb.kind == KIND_CODE["irq"])
        if not len(rows) or self.irqs is None:
            return
        irqs, left, placed, devs = self.irqs, [], [], []
        for r, irq in zip(rows.tolist(), nb.int_arg(rows, "irq")):
            if irq is MISSING:
                continue
            dev = irqs.get(irq, OUT) if isinstance(irq, int) else OUT
            if dev is OUT:
                left.append(r)
            elif dev is not None and nb.dev[r] < 0:
                placed.append(r)
                devs.append(dev)
        keep[left] = False
        self.dropped["irq"] += len(left)
        if placed:
            nb.place(np.array(placed, dtype=np.int64), np.array(devs, dtype=np.int64))

    def summary(self) -> Dict[str, Any]:
        return {"scope": self.scope.describe(), "dropped": dict(sorted(self.dropped.items()))}


OUT = object()  # an interrupt that is not the NPU's
KEEP_CODES = [KIND_CODE[k] for k in sorted(KEEP_KINDS)]


def scoped(scope_filter: ScopeFilter, block: Block, normalize: Callable[[Block], NormBlock]) -> NormBlock:
    """A block normalized (by `normalize`) within the scope: the rows left out by task name before, those out
    of the device and interrupt scope after."""
    rows = scope_filter.raw_rows(block)
    nb = normalize(block if rows is None else block.select(rows))
    kept = scope_filter.event_rows(nb)
    return nb if kept is None else nb.select(kept)


class RawScope:
    """The scope over the timeline's raw rows, for the consumers that show them as they are (`stream`): each
    block is normalized (call entries paired with their returns, as the analysis does) only to tell which
    rows are in scope; the rows kept are the raw ones."""

    def __init__(self, scope_filter: ScopeFilter, mapping: Mapping[str, Any]) -> None:
        self.filter = scope_filter
        self.normalizer = BlockNormalizer(Normalizer(mapping))

    def keep(self, block: Block) -> Block:
        """The block's rows in scope."""
        flt = self.filter
        raw = flt.raw_rows(block)
        if raw is not None:
            block = block.select(raw)
        if not (flt.devices or flt.irqs is not None):
            return block
        kept = flt.event_rows(self.normalizer.normalize(block))
        return block if kept is None else block.select(kept)


def _join(values: Iterable[Any]) -> str:
    return ", ".join(map(str, values))


def _get(entry: Mapping[str, Any], key: str, kind: type, where: str, default: Any) -> Any:
    value = entry.get(key, default)
    if not isinstance(value, kind):
        raise InputError(f"{where} {key} is {type(value).__name__}, not a {kind.__name__}")
    return value


def _ints(values: List[Any], where: str) -> Tuple[int, ...]:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"{where}: {values!r} is not a list of integers")
    return tuple(values)


def _strs(values: List[Any], where: str) -> Tuple[str, ...]:
    if not all(isinstance(v, str) for v in values):
        raise InputError(f"{where}: {values!r} is not a list of strings")
    return tuple(values)


def _filters(values: Mapping[Any, Any], where: str) -> Tuple[Tuple[str, str, Tuple[str, ...]], ...]:
    out = []
    for event, entry in sorted(values.items(), key=lambda kv: str(kv[0])):
        ok = isinstance(event, str) and isinstance(entry, dict) and isinstance(entry.get("filter"), str)
        if not ok or not isinstance(entry.get("scope", []), list):
            raise InputError(f"{where}: kernel filter {event!r} is not {{filter, scope}}")
        out.append((event, entry["filter"], _strs(entry.get("scope", []), where)))
    return tuple(out)


def _irq_table(irqs: Any, where: str) -> Optional[IrqTable]:
    if irqs is None:
        return None
    if not isinstance(irqs, dict):
        raise InputError(f"{where} irqs is {type(irqs).__name__}, not a map")
    table = {}
    for key, dev in irqs.items():
        if not (isinstance(key, str) and key.isdigit()) or not (dev is None or isinstance(dev, int)):
            raise InputError(f"{where} irqs: {key!r}: {dev!r} is not irq -> device")
        table[int(key)] = dev
    return irq_table(table)
