"""Device memory: live bytes per device and per (device, process), allocation failures, allocations never freed.

`alloc` events (args size, va) add `size` at `va`; `free` events (args va) remove it. An `alloc_fail` event
becomes an `alloc_fail` finding with the free bytes and largest free block the driver reported at that
moment (args free_bytes / largest_free) and a fragmentation hint: free_bytes >= size > largest_free.
At flush, allocations still live become `leak` findings, one per (device, process) with count and bytes; not in
a window of a longer session (a flight recorder's dump: `leaks_at_end` False), whose end is not the processes'
end: what is live then may be freed after it (the summary still counts it, `live_allocations`).

Events carry the thread that made them (`pid` is a thread id: npu_trace.detectors.processes). The counting
keeps live bytes per (device, thread) in `pid_bytes` (on both paths, the hot ones); what is said per process
(`process_bytes()`, `top_processes()`, the summary's `processes`, leaks) adds a process's threads up through
`processes`, the thread -> process map (a thread it does not know is its own; when the processes at the start
are known, the summary counts such threads that held memory: `unattributed_threads`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from npu_trace.detectors.base import Finding
from npu_trace.detectors.processes import Processes
from npu_trace.events import NpuEvent
from npu_trace.pipeline.order import KeyPacking, sorted_distinct, stable_order
from npu_trace.pipeline.vnormalize import KIND_CODE, NormBlock, rows_of

DevPid = Tuple[int, int]
Ints = Union[np.ndarray, Sequence[int]]


class MemoryWatch(Protocol):
    """Told every change of live bytes as the detector makes it, in time order: when, the device (-1: none),
    the pid holding it, by how much (sequences of equal length: arrays from a block, one-tuples otherwise)."""

    def changes(self, ts: Ints, dev: Ints, pid: Ints, delta: Ints) -> None: ...


MAX_LEAK_VAS = 8  # addresses listed per leak finding (the oldest)
MAX_LISTED = 8  # thread ids listed as unattributed in the summary (the lowest)


class MemoryDetector:
    def __init__(self, processes: Optional[Processes] = None) -> None:
        self.processes = processes if processes is not None else Processes()
        # the live allocations, (dev, va) -> (size, pid, ts), in the order they were made: a map (one event at a
        # time) or columns (a block at a time), whichever the last to change them keeps (`live`, `_columns`)
        self._live: Dict[Tuple[int, int], Tuple[int, int, int]] = {}
        self._cols: Optional[LiveColumns] = None
        self.dev_bytes: Dict[int, int] = {}
        self.peak: Dict[int, int] = {}
        self.pid_bytes: Dict[DevPid, int] = {}
        self.counts: Dict[str, int] = {"allocs": 0, "frees": 0, "failures": 0, "unknown_frees": 0, "double_allocs": 0}
        self.watch: Optional[MemoryWatch] = None  # told every change of live bytes (exporters draw counters)
        self.leaks_at_end = True  # False: the input is a window of a longer session (see the module docstring)

    @property
    def live(self) -> Dict[Tuple[int, int], Tuple[int, int, int]]:
        """The live allocations as a map (made from the columns the block path keeps, if it kept them last)."""
        if self._cols is not None:
            self._live, self._cols = self._cols.as_map(), None
        return self._live

    def _columns(self) -> Optional[LiveColumns]:
        """The live allocations as columns (made from the map, if the event path kept it last); None when one of
        them does not fit in int64 (only events, not a block's columns, can carry such a value)."""
        if self._cols is None:
            self._cols = LiveColumns.of(self._live)
            if self._cols is not None:
                self._live = {}
        return self._cols

    def live_count(self) -> int:
        return len(self._cols) if self._cols is not None else len(self._live)

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

    def feed_block(self, nb: NormBlock, lo: int = 0, hi: Optional[int] = None) -> List[Finding]:
        """The columnar twin of feed(): allocations, frees and failures of a normalized block, in order (only
        those of rows lo..hi-1: a block fed in consecutive pieces is the block fed at once)."""
        rows = rows_of(nb, ("alloc", "free", "alloc_fail"))
        if lo or hi is not None:
            rows = rows[(rows >= lo) & (rows < (len(nb) if hi is None else hi))]
        if not len(rows):
            return []
        got = nb.int_args_of(rows, ("va", "size"))
        live = None if got is None else self._columns()
        if got is None or live is None:
            return self._one_by_one(nb, rows)
        vas, sizes = got
        return self._at_once(nb, rows, live, np.where(vas[1], vas[0], 0), np.where(sizes[1], sizes[0], 0))

    def _one_by_one(self, nb: NormBlock, rows: np.ndarray) -> List[Finding]:
        out: List[Finding] = []
        alloc, free = KIND_CODE["alloc"], KIND_CODE["free"]
        kind = nb.kind.tolist()
        for r in rows.tolist():
            if kind[r] in (alloc, free):
                self.feed([nb.event(r)])
            else:
                out.append(self._failure(nb.event(r)))
        return out

    def _at_once(self, nb: NormBlock, rows: np.ndarray, live: LiveColumns, va: np.ndarray,
                 size: np.ndarray) -> List[Finding]:  # fmt: skip
        """Allocations and frees matched by (device, va) in order, as _alloc/_free would one by one: a free
        releases the allocation just before it of its address (live before the block, or in it), an
        allocation of a live address releases that one first (a double allocation); `live`: the allocations
        live before the block, as columns."""
        kind, dev, pid, ts = nb.kind[rows], nb.dev[rows], nb.block.pid[rows].astype(np.int64), nb.block.ts[rows]
        is_alloc, is_free = kind == KIND_CODE["alloc"], kind == KIND_CODE["free"]
        mem = np.flatnonzero(is_alloc | is_free)  # the failures only read the live bytes
        cols = np.stack([dev[mem], va[mem]])
        packing = KeyPacking(cols)
        packed = packing.pack(cols)
        by_key = stable_order(packed)  # by (device, va), each address's rows in time order
        order, k = mem[by_key], packed[by_key]
        start: np.ndarray = np.ones(len(order), dtype=bool)
        start[1:] = k[1:] != k[:-1]
        starts = np.flatnonzero(start)
        group, held = live.among(packing, k[starts])  # the block's addresses live before it, and where in `live`
        prev_alloc: np.ndarray = np.zeros(len(order), dtype=bool)
        prev_alloc[1:] = is_alloc[order][:-1] & ~start[1:]
        # what each row releases: the allocation before it of its address (in the block, or live before it)
        rel_size: np.ndarray = np.zeros(len(order), np.int64)
        rel_pid: np.ndarray = np.zeros(len(order), np.int64)
        inside = np.flatnonzero(prev_alloc & ~start)
        rel_size[inside], rel_pid[inside] = size[order[inside - 1]], pid[order[inside - 1]]
        first = starts[group]
        prev_alloc[first] = True
        rel_size[first], rel_pid[first] = live.size[held], live.pid[held]
        self._count(is_alloc[order], prev_alloc)
        deltas = self._deltas(order, is_alloc[order], prev_alloc, rel_size, rel_pid, dev, pid, size)
        if self.watch is not None:
            self.watch.changes(ts[deltas[0]], deltas[2], deltas[3], deltas[4])
        fails = np.flatnonzero(kind == KIND_CODE["alloc_fail"])
        out = self._account_all(deltas, dev, rows, fails, nb)
        self._settle_live(live, held, cols[:, by_key], order, start, is_alloc, size, pid, ts)
        return out

    def _count(self, is_alloc: np.ndarray, prev_alloc: np.ndarray) -> None:
        self.counts["allocs"] += int(is_alloc.sum())
        self.counts["double_allocs"] += int((is_alloc & prev_alloc).sum())
        self.counts["frees"] += int((~is_alloc & prev_alloc).sum())
        self.counts["unknown_frees"] += int((~is_alloc & ~prev_alloc).sum())

    def _deltas(self, order: np.ndarray, is_alloc: np.ndarray, released: np.ndarray, rel_size: np.ndarray,
                rel_pid: np.ndarray, dev: np.ndarray, pid: np.ndarray, size: np.ndarray) -> np.ndarray:  # fmt: skip
        """(position, sub-order, device, pid, delta) of every _account call, in the order they happen (a double
        allocation's release before its allocation)."""
        rel = np.flatnonzero(released)
        add = np.flatnonzero(is_alloc)
        pos = np.concatenate([order[rel], order[add]])
        sub = np.concatenate([np.zeros(len(rel), np.int64), np.ones(len(add), np.int64)])
        d = np.concatenate([dev[order[rel]], dev[order[add]]])
        p = np.concatenate([rel_pid[rel], pid[order[add]]])
        delta = np.concatenate([-rel_size[rel], size[order[add]]])
        table = np.stack([pos, sub, d, p, delta])
        return table[:, stable_order(pos * 2 + sub)]

    def _account_all(self, deltas: np.ndarray, dev: np.ndarray, rows: np.ndarray, fails: np.ndarray,
                     nb: NormBlock) -> List[Finding]:  # fmt: skip
        pos, _, d, p, delta = deltas
        out: List[Finding] = []
        fail_at: Dict[int, List[int]] = {int(f): [] for f in fails.tolist()}
        for device in sorted_distinct(np.concatenate([d, dev[fails]])).tolist():
            mine = d == device
            base = self.dev_bytes.get(device, 0)
            running = base + np.cumsum(delta[mine])
            if mine.any():
                self.dev_bytes[device] = int(running[-1])
                self.peak[device] = max(self.peak.get(device, 0), int(running.max()))
            for f in np.flatnonzero(dev[fails] == device).tolist():  # live bytes just before each failure
                k = int(np.searchsorted(pos[mine], fails[f], side="left"))
                fail_at[int(fails[f])].append(base if k == 0 else int(running[k - 1]))
        for key, total in _sums(d, p, delta).items():
            self._add_bytes(key, total)
        for f in fails.tolist():
            out.append(self._failure(nb.event(int(rows[f])), fail_at[f][0] if fail_at[f] else None))
        return out

    def _settle_live(self, live: LiveColumns, held: np.ndarray, keys: np.ndarray, order: np.ndarray,
                     start: np.ndarray, is_alloc: np.ndarray, size: np.ndarray, pid: np.ndarray,
                     ts: np.ndarray) -> None:  # fmt: skip
        """The live allocations after the block: an address whose last row is an allocation is live (with that
        allocation, made live after those before the block), the others are not (`held`: the rows of `live`
        the block's addresses were; `keys`: the block's (dev, va) in `order`)."""
        last: np.ndarray = np.ones(len(order), dtype=bool)
        last[:-1] = start[1:]
        at = np.flatnonzero(last & is_alloc[order])
        r = order[at]
        self._cols = live.without(held).then(keys[0, at], keys[1, at], size[r], pid[r], ts[r])

    def _alloc(self, ev: NpuEvent) -> None:
        self._alloc_at(_dev(ev), _int(ev.args.get("va")) or 0, _int(ev.args.get("size")) or 0, ev.pid, ev.ts_ns)

    def _alloc_at(self, dev: int, va: int, size: int, pid: int, ts: int) -> None:
        if (dev, va) in self.live:
            self.counts["double_allocs"] += 1
            self._release(dev, va, ts)
        self.live[(dev, va)] = (size, pid, ts)
        self._account(dev, pid, size, ts)
        self.counts["allocs"] += 1

    def _free(self, ev: NpuEvent) -> None:
        self._free_at(_dev(ev), _int(ev.args.get("va")) or 0, ev.ts_ns)

    def _free_at(self, dev: int, va: int, ts: int) -> None:
        if (dev, va) not in self.live:
            self.counts["unknown_frees"] += 1
            return
        self._release(dev, va, ts)
        self.counts["frees"] += 1

    def _release(self, dev: int, va: int, ts: int) -> None:
        size, pid, _ = self.live.pop((dev, va))
        self._account(dev, pid, -size, ts)

    def _account(self, dev: int, pid: int, delta: int, ts: int) -> None:
        if self.watch is not None:
            self.watch.changes((ts,), (dev,), (pid,), (delta,))
        self.dev_bytes[dev] = self.dev_bytes.get(dev, 0) + delta
        self.peak[dev] = max(self.peak.get(dev, 0), self.dev_bytes[dev])
        self._add_bytes((dev, pid), delta)

    def _add_bytes(self, key: DevPid, delta: int) -> None:
        """A thread's live bytes on a device change; a thread holding none is forgotten (every view shows only
        those that hold some), so the map stays as small as the threads holding memory, whatever the churn."""
        n = self.pid_bytes.get(key, 0) + delta
        if n:
            self.pid_bytes[key] = n
        else:
            self.pid_bytes.pop(key, None)

    def _failure(self, ev: NpuEvent, live: Optional[int] = None) -> Finding:
        self.counts["failures"] += 1
        size, free, largest = (_int(ev.args.get(k)) for k in ("size", "free_bytes", "largest_free"))
        frag = None if free is None or largest is None or size is None else free >= size > largest
        details = {
            "size": size, "free_bytes": free, "largest_free": largest, "fragmentation": frag,
            "ret": _int(ev.args.get("ret")), "pid": ev.pid,
            "live_bytes": self.dev_bytes.get(_dev(ev), 0) if live is None else live,
        }  # fmt: skip
        return Finding("alloc_fail", ev.dev, ev.op, ev.ts_ns, details)

    def advance(self, now: int) -> List[Finding]:
        return []

    def devices(self) -> List[Tuple[int, int, int]]:
        """(device, live bytes, peak bytes) of every device seen, by device."""
        return [(dev, live, self.peak.get(dev, 0)) for dev, live in sorted(self.dev_bytes.items())]

    def process_bytes(self, dev: Optional[int] = None) -> Dict[DevPid, int]:
        """Live bytes per (device, process) now (one device's, or all), threads added up by `processes`."""
        out: Dict[DevPid, int] = {}
        of = self.processes.of
        for (d, tid), n in self.pid_bytes.items():
            if n and (dev is None or d == dev):
                key = (d, of(tid))
                out[key] = out.get(key, 0) + n
        return out

    def top_processes(self, most: int) -> List[Tuple[int, int, int]]:
        """(device, process, live bytes) of the `most` processes holding the most device memory now."""
        top = sorted(((n, d, p) for (d, p), n in self.process_bytes().items() if n), reverse=True)[:most]
        return [(d, p, n) for n, d, p in top]

    def flush(self) -> List[Finding]:
        if not self.leaks_at_end:
            return []
        groups: Dict[DevPid, List[Tuple[int, int, int]]] = {}
        of = self.processes.of
        for (dev, va), (size, tid, ts) in self.live.items():
            groups.setdefault((dev, of(tid)), []).append((ts, va, size))
        return [_leak(dev, pid, sorted(allocs)) for (dev, pid), allocs in sorted(groups.items())]

    def summary(self) -> Dict[str, Any]:
        devices = [
            {"device": _out_dev(d), "live_bytes": n, "peak_bytes": self.peak.get(d, 0)}
            for d, n in sorted(self.dev_bytes.items())
        ]
        pids = [{"device": _out_dev(d), "pid": p, "live_bytes": n} for (d, p), n in sorted(self.process_bytes().items())
                if n]  # fmt: skip
        loose = self.processes.unattributed(tid for _, tid in self.pid_bytes)
        threads = {} if loose is None else {"unattributed_threads": len(loose), "unattributed": loose[:MAX_LISTED]}
        return {**self.counts, "live_allocations": self.live_count(), "devices": devices, "processes": pids, **threads}


def _leak(dev: int, pid: int, allocs: List[Tuple[int, int, int]]) -> Finding:
    details = {
        "pid": pid, "count": len(allocs), "bytes": sum(size for _, _, size in allocs),
        "vas": [hex(va) for _, va, _ in allocs[:MAX_LEAK_VAS]],
    }  # fmt: skip
    return Finding("leak", _out_dev(dev), None, allocs[0][0], details)


def _sums(dev: np.ndarray, pid: np.ndarray, delta: np.ndarray) -> Dict[Tuple[int, int], int]:
    """The sum of the deltas per (device, pid), for the pairs that have one."""
    out: Dict[Tuple[int, int], int] = {}
    if not len(delta):
        return out
    cols = np.stack([dev, pid])
    order = stable_order(KeyPacking(cols).pack(cols))
    d, p, v = dev[order], pid[order], delta[order]
    starts = np.flatnonzero(np.r_[True, (d[1:] != d[:-1]) | (p[1:] != p[:-1])])
    for device, who, total in zip(d[starts].tolist(), p[starts].tolist(), np.add.reduceat(v, starts).tolist()):
        out[(device, who)] = total
    return out


class LiveColumns:
    """Live allocations as int64 columns, one row each, in the order they were made live: (dev, va) -> (size,
    pid, ts), each (dev, va) once."""

    __slots__ = ("dev", "pid", "size", "ts", "va")

    def __init__(self, dev: np.ndarray, va: np.ndarray, size: np.ndarray, pid: np.ndarray, ts: np.ndarray) -> None:
        self.dev, self.va, self.size, self.pid, self.ts = dev, va, size, pid, ts

    def __len__(self) -> int:
        return len(self.dev)

    @staticmethod
    def of(live: Dict[Tuple[int, int], Tuple[int, int, int]]) -> Optional[LiveColumns]:
        """The map's entries as columns; None when a value does not fit in int64."""
        try:
            keys = np.array(list(live), dtype=np.int64).reshape(-1, 2)
            values = np.array(list(live.values()), dtype=np.int64).reshape(-1, 3)
        except OverflowError:
            return None
        return LiveColumns(keys[:, 0], keys[:, 1], values[:, 0], values[:, 1], values[:, 2])

    def as_map(self) -> Dict[Tuple[int, int], Tuple[int, int, int]]:
        keys = zip(self.dev.tolist(), self.va.tolist())
        return dict(zip(keys, zip(self.size.tolist(), self.pid.tolist(), self.ts.tolist())))

    def among(self, packing: KeyPacking, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Which of a block's addresses (`keys`: their packed (dev, va), ascending, each once) are live: (its
        index in `keys`, its row here) of each, by row."""
        none: np.ndarray = np.zeros(0, dtype=np.int64)
        if not len(self) or not len(keys):
            return none, none
        rows = np.flatnonzero(packing.within(np.stack([self.dev, self.va])))
        if not len(rows):
            return none, none
        packed = packing.pack(np.stack([self.dev[rows], self.va[rows]]))
        at = np.minimum(np.searchsorted(keys, packed), len(keys) - 1)
        hit = keys[at] == packed
        return at[hit], rows[hit]

    def without(self, rows: np.ndarray) -> LiveColumns:
        if not len(rows):
            return self
        keep: np.ndarray = np.ones(len(self), dtype=bool)
        keep[rows] = False
        return LiveColumns(self.dev[keep], self.va[keep], self.size[keep], self.pid[keep], self.ts[keep])

    def then(self, dev: np.ndarray, va: np.ndarray, size: np.ndarray, pid: np.ndarray, ts: np.ndarray) -> LiveColumns:
        """These with the given allocations after them (none of their addresses among these)."""
        if not len(dev):
            return self
        cols = zip((self.dev, self.va, self.size, self.pid, self.ts), (dev, va, size, pid, ts))
        return LiveColumns(*(np.concatenate([a, b.astype(np.int64, copy=False)]) for a, b in cols))


def _dev(ev: NpuEvent) -> int:
    return -1 if ev.dev is None else ev.dev


def _out_dev(dev: int) -> Optional[int]:
    return None if dev < 0 else dev


def _int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, int) else None
