"""Device memory: live bytes per device and per (device, pid), allocation failures, allocations never freed.

`alloc` events (args size, va) add `size` at `va`; `free` events (args va) remove it. An `alloc_fail` event
becomes an `alloc_fail` finding with the free bytes and largest free block the driver reported at that
moment (args free_bytes / largest_free) and a fragmentation hint: free_bytes >= size > largest_free.
At flush, allocations still live become `leak` findings, one per (device, pid) with count and bytes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.detectors.base import Finding
from npu_trace.events import NpuEvent

DevPid = Tuple[int, int]
MAX_LEAK_VAS = 8  # addresses listed per leak finding (the oldest)


class MemoryDetector:
    def __init__(self) -> None:
        self.live: Dict[Tuple[int, int], Tuple[int, int, int]] = {}  # (dev, va) -> (size, pid, ts)
        self.dev_bytes: Dict[int, int] = {}
        self.peak: Dict[int, int] = {}
        self.pid_bytes: Dict[DevPid, int] = {}
        self.counts: Dict[str, int] = {"allocs": 0, "frees": 0, "failures": 0, "unknown_frees": 0, "double_allocs": 0}

    def feed(self, events: Sequence[NpuEvent]) -> List[Finding]:
        out: List[Finding] = []
        for ev in events:
            if ev.kind == "alloc":
                self._alloc(ev)
            elif ev.kind == "free":
                self._free(ev)
            elif ev.kind == "alloc_fail":
                out.append(self._failure(ev))
        return out

    def _alloc(self, ev: NpuEvent) -> None:
        dev, va, size = _dev(ev), int(ev.args.get("va", 0)), int(ev.args.get("size", 0))
        if (dev, va) in self.live:
            self.counts["double_allocs"] += 1
            self._release(dev, va)
        self.live[(dev, va)] = (size, ev.pid, ev.ts_ns)
        self._account(dev, ev.pid, size)
        self.counts["allocs"] += 1

    def _free(self, ev: NpuEvent) -> None:
        dev, va = _dev(ev), int(ev.args.get("va", 0))
        if (dev, va) not in self.live:
            self.counts["unknown_frees"] += 1
            return
        self._release(dev, va)
        self.counts["frees"] += 1

    def _release(self, dev: int, va: int) -> None:
        size, pid, _ = self.live.pop((dev, va))
        self._account(dev, pid, -size)

    def _account(self, dev: int, pid: int, delta: int) -> None:
        self.dev_bytes[dev] = self.dev_bytes.get(dev, 0) + delta
        self.peak[dev] = max(self.peak.get(dev, 0), self.dev_bytes[dev])
        self.pid_bytes[(dev, pid)] = self.pid_bytes.get((dev, pid), 0) + delta

    def _failure(self, ev: NpuEvent) -> Finding:
        self.counts["failures"] += 1
        size, free, largest = (_int(ev.args.get(k)) for k in ("size", "free_bytes", "largest_free"))
        frag = None if free is None or largest is None or size is None else free >= size > largest
        details = {
            "size": size, "free_bytes": free, "largest_free": largest, "fragmentation": frag,
            "ret": _int(ev.args.get("ret")), "pid": ev.pid, "live_bytes": self.dev_bytes.get(_dev(ev), 0),
        }  # fmt: skip
        return Finding("alloc_fail", ev.dev, ev.op, ev.ts_ns, details)

    def advance(self, now: int) -> List[Finding]:
        return []

    def devices(self) -> List[Tuple[int, int, int]]:
        """(device, live bytes, peak bytes) of every device seen, by device."""
        return [(dev, live, self.peak.get(dev, 0)) for dev, live in sorted(self.dev_bytes.items())]

    def top_processes(self, most: int) -> List[Tuple[int, int, int]]:
        """(device, pid, live bytes) of the `most` processes holding the most device memory now."""
        top = sorted(((n, d, p) for (d, p), n in self.pid_bytes.items() if n), reverse=True)[:most]
        return [(d, p, n) for n, d, p in top]

    def flush(self) -> List[Finding]:
        groups: Dict[DevPid, List[Tuple[int, int, int]]] = {}
        for (dev, va), (size, pid, ts) in self.live.items():
            groups.setdefault((dev, pid), []).append((ts, va, size))
        return [_leak(dev, pid, sorted(allocs)) for (dev, pid), allocs in sorted(groups.items())]

    def summary(self) -> Dict[str, Any]:
        devices = [
            {"device": _out_dev(d), "live_bytes": n, "peak_bytes": self.peak.get(d, 0)}
            for d, n in sorted(self.dev_bytes.items())
        ]
        pids = [{"device": _out_dev(d), "pid": p, "live_bytes": n} for (d, p), n in sorted(self.pid_bytes.items()) if n]
        return {**self.counts, "live_allocations": len(self.live), "devices": devices, "processes": pids}


def _leak(dev: int, pid: int, allocs: List[Tuple[int, int, int]]) -> Finding:
    details = {
        "pid": pid, "count": len(allocs), "bytes": sum(size for _, _, size in allocs),
        "vas": [hex(va) for _, va, _ in allocs[:MAX_LEAK_VAS]],
    }  # fmt: skip
    return Finding("leak", _out_dev(dev), None, allocs[0][0], details)


def _dev(ev: NpuEvent) -> int:
    return -1 if ev.dev is None else ev.dev


def _out_dev(dev: int) -> Optional[int]:
    return None if dev < 0 else dev


def _int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, int) else None
