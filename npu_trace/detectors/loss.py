"""Loss: any lost event makes the session incomplete. Findings at flush, one per (source, kind, cpu).

Totals follow `npu_trace.events.LossLedger`: "page_missed" rows only flag *where* a loss showed (the kernel's
overrun counter counts the same events), so they are not added to `lost`, but they do make it incomplete.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import LossLedger, NpuEvent, event_loss


class LossDetector:
    def __init__(self) -> None:
        self.ledger = LossLedger()
        self.first_ts: Dict[Tuple[str, str, int], int] = {}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        for ev in events:
            if ev.kind == "lost":
                loss = event_loss(ev)
                self.ledger.add(loss)
                self.first_ts.setdefault((loss.source, loss.kind, loss.cpu), ev.ts_ns)
        return []

    def advance(self, now: int) -> List[Finding]:
        return []

    def flush(self) -> List[Finding]:
        out = []
        for source, kind, cpu, count in self.ledger.rows():
            records = self.ledger.flagged.get((source, kind, cpu), 0)
            if count or records:
                details = {"source": source, "loss_kind": kind, "cpu": cpu, "lost": count, "records": records}
                out.append(Finding("loss", None, None, self.first_ts.get((source, kind, cpu), 0), details))
        return out

    def summary(self) -> Dict[str, Any]:
        rows = [
            {"source": s, "kind": k, "cpu": c, "lost": n, "records": self.ledger.flagged.get((s, k, c), 0)}
            for s, k, c, n in self.ledger.rows()
        ]
        return {"incomplete": self.ledger.incomplete(), "lost": self.ledger.total, "rows": rows}
