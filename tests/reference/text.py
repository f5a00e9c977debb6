"""The reference text and NDJSON: one event object at a time (`format_text`, `format_ndjson`; `StreamPrinter`
over a list of items). `npu_trace.sinks.text` (a block at a time, from the columns) is held equal to it, byte
for byte."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

from npu_trace.events import Loss, NpuEvent, RawRecord, TraceEvent
from npu_trace.ftrace.format import INT, EventFormat
from npu_trace.ftrace.special import KernelText
from npu_trace.sinks.text import channel_dict, channel_text, loss_dict, safe_text

CommOf = Callable[[int], str]


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    return str(value)


def format_text(ev: TraceEvent, comm: str) -> str:
    secs, nsecs = divmod(ev.ts_ns, 1_000_000_000)
    fmt = ev.fmt
    plan = _TEXT_PLANS.get(id(fmt))
    if plan is None or plan[0] is not fmt:
        plan = _text_plan(fmt)
    _, name, template, others, count = plan
    values = ev.values
    if len(values) != count:  # not one value per field: one by one, as far as both go
        fields = _fields_text(ev)
    else:
        if others:
            shown = list(values)
            for i in others:
                shown[i] = _value_text(shown[i])
            values = tuple(shown)
        try:
            fields = template % values
        except TypeError:  # a value that is not what its field declares: one by one
            fields = _fields_text(ev)
    who = _COMMS.get(comm)
    if who is None:
        if len(_COMMS) >= 4096:
            _COMMS.clear()
        who = _COMMS[comm] = safe_text(comm)
    return f"{secs:6d}.{nsecs:09d} [{ev.cpu:03d}] {who}-{ev.pid} {name}: {fields}"


_COMMS: Dict[str, str] = {}  # process names as shown (escaped), a few thousand at most


def _fields_text(ev: TraceEvent) -> str:
    hexed = ev.fmt.hex_fields
    return " ".join(
        f"{k}={hex(v) if k in hexed and isinstance(v, int) else _value_text(v)}"
        for k, v in zip(ev.fmt.field_names, ev.values)
    )


# format's id() -> (the format, its full name, its fields' %-template, positions of its non-integer fields,
# its field count):
# the text of an event is then one %-formatting (integers as %d, or %#x where the kernel prints them in hex,
# which is what hex() gives), the other fields' values made text first
TextPlan = Tuple[EventFormat, str, str, Tuple[int, ...], int]
_TEXT_PLANS: Dict[int, TextPlan] = {}


def _text_plan(fmt: EventFormat) -> TextPlan:
    hexed = fmt.hex_fields
    parts, others = [], []
    for i, f in enumerate(fmt.fields):
        name = f.name.replace("%", "%%")
        if f.kind != INT:
            parts.append(f"{name}=%s")
            others.append(i)
        else:
            parts.append(f"{name}=%#x" if f.name in hexed else f"{name}=%d")
    plan = _TEXT_PLANS[id(fmt)] = (fmt, fmt.full_name, " ".join(parts), tuple(others), len(fmt.fields))
    return plan


def event_dict(ev: TraceEvent, comm: str) -> Dict[str, Any]:
    return {
        "ts_ns": ev.ts_ns,
        "cpu": ev.cpu,
        "pid": ev.pid,
        "comm": comm,
        "event": ev.fmt.full_name,
        "fields": ev.fields(),
    }


def format_ndjson(ev: TraceEvent, comm: str) -> str:
    """json.dumps(event_dict(ev, comm)), exactly, from a %-template per format (integers as %d, the other
    fields and the name through json.dumps)."""
    fmt = ev.fmt
    plan = _JSON_PLANS.get(id(fmt))
    if plan is None or plan[0] is not fmt:
        plan = _json_plan(fmt)
    _, template, others, count = plan
    values = ev.values
    if template is None or len(values) != count:
        return json.dumps(event_dict(ev, comm))
    shown = [ev.ts_ns, ev.cpu, ev.pid, json.dumps(comm), *values]
    for i in others:
        shown[i] = json.dumps(shown[i])
    try:
        return template % tuple(shown)
    except TypeError:  # a value that is not what its field declares
        return json.dumps(event_dict(ev, comm))


# format's id() -> (the format, its NDJSON %-template (None: field names repeat, json.dumps it is), the
# positions in the template's values of its non-integer fields, its field count)
JsonPlan = Tuple[EventFormat, Any, Tuple[int, ...], int]
_JSON_PLANS: Dict[int, JsonPlan] = {}


def _json_plan(fmt: EventFormat) -> JsonPlan:
    names = list(fmt.field_names)
    template = None
    others = tuple(4 + i for i, f in enumerate(fmt.fields) if f.kind != INT)
    if len(set(names)) == len(names):
        fields = ", ".join(f"{_json_literal(f.name)}: {'%d' if f.kind == INT else '%s'}" for f in fmt.fields)
        template = ('{"ts_ns": %d, "cpu": %d, "pid": %d, "comm": %s, "event": ' + _json_literal(fmt.full_name)
                    + ', "fields": {' + fields + "}}")  # fmt: skip
    plan = _JSON_PLANS[id(fmt)] = (fmt, template, others, len(fmt.fields))
    return plan


def _json_literal(text: str) -> str:
    return json.dumps(text).replace("%", "%%")


# ---- the ftrace system's own events (npu_trace.ftrace.special): their text in place of their fields ----------
def special_text(ev: TraceEvent, comm: str, body: str) -> str:
    secs, nsecs = divmod(ev.ts_ns, 1_000_000_000)
    return f"{secs:6d}.{nsecs:09d} [{ev.cpu:03d}] {safe_text(comm)}-{ev.pid} {ev.fmt.full_name}: {safe_text(body)}"


def special_ndjson(ev: TraceEvent, comm: str, body: str) -> str:
    """event_dict with the event's text beside its fields (`"text"`)."""
    return json.dumps(dict(event_dict(ev, comm), text=body))


