"""A recording's host and clock, from its header: who wrote it (npu_trace.recording.host's `host_identity`) and
how its trace clock maps to true wall time (`clock_anchor`, with `clock_sync.error_ns` as the uncertainty).

Hosts are known by their machine id (one host across reboots and across its recordings); a recording written
before headers carried an identity is known by its header's host name (`identity: "hostname"`), and one that
names no host (an import) by its file (`identity: "file"`). A recording that says nothing of its clock's sync,
or whose clock was not synchronized, is aligned with `UNKNOWN_ERROR_NS` of uncertainty, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

S = 1_000_000_000
UNKNOWN_ERROR_NS = 1 * S
MAX_ERROR_NS = 3600 * S  # a larger declared error is no alignment at all: taken as this


@dataclass(frozen=True)
class RecordingHost:
    key: str  # what tells hosts apart: "machine:<id>", "host:<hostname>" or "file:<name>"
    name: str  # how the host is shown: its hostname (or the file's name)
    machine_id: str
    boot_id: str
    identity: str  # "host", "simulated", "hostname" (an older file: its header's host name only) or "file"
    mono_ns: Optional[int]  # the clock anchor: the trace clock and the wall clock read together
    realtime_ns: Optional[int]
    error_ns: int  # how far the wall clock may have been from true time
    error_known: bool

    def wall(self, ts_ns: int) -> Optional[int]:
        """A trace-clock time as this host's wall clock read it (None without an anchor)."""
        if self.mono_ns is None or self.realtime_ns is None:
            return None
        return self.realtime_ns + ts_ns - self.mono_ns


def host_of(header: Dict[str, Any], file_name: str) -> RecordingHost:
    """The host and clock of a recording whose header is `header` (already validated by the reader)."""
    entry = header.get("host_identity")
    ident: Dict[str, Any] = entry if isinstance(entry, dict) else {}
    hostname = _text(ident.get("hostname")) or _text(header.get("host"))
    machine, boot = _text(ident.get("machine_id")), _text(ident.get("boot_id"))
    if ident and (machine or hostname):
        source = _text(ident.get("source")) or "host"
    else:
        source = "hostname" if hostname else "file"
    key = f"machine:{machine}" if machine else f"host:{hostname}" if hostname else f"file:{file_name}"
    mono, real = _anchor(header.get("clock_anchor"))
    error, known = _error(header.get("clock_sync"))
    return RecordingHost(key, hostname or file_name, machine, boot, source, mono, real, error, known)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _anchor(anchor: Any) -> Any:
    if isinstance(anchor, dict) and all(_int(anchor.get(k)) for k in ("mono_ns", "realtime_ns")):
        return int(anchor["mono_ns"]), int(anchor["realtime_ns"])
    return None, None


def _error(sync: Any) -> Any:
    value = sync.get("error_ns") if isinstance(sync, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, MAX_ERROR_NS), True
    return UNKNOWN_ERROR_NS, False


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
