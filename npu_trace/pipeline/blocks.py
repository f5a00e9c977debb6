"""A block: the columnar form of a stretch of the timeline, what the fast analysis reads.

A `Block` holds n items in time order (the ordered merge's order: equal stamps by CPU, then the channels, then
arrival), as columns: `ts`, `cpu`, `pid`, `etype` (the record's event id, or OBJECT for an item that is not a
raw record: a channel's NpuEvent, a Loss) and `ref` (the record's row in its format's `Table`, or the
object's index in `objects`). `tables[etype]` holds that format's records of the block in block order
(`npu_trace.ftrace.columns`). `item(i)` gives item i as the reference pipeline has it (a TraceEvent, an
NpuEvent, a Loss), for the rare items the detectors take one by one.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace.columns import FormatColumns, Table, fixed_parts

OBJECT = -1  # etype of an item that is not a raw record


class Block:
    __slots__ = ("cpu", "etype", "objects", "pid", "ref", "tables", "ts")

    def __init__(self, ts: np.ndarray, cpu: np.ndarray, pid: np.ndarray, etype: np.ndarray, ref: np.ndarray,
                 tables: Dict[int, Table], objects: List[Any]) -> None:  # fmt: skip
        self.ts, self.cpu, self.pid, self.etype, self.ref = ts, cpu, pid, etype, ref
        self.tables = tables
        self.objects = objects

    def __len__(self) -> int:
        return len(self.ts)

    def item(self, i: int) -> Any:
        """Item i as the reference pipeline has it."""
        etype = int(self.etype[i])
        if etype == OBJECT:
            return self.objects[int(self.ref[i])]
        table = self.tables[etype]
        pid, values = table.row_values(int(self.ref[i]))
        return TraceEvent(int(self.ts[i]), int(self.cpu[i]), pid, table.plan.fmt, values)

    def items(self) -> List[Any]:
        return [self.item(i) for i in range(len(self))]


def empty_block() -> Block:
    z = np.zeros(0, dtype=np.int64)
    return Block(z, z.astype(np.int16), z.astype(np.int32), z.astype(np.int32), z, {}, [])


def build_block(
    ts: np.ndarray,
    cpu: np.ndarray,
    etype: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    buf_id: np.ndarray,
    bufs: Sequence[bytes],
    plans: Mapping[int, FormatColumns],
    objects: Sequence[Tuple[int, Any]] = (),
) -> Block:
    """A block of records already in time order (the columns of the merge's output) and `objects` as
    (their index in the block, the object), in that order. `buf_id[i]` names the buffer of `bufs` that holds
    record i at `offset[i]`."""
    if objects:
        return _with_objects(ts, cpu, etype, offset, length, buf_id, bufs, plans, list(objects))
    n = len(ts)
    ref = np.zeros(n, dtype=np.int64)
    pid = np.full(n, -1, dtype=np.int32)
    tables: Dict[int, Table] = {}
    for e in np.unique(etype).tolist():
        rows = np.flatnonzero(etype == e)
        table = _table(plans[e], rows, offset, length, buf_id, bufs)
        tables[e] = table
        ref[rows] = np.arange(len(rows))
        pid[rows] = table.cols["common_pid"]
    return Block(ts, cpu.astype(np.int16), pid, etype.astype(np.int32), ref, tables, [])


def _table(plan: FormatColumns, rows: np.ndarray, offset: np.ndarray, length: np.ndarray, buf_id: np.ndarray,
           bufs: Sequence[bytes]) -> Table:  # fmt: skip
    offs, ids = offset[rows], buf_id[rows]
    parts = [fixed_parts(plan, bufs[b], offs[ids == b]) for b in np.unique(ids).tolist()]
    if len(parts) == 1:
        cols = parts[0]
    else:  # rows of several buffers: put them back in block order
        order = np.argsort(ids, kind="stable")
        cols = np.empty(len(rows), dtype=plan.dtype)
        cols[order] = np.concatenate(parts)
    source = [bufs[b] for b in ids.tolist()]
    return Table(plan, cols, source, offs, length[rows])


def _with_objects(ts: np.ndarray, cpu: np.ndarray, etype: np.ndarray, offset: np.ndarray, length: np.ndarray,
                  buf_id: np.ndarray, bufs: Sequence[bytes], plans: Mapping[int, FormatColumns],
                  placed: List[Tuple[int, Any]]) -> Block:  # fmt: skip
    records = build_block(ts, cpu, etype, offset, length, buf_id, bufs, plans)
    objects = [o for _, o in placed]
    stamps = np.array([_stamp(o) for o in objects], dtype=np.int64)
    at = np.array([i for i, _ in placed], dtype=np.int64)
    n = len(ts) + len(objects)
    is_obj = np.zeros(n, dtype=bool)
    is_obj[at] = True
    out_ts = np.empty(n, dtype=np.int64)
    out_ts[~is_obj], out_ts[at] = ts, stamps
    cpu_o = np.array([int(getattr(o, "cpu", -1)) for o in objects], dtype=np.int16)
    pid_o = np.array([int(getattr(o, "pid", -1)) if not isinstance(o, Loss) else -1 for o in objects], np.int32)
    return Block(out_ts, _mix(records.cpu, cpu_o, is_obj, at), _mix(records.pid, pid_o, is_obj, at),
                 _mix(records.etype, np.full(len(objects), OBJECT, np.int32), is_obj, at),
                 _mix(records.ref, np.arange(len(objects)), is_obj, at), records.tables, objects)  # fmt: skip


def _mix(rec: np.ndarray, obj: np.ndarray, is_obj: np.ndarray, at: np.ndarray) -> np.ndarray:
    out = np.empty(len(is_obj), dtype=rec.dtype)
    out[~is_obj] = rec
    out[at] = obj
    return out


def _stamp(item: Any) -> int:
    return int(item.ts_ns)


def records_of(items: Sequence[Any], plans: Mapping[int, FormatColumns], encode: Optional[Any] = None,
               objects_too: Sequence[int] = ()) -> Block:  # fmt: skip
    """A block from items in time order (TraceEvents, NpuEvents, Losses), the raw records re-encoded
    (`npu_trace.ftrace.encode.RecordEncoder`): for tests, and for sources that hold decoded records.
    `objects_too`: indexes of TraceEvents kept as objects (as BPF hands its decoded records over)."""
    from npu_trace.ftrace.encode import RecordEncoder

    enc = encode or RecordEncoder()
    payloads: List[bytes] = []
    rec_ts, rec_cpu, rec_type, objects = [], [], [], []
    keep = set(objects_too)
    for i, item in enumerate(items):
        if isinstance(item, TraceEvent) and i not in keep:
            payloads.append(enc.payload(item.fmt, item.pid, item.values))
            rec_ts.append(item.ts_ns)
            rec_cpu.append(item.cpu)
            rec_type.append(item.fmt.id)
        else:
            objects.append((i, item))
    buf = b"".join(payloads)
    offsets = np.cumsum([0, *map(len, payloads)])[:-1].astype(np.int64)
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    n = len(payloads)
    return build_block(np.array(rec_ts, np.int64), np.array(rec_cpu, np.int16), np.array(rec_type, np.int32),
                       offsets, lengths, np.zeros(n, np.int64), [buf], plans, objects)  # fmt: skip