class StreamPrinter:
    """Writes events and losses to a text stream, as text or NDJSON. `kernel`: the kernel's tables the ftrace
    system's own events are shown with (None: by their fields); `unformatted` counts those it could not format
    (shown by their fields) and the records no format describes."""

    def __init__(self, out: TextIO, fmt: str, comm_of: CommOf, kernel: Optional[KernelText] = None) -> None:
        self.out = out
        self.ndjson = fmt == "ndjson"
        self.comm_of = comm_of
        self.kernel = kernel
        self.lines = 0
        self.unformatted = 0

    def write(self, item: Any) -> None:
        line = self.line(item)
        if line is not None:
            self.out.write(line + "\n")
            self.lines += 1

    def line(self, item: Any) -> Optional[str]:
        """The item's line (without its newline); None for what is not shown."""
        if isinstance(item, TraceEvent):
            comm = self.comm_of(item.pid)
            if self.kernel is not None and item.fmt.system == "ftrace":
                special = self._special(item, comm)
                if special is not None:
                    return special
            return format_ndjson(item, comm) if self.ndjson else format_text(item, comm)
        if isinstance(item, Loss):
            return json.dumps(loss_dict(item)) if self.ndjson else self._loss_text(item)
        if isinstance(item, NpuEvent):
            return json.dumps(channel_dict(item), default=str) if self.ndjson else channel_text(item)
        if isinstance(item, RawRecord):  # an event no format describes: as trace-cmd report shows one, its bytes
            self.unformatted += 1
            comm = self.comm_of(item.pid)
            if self.ndjson:
                return json.dumps({"ts_ns": item.ts_ns, "cpu": item.cpu, "pid": item.pid, "comm": comm,
                                   "event": f"unknown:{item.id}", "raw": item.payload.hex()})  # fmt: skip
            secs, nsecs = divmod(item.ts_ns, 1_000_000_000)
            data = "".join(f" {b:02x}" for b in item.payload)
            return f"{secs:6d}.{nsecs:09d} [{item.cpu:03d}] {safe_text(comm)}-{item.pid} [UNKNOWN TYPE {item.id}]{data}"
        return None

    def write_batch(self, batch: List[Any]) -> None:
        """The batch's lines in one write."""
        lines = [line for line in map(self.line, batch) if line is not None]
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.lines += len(lines)
        self.out.flush()

    def _special(self, ev: TraceEvent, comm: str) -> Optional[str]:
        assert self.kernel is not None
        formatter = self.kernel.formatter(ev.fmt)
        if formatter is None:
            return None
        body = formatter.one(ev.values)
        if body is None:
            self.unformatted += 1
            return None
        return special_ndjson(ev, comm, body) if self.ndjson else special_text(ev, comm, body)

    @staticmethod
    def _loss_text(loss: Loss) -> str:
        secs, nsecs = divmod(loss.ts_ns, 1_000_000_000)
        count = str(loss.lost) if loss.lost else "an unknown number of"
        cpu = f"{loss.cpu:03d}" if loss.cpu >= 0 else "---"
        return f"{secs:6d}.{nsecs:09d} [{cpu}] !! LOST {count} events ({loss.source}/{loss.kind})"
