"""A block: the columnar form of a stretch of the timeline, what the fast analysis reads.

A `Block` holds n items in time order (the ordered merge's order: equal stamps by CPU, then the channels, then
arrival), as columns: `ts`, `cpu`, `pid`, `etype` (the record's event id, or OBJECT for an item that is not a
raw record: a channel's NpuEvent, a Loss) and `ref` (the record's row in its format's `Table`, or the
object's index in `objects`). `tables[etype]` holds that format's records of the block in block order
(`npu_trace.ftrace.columns`), or, for an event id no format describes (a consumer that shows every record
walks them too), a `RawTable` of their bytes. `item(i)` gives item i as an object (a TraceEvent, an NpuEvent,
a Loss, a RawRecord), for the rare items the detectors take one by one.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from npu_trace.events import Loss, RawRecord, TraceEvent
from npu_trace.ftrace.columns import FormatColumns, Table, fixed_parts
from npu_trace.ftrace.walk import gather_rows
from npu_trace.pipeline.order import stable_order

OBJECT = -1  # etype of an item that is not a raw record


class Block:
    __slots__ = ("cpu", "etype", "groups", "objects", "pid", "ref", "tables", "ts")

    def __init__(self, ts: np.ndarray, cpu: np.ndarray, pid: np.ndarray, etype: np.ndarray, ref: np.ndarray,
                 tables: Dict[int, Table], objects: List[Any],
                 groups: Optional[List[Tuple[int, np.ndarray]]] = None) -> None:  # fmt: skip
        self.ts, self.cpu, self.pid, self.etype, self.ref = ts, cpu, pid, etype, ref
        self.tables = tables
        self.objects = objects
        self.groups = groups  # (etype, its rows in order) for each etype present, when the builder knows them

    def __len__(self) -> int:
        return len(self.ts)

    def item(self, i: int) -> Any:
        """Item i as an object (a TraceEvent, an NpuEvent, a Loss, a RawRecord)."""
        etype = int(self.etype[i])
        if etype == OBJECT:
            return self.objects[int(self.ref[i])]
        table = self.tables[etype]
        if isinstance(table, RawTable):
            payload = table.payload(int(self.ref[i]))
            return RawRecord(int(self.ts[i]), int(self.cpu[i]), int(self.pid[i]), etype, payload)
        pid, values = table.row_values(int(self.ref[i]))
        return TraceEvent(int(self.ts[i]), int(self.cpu[i]), pid, table.plan.fmt, values)

    def items(self) -> List[Any]:
        return [self.item(i) for i in range(len(self))]

    def select(self, rows: np.ndarray) -> Block:
        """The block of these rows (positions, ascending): the same tables and objects, fewer rows."""
        return Block(self.ts[rows], self.cpu[rows], self.pid[rows], self.etype[rows], self.ref[rows], self.tables,
                     self.objects)  # fmt: skip


class RawTable:
    """The records of one event id no format describes, in block order: where each lies (as `Table`), its
    bytes (`payload`) and its pid (the payload's bytes 4..8 in the records' byte order, -1 when shorter)."""

    __slots__ = ("buf", "bufs", "length", "offset", "pids")
    plan = None

    def __init__(self, bufs: List[Any], buf: np.ndarray, offset: np.ndarray, length: np.ndarray,
                 byteorder: str) -> None:  # fmt: skip
        self.bufs, self.buf, self.offset, self.length = bufs, buf, offset, length
        self.pids = np.array([int.from_bytes(p[4:8], byteorder, signed=True) if len(p) >= 8 else -1  # type: ignore[arg-type]
                              for p in map(self.payload, range(len(offset)))], dtype=np.int32)  # fmt: skip

    def __len__(self) -> int:
        return len(self.offset)

    def payload(self, i: int) -> bytes:
        start = int(self.offset[i])
        return bytes(memoryview(self.bufs[int(self.buf[i])])[start : start + int(self.length[i])])


def empty_block() -> Block:
    z: np.ndarray = np.zeros(0, dtype=np.int64)
    return Block(z, z.astype(np.int16), z.astype(np.int32), z.astype(np.int32), z, {}, [])


def objects_block(items: Sequence[Any]) -> Block:
    """A block of items that are objects (TraceEvents decoded elsewhere, NpuEvents, Losses), in their order."""
    n = len(items)
    ts = np.array([int(item.ts_ns) for item in items], dtype=np.int64)
    cpu = np.array([int(getattr(item, "cpu", -1)) for item in items], dtype=np.int16)
    pid = np.array([-1 if isinstance(item, Loss) else int(getattr(item, "pid", -1)) for item in items], dtype=np.int32)
    every = np.arange(n, dtype=np.int64)
    return Block(ts, cpu, pid, np.full(n, OBJECT, dtype=np.int32), every, {}, list(items), [(OBJECT, every)])


def build_block(
    ts: np.ndarray,
    cpu: np.ndarray,
    etype: np.ndarray,
    ref: np.ndarray,
    length: np.ndarray,
    buf: np.ndarray,
    bufs: Sequence[Any],
    plans: Mapping[int, FormatColumns],
    objects: Sequence[Any] = (),
    byteorder: str = sys.byteorder,
) -> Block:
    """A block of items already in time order (the merge's output), as columns: for a record, `ref` is where
    its payload starts in `bufs[buf]` and `length` its size; for an object (etype OBJECT), `ref` is its index
    in `objects` (its cpu column is the object's own). A record of an id `plans` lacks is a raw row."""
    n = len(ts)
    etype = etype.astype(np.int32, copy=False)
    out_ref = np.array(ref, dtype=np.int64)
    pid: np.ndarray = np.full(n, -1, dtype=np.int32)
    tables: Dict[int, Any] = {}
    if n and int(etype[0]) in plans and (etype == etype[0]).all():  # the common live case: one format, no object
        e = int(etype[0])
        tables[e] = table = _table(plans[e], out_ref, length, buf, bufs)
        every = np.arange(n, dtype=np.int64)
        return Block(ts, cpu.astype(np.int16, copy=False), table.cols["common_pid"].astype(np.int32), etype, every,
                     tables, [], [(e, every)])  # fmt: skip
    order = stable_order(etype)
    sorted_types = etype[order]
    edges = np.flatnonzero(np.diff(sorted_types)) + 1
    groups = [(int(etype[rows[0]]), rows) for rows in np.split(order, edges) if len(rows)]
    for e, rows in groups:
        if e == OBJECT:
            for r in rows.tolist():
                obj = objects[int(out_ref[r])]
                pid[r] = -1 if isinstance(obj, Loss) else int(getattr(obj, "pid", -1))
            continue
        if e in plans:
            table = tables[e] = _table(plans[e], out_ref[rows], length[rows], buf[rows], bufs)
            pid[rows] = table.cols["common_pid"]
        else:
            raw = tables[e] = _raw_table(out_ref[rows], length[rows], buf[rows], bufs, byteorder)
            pid[rows] = raw.pids
        out_ref[rows] = np.arange(len(rows))
    return Block(ts, cpu.astype(np.int16, copy=False), pid, etype, out_ref, tables, list(objects), groups)


def _table(plan: FormatColumns, offset: np.ndarray, length: np.ndarray, buf: np.ndarray, bufs: Sequence[Any]) -> Table:
    """One format's records (in block order) as a Table: their fixed parts gathered in one pass over the
    buffers they lie in."""
    if len(bufs) == 1 or not len(offset):
        cols = fixed_parts(plan, bufs[0], offset) if len(bufs) else np.zeros(0, dtype=plan.dtype)
        return Table(plan, cols, list(bufs[:1]), np.zeros(len(offset), np.int32), offset, length)
    cols = np.frombuffer(gather_rows(bufs, buf, offset, plan.size), dtype=plan.dtype)
    return Table(plan, cols, list(bufs), buf.astype(np.int32, copy=False), offset, length)


def _raw_table(offset: np.ndarray, length: np.ndarray, buf: np.ndarray, bufs: Sequence[Any],
               byteorder: str) -> RawTable:  # fmt: skip
    which: np.ndarray = buf.astype(np.int32, copy=False) if len(bufs) > 1 else np.zeros(len(offset), np.int32)
    return RawTable(list(bufs), which, offset, length, byteorder)


def records_of(items: Sequence[Any], plans: Mapping[int, FormatColumns], encode: Optional[Any] = None,
               objects_too: Sequence[int] = ()) -> Block:  # fmt: skip
    """A block from items in time order (TraceEvents, NpuEvents, Losses), the raw records re-encoded
    (`npu_trace.ftrace.encode.RecordEncoder`): for tests, and for sources that hold decoded records.
    `objects_too`: indexes of TraceEvents kept as objects (as BPF hands its decoded records over)."""
    from npu_trace.ftrace.encode import RecordEncoder

    enc = encode or RecordEncoder()
    payloads: List[bytes] = []
    rec_at: List[int] = []
    rec_type: List[int] = []
    objects: List[Tuple[int, Any]] = []
    keep = set(objects_too)
    for i, item in enumerate(items):
        if isinstance(item, TraceEvent) and i not in keep:
            payloads.append(enc.payload(item.fmt, item.pid, item.values))
            rec_at.append(i)
            rec_type.append(item.fmt.id)
        else:
            objects.append((i, item))
    buf = b"".join(payloads)
    n = len(items)
    ts = np.array([int(item.ts_ns) for item in items], dtype=np.int64)
    cpu = np.array([int(getattr(item, "cpu", -1)) for item in items], dtype=np.int16)
    etype: np.ndarray = np.full(n, OBJECT, dtype=np.int32)
    ref: np.ndarray = np.zeros(n, dtype=np.int64)
    length: np.ndarray = np.zeros(n, dtype=np.int64)
    at = np.array(rec_at, dtype=np.int64)
    etype[at] = rec_type
    ref[at] = np.cumsum([0, *map(len, payloads)])[:-1]
    length[at] = [len(p) for p in payloads]
    obj_at = np.array([i for i, _ in objects], dtype=np.int64)
    ref[obj_at] = np.arange(len(objects))
    return build_block(ts, cpu, etype, ref, length, np.zeros(n, np.int32), [buf], plans, [o for _, o in objects])
