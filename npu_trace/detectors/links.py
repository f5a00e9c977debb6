"""Which driver-level finding explains an application's error: a pure function of the complete findings.

For each `app_error` finding, the candidates are the findings of the kinds its class can be caused by
(`CAUSES`, in order of preference) on the same device (an application error naming no device, or a finding
naming none such as a kernel fault, matches any), that happened up to `BEFORE_NS` before it or within its
time's uncertainty after it (the application's clock resolution and the wall-to-trace clock mapping's error,
`time_resolution_ns` + `clock_error_ns`, plus `AFTER_NS`: an application may report before the kernel line is
printed). A reset sequence matches from its first step to `BEFORE_NS` after its last. The best candidates (by
preference, then nearness) become `explained_by` (kind, device, op, ts_ns: the finding's identity), with a
one-line `explanation`; an error with none says `explained_by: []`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding

S = 1_000_000_000
BEFORE_NS = 600 * S
AFTER_NS = 5 * S
MAX_LINKS = 3

CAUSES: Dict[str, Tuple[str, ...]] = {
    "heartbeat_lost": ("timeout:heartbeat", "reset_sequence", "device_fault", "kernel_fault"),
    "device_absent": ("reset_sequence", "device_fault", "timeout:heartbeat", "kernel_fault", "link_degraded"),
    "device_open": ("reset_sequence", "device_fault", "timeout:heartbeat", "kernel_fault", "link_degraded"),
    "alloc_fail": ("alloc_fail", "device_fault", "kernel_fault"),
    "stream_sync_timeout": ("timeout", "reset_sequence", "device_fault", "kernel_fault"),
    "collective_timeout": ("timeout", "reset_sequence", "device_fault", "kernel_fault"),
    "driver_error": ("timeout", "alloc_fail", "reset_sequence", "device_fault", "kernel_fault"),
}


def explain(findings: Sequence[Finding]) -> List[Finding]:
    """The findings with every app_error's `explained_by` and `explanation` filled in (same order)."""
    driver = [f for f in findings if f.kind != "app_error"]
    return [_explained(f, driver) if f.kind == "app_error" else f for f in findings]


def _explained(app: Finding, driver: Sequence[Finding]) -> Finding:
    wants = CAUSES.get(app.op or "", CAUSES["driver_error"])
    slack = AFTER_NS + _int(app.details.get("time_resolution_ns")) + _int(app.details.get("clock_error_ns"))
    scored = []
    for f in driver:
        rank = _rank(f, wants)
        if rank is None or not _same_device(app, f):
            continue
        gap = _gap(app.ts_ns, f, slack)
        if gap is not None:
            scored.append((rank, abs(gap), f.sort_key(), f, gap))
    scored.sort(key=lambda s: s[:3])
    links = [_ref(f, gap) for _, _, _, f, gap in scored[:MAX_LINKS]]
    details = dict(app.details, explained_by=links, explanation=_sentence(scored[0][3], scored[0][4]) if scored
                   else "no driver-level finding explains it in this trace")  # fmt: skip
    return replace(app, details=details)


def _rank(f: Finding, wants: Sequence[str]) -> Optional[int]:
    for i, want in enumerate(wants):
        kind, _, op = want.partition(":")
        if f.kind == kind and (not op or (f.op or "").startswith(op)):
            return i
    return None


def _same_device(app: Finding, f: Finding) -> bool:
    return app.device is None or f.device is None or app.device == f.device


def _gap(ts: int, f: Finding, slack: int) -> Optional[int]:
    """How long after the finding (its span for a reset) the application error came; None: out of reach."""
    start = f.ts_ns
    end = start + _int(f.details.get("duration_ns")) if f.kind == "reset_sequence" else start
    if ts < start:
        return ts - start if start - ts <= slack else None
    gap = max(0, ts - end)
    return gap if gap <= BEFORE_NS else None


def _ref(f: Finding, gap: int) -> Dict[str, Any]:
    return {"kind": f.kind, "device": f.device, "op": f.op, "ts_ns": f.ts_ns, "app_after_ns": gap}


def _sentence(f: Finding, gap: int) -> str:
    where = f" on device {f.device}" if f.device is not None else ""
    when = f"{abs(gap) / 1e9:.3f} s {'after' if gap >= 0 else 'before'} it"
    what = {"reset_sequence": "a reset sequence", "timeout": f"a {f.op} timeout", "alloc_fail": "an allocation failure",
            "device_fault": f"the driver's {f.op} report", "kernel_fault": f"a kernel {f.op}",
            "link_degraded": "a degraded PCIe link"}.get(f.kind, f.kind)  # fmt: skip
    cause = _cause(f)
    return f"{what}{where}{cause}; the application reported {when}"


def _cause(f: Finding) -> str:
    d = f.details
    if f.kind == "alloc_fail" and d.get("fragmentation"):
        return f" (fragmentation: {d.get('free_bytes')} bytes free, largest block {d.get('largest_free')})"
    if f.kind == "reset_sequence":
        trigger = d.get("trigger") or {}
        return f" ({d.get('status')}, triggered by {trigger.get('kind')} {trigger.get('op')})" if trigger else \
            f" ({d.get('status')})"  # fmt: skip
    return ""


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else 0
