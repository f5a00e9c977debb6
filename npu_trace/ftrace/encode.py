"""Encoding ftrace ring-buffer pages: the inverse of the walk and `npu_trace.ftrace.decode`, for test data,
benchmarks and the records of an ftrace text import (`npu_trace.sources.ftrace_text`).

Pure: (timestamp, pid, format, values) rows in, page bytes out, laid out as the kernel writes them
(kernel/trace/ring_buffer.c): a page header (u64 timestamp of the page, local_t commit = bytes of data, with
the missed-events flags), then records, each behind a u32 of type_len (5 bits) and time delta (27 bits): a
data record of type_len * 4 bytes (1..28), or type_len 0 with the length in the next u32 for longer ones; a
time extend record (type 30) before a record whose delta does not fit in 27 bits. The page timestamp is its
first record's, so that record's delta is 0.

Values follow the format's own fields (as `TraceEvent.values`): integers, `char[N]` and `__data_loc char[]`
strings, integer arrays (lists), struct-typed fields as raw bytes or their hex text, a flexible last field
(ftrace:print's `char buf[]`) as its text or bytes. A row may carry a fifth item, (common_flags,
common_preempt_count).
"""

from __future__ import annotations

import struct
import sys
from typing import Any, Iterable, List, Optional, Tuple

from npu_trace.ftrace.format import (
    ARRAY,
    BYTES,
    CHAR_ARRAY,
    DATA_LOC,
    INT,
    REL_LOC,
    TAIL,
    EventFormat,
    Field,
    PageHeader,
)
from npu_trace.ftrace.framing import MISSED_EVENTS, MISSED_STORED, TS_DELTA_MASK, TS_SHIFT, TYPE_TIME_EXTEND

_INT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
MAX_INLINE = 28 * 4  # the longest payload whose length fits in type_len

Row = Tuple[Any, ...]  # (ts_ns, pid, format, values) or (ts_ns, pid, format, values, (flags, preempt_count))


class RecordEncoder:
    """One event's payload bytes (common fields, then its own; dynamic data after the fixed part)."""

    def __init__(self, byteorder: str = sys.byteorder) -> None:
        self.end = "<" if byteorder == "little" else ">"

    def payload(self, fmt: EventFormat, pid: int, values: Tuple[Any, ...], common: Tuple[int, int] = (0, 0)) -> bytes:
        fixed = max((f.offset + f.size for f in (*fmt.common, *fmt.fields)), default=8)
        rec = bytearray(fixed)
        struct.pack_into(self.end + "HBB", rec, 0, fmt.id, common[0] & 0xFF, common[1] & 0xFF)
        pid_field = fmt.field("common_pid")
        struct.pack_into(self.end + "i", rec, pid_field.offset, pid)
        for field, value in zip(fmt.fields, values):
            if field.kind == TAIL:  # the last field, the rest of the record
                rec += (value.encode() + b"\0") if isinstance(value, str) else bytes(value)
            else:
                self._put(rec, field, value)
        rec += bytes(-len(rec) % 4)
        return bytes(rec)

    def _put(self, rec: bytearray, field: Field, value: Any) -> None:
        kind = field.kind
        if kind == INT:
            code = _INT_CODES[field.size]
            struct.pack_into(self.end + (code.lower() if field.signed else code), rec, field.offset, int(value))
        elif kind == CHAR_ARRAY:
            raw = str(value).encode()[: field.size - 1]
            rec[field.offset : field.offset + field.size] = raw.ljust(field.size, b"\0")
        elif kind == ARRAY:
            code = _INT_CODES[field.elem_size]
            code = code.lower() if field.signed else code
            struct.pack_into(self.end + f"{field.count}{code}", rec, field.offset, *list(value)[: field.count])
        elif kind in (DATA_LOC, REL_LOC):
            self._dynamic(rec, field, value)
        elif kind == BYTES:
            raw = bytes.fromhex(value) if isinstance(value, str) else bytes(value)
            rec[field.offset : field.offset + field.size] = raw[: field.size].ljust(field.size, b"\0")
        else:
            raise ValueError(f"field {field.name!r}: cannot encode a {kind} field")

    def _dynamic(self, rec: bytearray, field: Field, value: Any) -> None:
        data = str(value).encode() + b"\0" if isinstance(value, str) else bytes(value)
        offset = len(rec)
        rec += data
        where = offset - (field.offset + field.size) if field.kind == REL_LOC else offset
        struct.pack_into(self.end + "I", rec, field.offset, len(data) << 16 | where)


class PageEncoder:
    """Rows of one CPU, in time order -> that CPU's pages (`header` says the layout)."""

    def __init__(self, header: PageHeader, byteorder: str = sys.byteorder) -> None:
        self.header = header
        self.byteorder = byteorder
        self.end = "<" if byteorder == "little" else ">"
        self.records = RecordEncoder(byteorder)

    def pages(self, rows: Iterable[Row], missed: Optional[int] = None) -> List[bytes]:
        """Every row in as few pages as fit; `missed`: the first page says that many events were lost before
        it (0: lost, count unknown)."""
        out: List[bytes] = []
        body, page_ts, last = bytearray(), 0, 0
        for row in rows:
            ts, pid, fmt, values = row[:4]
            payload = self.records.payload(fmt, pid, values, *row[4:])
            if not body:
                page_ts = last = ts
            record = self._record(payload, ts - last)
            if len(body) + len(record) > self.header.data_size and body:
                out.append(self._page(page_ts, body, missed if not out else None))
                body, page_ts, last = bytearray(), ts, ts
                record = self._record(payload, 0)
            if len(record) > self.header.data_size:
                raise ValueError(f"a record of {len(record)} bytes does not fit in a page")
            body += record
            last = ts
        if body:
            out.append(self._page(page_ts, body, missed if not out else None))
        return out

    def _record(self, payload: bytes, delta: int) -> bytes:
        if delta < 0:
            raise ValueError("rows of one CPU must be in time order")
        head = b""
        if delta > TS_DELTA_MASK:  # a time extend carries the delta; the record's own is 0
            head = struct.pack(self.end + "II", TYPE_TIME_EXTEND | (delta & TS_DELTA_MASK) << 5, delta >> TS_SHIFT)
            delta = 0
        if len(payload) <= MAX_INLINE:
            return head + struct.pack(self.end + "I", len(payload) // 4 | delta << 5) + payload
        return head + struct.pack(self.end + "II", delta << 5, len(payload) + 4) + payload

    def _page(self, ts: int, body: bytes, missed: Optional[int]) -> bytes:
        h = self.header
        page = bytearray(h.page_size)
        commit = len(body)
        if missed is not None:
            commit |= MISSED_EVENTS | (MISSED_STORED if missed else 0)
            if missed:
                body = bytes(body) + missed.to_bytes(h.commit_size, self.byteorder)  # type: ignore[arg-type]
        struct.pack_into(self.end + "Q", page, h.ts_offset, ts)
        struct.pack_into(self.end + ("Q" if h.commit_size == 8 else "I"), page, h.commit_offset, commit)
        page[h.data_offset : h.data_offset + len(body)] = body
        return bytes(page)
