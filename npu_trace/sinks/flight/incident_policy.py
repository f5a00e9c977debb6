"""When the flight recorder dumps: findings in, decisions out (open a dump, close it), by event time only.

An **incident** opens at the first chosen finding (a *trigger*: `--dump-on` kinds) and its dump covers
[trigger - seconds, until], where `until` is the latest of its triggers' own ends: a finding's time + `after`
(long enough for a precursor's escalation to join it: a timeout, then the heartbeat lost a second or two later,
then the reset), a reset sequence's last step + `reset_after` (short: the dump is on disk within seconds of the
sequence's end). Once a reset sequence ended, the precursors before it no longer hold the window: it ends at
`reset_after` past the sequence, or later only for triggers after it. Triggers that come while it is open join
it (one incident, one dump);
while any reset sequence is open the window stays open, whatever its kind, until the sequence completes,
fails or times out; an incident lasts at most `MAX_INCIDENT_NS` (a device that fails on and on writes one
dump per that much, not one that never ends). It closes once the analysis clock (the timeline's watermark:
nothing earlier can still come) passed `until` with no reset sequence open.

A reset sequence is a trigger from the moment it opens (its first step), not only when its finding closes it:
the minutes before its first step are the precursors a user wants.

Rate limit: after a dump closed, no new incident opens for `gap` (trace time); the triggers that come meanwhile
are suppressed, as Perfetto's trigger rate limit drops them: counted by kind (`suppressed`) and said by the
caller, never dumped later (the ring would no longer hold their minutes). A dump never repeats its predecessor:
it starts where that one ended at the earliest.

Pure: the caller tells the time (`now`, the analysis clock) and what the detectors found.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.errors import UsageError

S = 1_000_000_000
TRIGGER_KINDS = ("reset", "heartbeat", "timeout", "alloc_fail", "link", "health", "spike")  # by priority
DEFAULT_DUMP_ON = ("reset", "timeout", "heartbeat", "alloc_fail")
MANUAL = "manual"
MAX_INCIDENT_NS = 600 * S
RESET_AFTER_NS = 2 * S  # a reset sequence's window ends this long after its last step
MAX_TRIGGERS = 64  # triggers listed per incident (the rest only counted)

OpenReset = Tuple[int, int, int]  # (device, first step's ts, last step's ts) of a reset sequence still open


def parse_kinds(text: str) -> Tuple[str, ...]:
    """ "reset,timeout" -> ("reset", "timeout"); "all": every kind; an unknown kind is a UsageError."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return TRIGGER_KINDS
    unknown = [n for n in names if n not in TRIGGER_KINDS]
    if unknown or not names:
        what = f"unknown kind {unknown[0]!r}" if unknown else "no kind"
        raise UsageError(f"--dump-on: {what} (known: {', '.join(TRIGGER_KINDS)}, or all)")
    return tuple(dict.fromkeys(names))


def trigger_kind(f: Finding) -> Optional[str]:
    """The `--dump-on` kind of a finding (None: never a trigger)."""
    if f.kind == "timeout":
        return "heartbeat" if f.op == "heartbeat" else "timeout"
    return {"reset_sequence": "reset", "alloc_fail": "alloc_fail", "link_degraded": "link", "health": "health",
            "spike": "spike"}.get(f.kind)  # fmt: skip


@dataclass(frozen=True)
class Trigger:
    kind: str
    device: Optional[int]
    ts_ns: int  # when it happened (a finding's time, a reset's first step)
    until_ns: int  # the window must reach this
    op: Optional[str] = None
    reported_ns: int = 0  # the analysis clock when it was seen

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "device": self.device, "op": self.op, "ts_ns": self.ts_ns,
                "until_ns": self.until_ns, "reported_ns": self.reported_ns}  # fmt: skip


@dataclass
class Incident:
    seq: int
    first: Trigger
    from_ns: int  # the window's start: first trigger - seconds, not before the previous dump's end
    until_ns: int
    requested_from_ns: int  # first trigger - seconds
    triggers: List[Trigger] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def join(self, trigger: Trigger) -> None:
        self.counts[trigger.kind] += 1
        if len(self.triggers) < MAX_TRIGGERS:
            self.triggers.append(trigger)
        self.until_ns = max(self.until_ns, trigger.until_ns)

    @property
    def principal(self) -> Trigger:
        """The trigger that names the dump: the gravest kind, the earliest of it."""
        rank = {k: i for i, k in enumerate((*TRIGGER_KINDS, MANUAL))}
        return min(self.triggers, key=lambda t: (rank.get(t.kind, len(rank)), t.ts_ns))

    def to_dict(self) -> Dict[str, Any]:
        return {
            "seq": self.seq, "first": self.first.to_dict(), "principal": self.principal.to_dict(),
            "from_ns": self.from_ns, "requested_from_ns": self.requested_from_ns, "until_ns": self.until_ns,
            "counts": dict(sorted(self.counts.items())), "triggers": [t.to_dict() for t in self.triggers],
        }  # fmt: skip


@dataclass(frozen=True)
class Open:
    incident: Incident


@dataclass(frozen=True)
class Close:
    incident: Incident
    reason: str  # "quiet" (until passed, no reset open), "length_bound", "manual", "session_end"
    at_ns: int


Decision = Any  # Open | Close


