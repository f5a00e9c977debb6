"""Which parts of a scope go into the kernel's per-event filters: a pure plan over the session's event formats.

For each traced event, the predicates its `filter` file gets (`plan_filters`), each tagged with the part of the
scope it carries, so a refused one can be left to the pipeline (`npu_trace.pipeline.scope.ScopeFilter`):
- "comm": the task's name (`comm`, or `COMM` where the event has a `comm` field of its own), on every event;
- "device": the event's own device field, where the profile's rule for the event names a plain integer field
  of its record (the simulator's `dev`) and the event is not a call entry whose return is paired with it in the
  pipeline (the return carries no device: filtering only the entry would leave the other devices' returns
  without theirs); the other events' device is matched in the pipeline, after normalization;
- "irq": the NPU's interrupts (`irq == 130 || ...`, ranges folded) on the profile's interrupt events, limited to
  the scope's devices.
Processes (`--pid`) are not per-event filters: the instance's `set_event_pid` holds their tasks.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from npu_trace.ftrace.filters import OWN_COMM, comm_expr, fits, int_in
from npu_trace.ftrace.format import INT, EventFormat
from npu_trace.pipeline.normalize import compile_mapping
from npu_trace.pipeline.scope import Scope

Part = Tuple[str, str]  # (what it scopes: "comm" | "device" | "irq", the predicate)


def kernel_dev_fields(mapping: Mapping[str, Any]) -> Dict[str, str]:
    """event -> its plain device field, for the events whose device the kernel can filter (see the module
    docstring): one rule, a field name without a member path, and no pairing with a return."""
    out = {}
    for event, rules in compile_mapping(mapping).items():
        if len(rules) != 1:
            continue
        rule = rules[0]
        if rule.dev and "." not in rule.dev and rule.pair != "entry":
            out[event] = rule.dev
    return out


def plan_filters(
    scope: Scope,
    formats: Sequence[EventFormat],
    dev_fields: Mapping[str, str],
    irq_events: Sequence[str] = (),
) -> Dict[str, List[Part]]:
    """event -> the predicates of its filter, in order (events without any are left out)."""
    irqs = npu_irqs_in_scope(scope)
    out: Dict[str, List[Part]] = {}
    for fmt in formats:
        parts = _parts(scope, fmt, dev_fields.get(fmt.full_name, ""), irqs if fmt.full_name in irq_events else None)
        if parts:
            out[fmt.full_name] = parts
    return out


def npu_irqs_in_scope(scope: Scope) -> List[int]:
    """The NPU interrupts the scope keeps: every one, or those of its devices."""
    return [irq for irq, dev in scope.irqs or () if not scope.devices or dev in scope.devices]


def _parts(scope: Scope, fmt: EventFormat, dev_field: str, irqs: Any) -> List[Part]:
    parts: List[Part] = []
    if scope.comms:
        parts.append(("comm", comm_expr(scope.comms, OWN_COMM in fmt.field_names)))
    if scope.devices and dev_field and _int_field(fmt, dev_field):
        parts.append(("device", int_in(dev_field, scope.devices)))
    if irqs and _int_field(fmt, "irq"):
        expr = int_in("irq", irqs)
        if fits(expr):  # else the pipeline drops the other interrupts (ScopeFilter)
            parts.append(("irq", expr))
    return parts


def _int_field(fmt: EventFormat, name: str) -> bool:
    return any(f.name == name and f.kind == INT for f in fmt.fields)
