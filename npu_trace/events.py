"""The event model shared by sources, detectors and sinks.

An `NpuEvent` is what detectors and sinks see, whatever source an event came from: (ts_ns, kind, dev, op,
pid, cpu, args). `kind` is one of `KINDS` ("fault": a kernel fault block, or the driver saying a device is
dead or unreachable; "app_error": an application's log naming a driver-level error; "task": a task started,
which says which process a thread belongs to, npu_trace.detectors.processes); `dev` is the NPU's
device id or None; `op` names the operation within the kind (a HAL function, "task", a timeout kind, "reset"
...); `args` holds the event's own values (JSON-able). Raw trace records become NpuEvents in
`npu_trace.pipeline.normalize`; the other channels (kmsg, uevents, npu-smi, BPF) make them directly.

A decoded ftrace record is a `TraceEvent`: a plain tuple (cheap to build at millions per second) holding the
timestamp on the trace clock (ns), the CPU, the pid, the event's `EventFormat` and the field values in the
order of the format's non-common fields. `fields()` turns it into a dict keyed by the format's field names.

Loss is data too: `Loss` records say which source and CPU lost how many events, and are counted in a
`LossLedger` that every sink can show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from npu_trace.ftrace.format import EventFormat


class TraceEvent(NamedTuple):
    ts_ns: int
    cpu: int
    pid: int
    fmt: EventFormat
    values: Tuple[Any, ...]

    @property
    def event(self) -> str:
        """ "system:name"."""
        return self.fmt.full_name

    def fields(self) -> Dict[str, Any]:
        return dict(zip(self.fmt.field_names, self.values))


KINDS: Tuple[str, ...] = (
    "call", "irq", "alloc", "free", "alloc_fail", "submit", "complete", "timeout", "reset_step", "ecc",
    "link", "thermal", "log", "lost", "marker", "fault", "app_error", "task",
)  # fmt: skip


class NpuEvent(NamedTuple):
    ts_ns: int
    kind: str
    dev: Optional[int]
    op: str
    pid: int
    cpu: int
    args: Dict[str, Any]


class Loss(NamedTuple):
    """`lost` events lost by `source` on `cpu` (-1: not per CPU), seen at `ts_ns` (0 if unknown).

    kind: "page_missed" (the ring-buffer page said events were overwritten before it was read; `lost` may be 0
    when the kernel did not store the number), "overrun" (per_cpu stats), "dropped" (buffer full, no overwrite),
    "malformed" (a record that could not be decoded), "damaged" (a part of a recording damaged on disk and skipped:
    a chunk, `cpu` each CPU it held pages of, or the records up to the next chunk that reads, `cpu` -1; `lost` 0:
    how many events it held is unknown).
    """

    source: str
    cpu: int
    kind: str
    lost: int
    ts_ns: int = 0


DAMAGED = "damaged"
# kinds whose rows may flag a loss without its number (lost 0): a page that says events were missed, a damaged
# part of a recording, a channel that stopped (its events from then on), a socket that overflowed (uevents)
UNCOUNTED = ("page_missed", DAMAGED, "stopped", "overflow")


class LossLedger:
    """Totals of every loss, per (source, kind, cpu). Nothing is lost silently: every stage adds here."""

    def __init__(self) -> None:
        self.counts: Dict[Tuple[str, str, int], int] = {}
        self.flagged: Dict[Tuple[str, str, int], int] = {}

    def add(self, loss: Loss) -> None:
        key = (loss.source, loss.kind, loss.cpu)
        self.counts[key] = self.counts.get(key, 0) + loss.lost
        self.flagged[key] = self.flagged.get(key, 0) + 1

    def set_total(self, source: str, kind: str, cpu: int, count: int) -> None:
        """For counters the kernel keeps as totals (per_cpu stats): the ledger holds the latest value."""
        key = (source, kind, cpu)
        self.counts[key] = count
        self.flagged.setdefault(key, 0)

    @property
    def total(self) -> int:
        """Events lost. "page_missed" rows only say *where* a loss showed in the stream: the same events are
        counted by the kernel's overrun counter, so they are not added twice."""
        return sum(n for (_, kind, _), n in self.counts.items() if kind != "page_missed")

    def incomplete(self) -> bool:
        """True when anything was lost, including the flags of losses whose number is unknown (UNCOUNTED: a page
        that says events were missed, a damaged chunk of a recording)."""
        return self.total > 0 or any(n for (_, kind, _), n in self.flagged.items() if kind in UNCOUNTED)

    def rows(self) -> List[Tuple[str, str, int, int]]:
        """(source, kind, cpu, count) sorted, zero rows included for counters that were checked."""
        return sorted((s, k, c, n) for (s, k, c), n in self.counts.items())

    def summary(self) -> str:
        if not self.incomplete():
            return "loss: none (0 events lost)"
        parts = []
        for source, kind, cpu, count in self.rows():
            if count or self.flagged.get((source, kind, cpu)):
                where = f"cpu{cpu}" if cpu >= 0 else "all"
                label = f"{count}" if count else "unknown number (flagged)"
                parts.append(f"{source}/{kind}/{where}={label}")
        lost = f"{self.total} events" if self.total else "an unknown number of events"  # only flags of UNCOUNTED kinds
        return f"loss: {lost} lost ({', '.join(parts)})"


class RawRecord(NamedTuple):
    """A trace record of an event id the formats at hand do not describe: shown as its bytes, never dropped."""

    ts_ns: int
    cpu: int
    pid: int  # -1: the record is shorter than the common fields
    id: int  # its event id (common_type)
    payload: bytes


def int64_of(value: Any) -> Optional[int]:
    """`value` when it is an integer an int64 column holds, else None (a bool, a float, a string, None, past it)."""
    if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63:
        return value
    return None


def event_loss(ev: NpuEvent) -> Loss:
    """A "lost" event (`lost_event`'s) as the Loss it tells; one whose count is not a count (negative, past
    int64, not an integer: a damaged or hand-made recording) as a damaged part, of an unknown number: it must
    neither cancel a real loss nor hide one."""
    source, lost = str(ev.args.get("source", "")), int64_of(ev.args.get("lost"))
    if lost is not None and lost >= 0:
        return Loss(source, ev.cpu, ev.op, lost, ev.ts_ns)
    return Loss(source, ev.cpu, DAMAGED, 0, ev.ts_ns)


def lost_event(loss: Loss) -> NpuEvent:
    """A Loss as the NpuEvent detectors and sinks see (kind "lost", op = the loss kind)."""
    args = {"source": loss.source, "lost": loss.lost}
    return NpuEvent(loss.ts_ns, "lost", None, loss.kind, -1, loss.cpu, args)