class IncidentPolicy:
    def __init__(
        self,
        seconds_ns: int,
        after_ns: int,
        kinds: Sequence[str] = DEFAULT_DUMP_ON,
        gap_ns: int = 60 * S,
        max_ns: int = MAX_INCIDENT_NS,
        reset_after_ns: int = RESET_AFTER_NS,
    ) -> None:
        self.seconds_ns, self.after_ns, self.gap_ns, self.max_ns = seconds_ns, after_ns, gap_ns, max_ns
        self.reset_after_ns = reset_after_ns
        self.kinds = frozenset(kinds)
        self.incident: Optional[Incident] = None
        self.suppressed: Counter[str] = Counter()  # triggers the rate limit dropped, by kind
        self.just_suppressed: List[Trigger] = []  # ... in the last observe() (the caller says them)
        self.gap_until: Optional[int] = None  # no incident opens before this
        self.last_end: Optional[int] = None  # the previous dump's end: the next one starts there at the earliest
        self.seen_resets: Dict[int, int] = {}  # device -> first step of the open sequence already a trigger
        self.incidents = 0
        self.now = 0

    # ---- in ---------------------------------------------------------------------------------------------
    def observe(self, findings: Iterable[Finding], now: Optional[int], open_resets: Sequence[OpenReset] = ()
                ) -> List[Decision]:  # fmt: skip
        """The findings the analysis reported by `now` and the reset sequences open then -> what to do."""
        if now is not None and now > self.now:
            self.now = now
        out: List[Decision] = []
        self.just_suppressed = []
        triggers = [*self._of_findings(findings), *self._of_resets(open_resets)]
        for trigger in sorted(triggers, key=lambda t: t.ts_ns):
            self._take(trigger, out)
        self._maybe_close(bool(open_resets), out)
        return out

    def manual(self, now: int) -> List[Decision]:
        """Dump the last `seconds` now (the TUI's key): [Open, Close] of a window ending now, or [] while an
        incident's dump is being written (it holds those minutes already)."""
        if self.incident is not None:
            return []
        self.now = max(self.now, now)
        trigger = Trigger(MANUAL, None, self.now, self.now, reported_ns=self.now)
        self.incidents += 1
        incident = Incident(self.incidents, trigger, self.now - self.seconds_ns, self.now, self.now - self.seconds_ns)
        incident.join(trigger)
        return [Open(incident), Close(incident, "manual", self.now)]

    def finish(self) -> List[Decision]:
        """The session ends: the open incident's dump closes with what it has."""
        incident, self.incident = self.incident, None
        return [] if incident is None else [Close(incident, "session_end", self.now)]

    # ---- triggers ---------------------------------------------------------------------------------------
    def _of_findings(self, findings: Iterable[Finding]) -> List[Trigger]:
        out = []
        for f in findings:
            kind = trigger_kind(f)
            if kind is None or kind not in self.kinds:
                continue
            until = f.ts_ns + self.after_ns
            if kind == "reset":
                end = max((s["ts_ns"] for s in f.details.get("steps", ())), default=f.ts_ns)
                until = end + self.reset_after_ns
                if self.seen_resets.get(f.device if f.device is not None else -1) == f.ts_ns:
                    self._reset_ended(end)  # told when it opened: its end only sets the window's
                    continue
            out.append(Trigger(kind, f.device, f.ts_ns, until, f.op, self.now))
        return out

    def _of_resets(self, open_resets: Sequence[OpenReset]) -> List[Trigger]:
        """A reset sequence is a trigger once, when it opens; while open it moves the window's end."""
        out = []
        for dev, first, last in open_resets:
            self._extend(last + self.reset_after_ns)
            if self.seen_resets.get(dev) == first:
                continue
            self.seen_resets[dev] = first
            if "reset" in self.kinds:
                out.append(Trigger("reset", dev, first, last + self.reset_after_ns, "reset", self.now))
        return out

    def _reset_ended(self, end: int) -> None:
        """A reset sequence of the open incident ended at `end`: its window ends `reset_after` later, unless a
        trigger after the sequence asks for more."""
        incident = self.incident
        if incident is None:
            return
        later = [t.until_ns for t in incident.triggers if t.ts_ns > end]
        incident.until_ns = max([end + self.reset_after_ns, *later])

    def _extend(self, until: int) -> None:
        if self.incident is not None:
            self.incident.until_ns = max(self.incident.until_ns, until)

    def _take(self, trigger: Trigger, out: List[Decision]) -> None:
        if self.incident is not None:
            self.incident.join(trigger)
        elif self.gap_until is not None and trigger.reported_ns < self.gap_until:
            self.suppressed[trigger.kind] += 1
            self.just_suppressed.append(trigger)
        else:
            self._open(trigger, out)

    # ---- incidents --------------------------------------------------------------------------------------
    def _open(self, first: Trigger, out: List[Decision]) -> None:
        requested = first.ts_ns - self.seconds_ns
        start = requested if self.last_end is None else max(requested, self.last_end)
        self.incidents += 1
        incident = Incident(self.incidents, first, start, first.until_ns, requested)
        incident.join(first)
        self.incident = incident
        out.append(Open(incident))

    def _maybe_close(self, resets_open: bool, out: List[Decision]) -> None:
        incident = self.incident
        if incident is None:
            return
        if self.now - incident.first.ts_ns >= self.max_ns:
            reason = "length_bound"
        elif self.now >= incident.until_ns and not resets_open:
            reason = "quiet"
        else:
            return
        self.incident = None
        self.last_end = self.now
        self.gap_until = self.now + self.gap_ns
        out.append(Close(incident, reason, self.now))
