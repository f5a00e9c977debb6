"""Every host's evidence on one aligned timeline, grouped into incidents, each a `cluster_incident` finding. Pure.

Alignment: an item's time is its host's wall clock (the recording's clock anchor), uncertain by that host's
clock error (`RecordingHost.error_ns`). Incidents: items sorted by aligned time, a new incident where the gap to
the previous item exceeds `GAP_NS`. In an incident, each card (host, device) is a subject, ranked by its
strongest evidence; the origin is a subject of the highest rank (evidence first: a driver-level fault outranks
a timeout, which is what every rank a failure took down shows), the earliest by its strongest evidence among
equals (time only among equals; candidates whose times differ by less than their clocks' combined uncertainty
are named as not told apart). When the highest rank is a timeout, the origin is not among the inputs: the
finding says so and names the earliest evidence it has. Consequences: every other subject, in aligned time
order, each with how long after the origin's first evidence it came and whether that is beyond the clocks'
uncertainty.

Deterministic: the same items give the same findings, whatever their order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.cluster.evidence import RANK_NAMES, WAIT

S = 1_000_000_000
GAP_NS = 600 * S  # evidence further apart than this belongs to separate incidents
MAX_LISTED = 12  # the origin's evidence listed in a finding


@dataclass(frozen=True)
class Item:
    """One piece of evidence, placed on the cluster's timeline."""

    host: str  # the host's name as shown
    host_key: str
    device: Optional[int]
    kind: str
    rank: int
    what: str
    ts_ns: int  # its recording's trace clock
    at_ns: int  # aligned: its host's wall clock
    error_ns: int  # its host's clock uncertainty
    recording: str

    def order(self) -> Tuple[Any, ...]:
        return (self.at_ns, -self.rank, self.host, -1 if self.device is None else self.device, self.kind, self.what)

    def subject(self) -> Tuple[str, int]:
        return (self.host_key, -1 if self.device is None else self.device)

    def brief(self) -> Dict[str, Any]:
        return {"host": self.host, "device": self.device, "kind": self.kind, "what": self.what, "at_ns": self.at_ns,
                "uncertainty_ns": self.error_ns, "ts_ns": self.ts_ns, "recording": self.recording}  # fmt: skip


class Subject:
    """A card's evidence in one incident."""

    def __init__(self, items: List[Item]) -> None:
        self.items = sorted(items, key=Item.order)
        self.rank = max(i.rank for i in self.items)
        self.strongest = next(i for i in self.items if i.rank == self.rank)
        self.first = self.items[0]

    def key(self) -> Tuple[Any, ...]:
        """Origin order: evidence first, then the time of that evidence, then a fixed order."""
        s = self.strongest
        return (-self.rank, s.at_ns, s.host, -1 if s.device is None else s.device)


def group(items: Sequence[Item], gap_ns: int = GAP_NS) -> List[List[Item]]:
    """Items in aligned time order, split where the gap exceeds `gap_ns`."""
    out: List[List[Item]] = []
    for item in sorted(items, key=Item.order):
        if out and item.at_ns - out[-1][-1].at_ns <= gap_ns:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def incidents(items: Sequence[Item], gap_ns: int = GAP_NS) -> List[Dict[str, Any]]:
    """The `cluster_incident` findings (check's finding shape: kind, device, op, ts_ns, details)."""
    return [incident(part) for part in group(items, gap_ns)]


def incident(items: Sequence[Item]) -> Dict[str, Any]:
    by_subject: Dict[Tuple[str, int], List[Item]] = {}
    for item in items:
        by_subject.setdefault(item.subject(), []).append(item)
    subjects = sorted((Subject(v) for v in by_subject.values()), key=Subject.key)
    head = subjects[0]
    missing = head.rank <= WAIT
    details: Dict[str, Any] = {"hosts": sorted({i.host for i in items}), "evidence": len(items),
                               "span_ns": max(i.at_ns for i in items) - min(i.at_ns for i in items)}  # fmt: skip
    if missing:
        earliest = min((s.first for s in subjects), key=Item.order)
        details.update(origin=None, origin_missing=True, earliest=earliest.brief(),
                       note=_missing_note(earliest, len(subjects)))  # fmt: skip
        start, origin_items = earliest, [earliest]
        rest = subjects
    else:
        details.update(origin=_origin(head), origin_missing=False)
        start, origin_items, rest = head.first, head.items, subjects[1:]
        ties = _not_told_apart(head, subjects[1:])
        if ties:
            details["origin_not_told_apart_from"] = ties
    details["consequences"] = [_consequence(s, start) for s in sorted(rest, key=lambda s: s.first.order())]
    if not missing:
        details["origin"]["evidence"] = [i.brief() for i in origin_items[:MAX_LISTED]]
    op = "origin_missing" if missing else head.strongest.kind
    return {"kind": "cluster_incident", "device": None if missing else head.first.device, "op": op,
            "ts_ns": start.at_ns, "details": details}  # fmt: skip


def _origin(head: Subject) -> Dict[str, Any]:
    return {"host": head.first.host, "device": head.first.device, "rank": RANK_NAMES[head.rank],
            "first_evidence": head.first.brief(), "strongest": head.strongest.brief()}  # fmt: skip


def _missing_note(earliest: Item, subjects: int) -> str:
    return (f"no driver-level fault among the inputs: the {subjects} card(s) here show only timeouts, what the "
            f"ranks a failure takes down show; the failing card is on a host not given (earliest evidence: "
            f"{earliest.host} device {earliest.device}, {earliest.what})")  # fmt: skip


def _not_told_apart(head: Subject, others: Sequence[Subject]) -> List[Dict[str, Any]]:
    """Subjects of the origin's rank whose strongest evidence is within the clocks' combined uncertainty."""
    s = head.strongest
    return [{"host": o.strongest.host, "device": o.strongest.device, "at_ns": o.strongest.at_ns}
            for o in others if o.rank == head.rank
            and abs(o.strongest.at_ns - s.at_ns) <= o.strongest.error_ns + s.error_ns]  # fmt: skip


def _consequence(s: Subject, start: Item) -> Dict[str, Any]:
    after = s.first.at_ns - start.at_ns
    apart = s.first.error_ns + start.error_ns
    return {"host": s.first.host, "device": s.first.device, "kinds": sorted({i.kind for i in s.items}),
            "rank": RANK_NAMES[s.rank], "first": s.first.brief(), "after_origin_ns": after,
            "uncertainty_ns": apart, "after_beyond_uncertainty": after > apart}  # fmt: skip
