"""One event format's records as numpy columns: the fast path's view of what `RecordDecoder` decodes one by one.

`FormatColumns(fmt)` plans a numpy structured dtype over the fixed part of the format's records (common_pid,
every integer field, `char[N]` as bytes, integer arrays, `__data_loc`/`__rel_loc` words, struct-typed fields
expanded member by member when the profile gives their layout: "inst.devid"). `Table` holds the records of
one format in one block: their fixed parts as a structured array (`cols`), and where each whole record lies
(buffer, offset, length) so that a single row can be decoded exactly as `RecordDecoder` does (`row_values`:
strings, dynamic arrays, struct dicts), for the rare rows the detectors need as objects. `values(rows)` gives
the field values of many rows, one list per field, as `RecordDecoder` gives them (integers and fixed strings
and arrays from the columns, the rest row by row): what text and NDJSON are made from.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.ftrace.decode import RecordDecoder, StructLayouts, c_string, make_decoder
from npu_trace.ftrace.format import ARRAY, BYTES, CHAR_ARRAY, DATA_LOC, INT, REL_LOC, TAIL, EventFormat, Field
from npu_trace.ftrace.walk import gather

_INT = {(1, False): "u1", (1, True): "i1", (2, False): "u2", (2, True): "i2", (4, False): "u4", (4, True): "i4",
        (8, False): "u8", (8, True): "i8"}  # fmt: skip
_STRUCT_CODES = {"B": "u1", "b": "i1", "H": "u2", "h": "i2", "I": "u4", "i": "i4", "Q": "u8", "q": "i8"}


class FormatColumns:
    """The column plan of one format (`fields`: the names `Table.column` answers)."""

    def __init__(self, fmt: EventFormat, byteorder: str = sys.byteorder, layouts: Optional[StructLayouts] = None):
        self.fmt = fmt
        self.end = "<" if byteorder == "little" else ">"
        self.decoder: RecordDecoder = make_decoder(fmt, byteorder, layouts)
        names: List[str] = []
        formats: List[Any] = []
        offsets: List[int] = []
        pid = fmt.field("common_pid")
        self._add(names, formats, offsets, "common_pid", _INT[(pid.size, True)], pid.offset)
        for field in fmt.fields:
            for name, code, offset in self._plan(field, layouts or {}):
                self._add(names, formats, offsets, name, code, offset)
        fixed = [f.offset + f.size for f in (*fmt.common, *fmt.fields) if f.kind != TAIL]
        self.size = max(fixed, default=8)
        self.dtype: np.dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": self.size})
        self.fields = tuple(names)

    def _add(self, names: List[str], formats: List[Any], offsets: List[int], name: str, code: Any, off: int) -> None:
        names.append(name)
        formats.append(code if isinstance(code, tuple) else self.end + code if code[0] in "iu" else code)
        offsets.append(off)

    def _plan(self, field: Field, layouts: StructLayouts) -> List[Tuple[str, Any, int]]:
        kind = field.kind
        if kind == INT and (field.size, field.signed) in _INT:
            return [(field.name, _INT[(field.size, field.signed)], field.offset)]
        if kind == CHAR_ARRAY:
            return [(field.name, f"S{field.size}", field.offset)]
        if kind == ARRAY and (field.elem_size, field.signed) in _INT:
            return [(field.name, (self.end + _INT[(field.elem_size, field.signed)], (field.count,)), field.offset)]
        if kind in (DATA_LOC, REL_LOC):
            return [(field.name, "u4", field.offset)]
        if kind == BYTES and field.type in layouts:
            return self._members(field, layouts[field.type])
        return []  # a tail or an unknown layout: only row_values reads it

    def _members(self, field: Field, layout: Sequence[Tuple[str, str]]) -> List[Tuple[str, Any, int]]:
        out, pos = [], field.offset
        for member, code in layout:
            size = int(np.dtype(_STRUCT_CODES[code]).itemsize)
            if pos + size > field.offset + field.size:
                break  # a layout longer than the field: the record decoder pads with zeros; columns stop here
            out.append((f"{field.name}.{member}", _STRUCT_CODES[code], pos))
            pos += size
        return out


class Table:
    """The records of one format in one block, in block order."""

    __slots__ = ("buf", "bufs", "cols", "length", "offset", "plan")

    def __init__(self, plan: FormatColumns, cols: np.ndarray, bufs: List[Any], buf: np.ndarray, offset: np.ndarray,
                 length: np.ndarray) -> None:  # fmt: skip
        self.plan = plan
        self.cols = cols  # structured array over the fixed part of each record
        self.bufs = bufs  # the buffers holding the whole records
        self.buf = buf  # per row: which of `bufs` holds it
        self.offset = offset  # per row: where its payload starts in that buffer
        self.length = length  # per row: its payload length

    def __len__(self) -> int:
        return len(self.cols)

    def column(self, name: str) -> np.ndarray:
        return self.cols[name]

    def row_values(self, i: int) -> Tuple[int, Tuple[Any, ...]]:
        """(pid, values) of row i, exactly as the record decoder gives them. A buffer that is a memoryview (a
        recorded chunk the export's drawing reads where it was shipped, npu_trace.export.ship) is decoded from
        a copy of the record alone: the decoders take bytes (offsets in a record are from its start)."""
        buf, start, length = self.bufs[int(self.buf[i])], int(self.offset[i]), int(self.length[i])
        if buf.__class__ is memoryview:
            return self.plan.decoder.decode(bytes(buf[start : start + length]), 0, length)
        return self.plan.decoder.decode(buf, start, length)

    def values(self, rows: np.ndarray, arrays: bool = False) -> List[Any]:
        """The field values of these rows (positions in the table), one list per field of the format, each value
        as `row_values` gives it (`arrays`: an integer field's as its numpy column instead)."""
        decoded: Optional[List[Tuple[Any, ...]]] = None
        out: List[Any] = []
        for k, field in enumerate(self.plan.fmt.fields):
            if arrays and field.kind == INT and field.name in self.plan.fields:
                out.append(self.cols[field.name][rows])
                continue
            column = self._column_values(field, rows)
            if column is None:
                if decoded is None:
                    decoded = [self.row_values(r)[1] for r in rows.tolist()]
                column = [values[k] for values in decoded]
            out.append(column)
        return out

    def _column_values(self, field: Field, rows: np.ndarray) -> Optional[List[Any]]:
        """One field's values from its column (None: the field is decoded row by row)."""
        if field.name not in self.plan.fields:
            return None
        if field.kind in (DATA_LOC, REL_LOC):
            return self._strings(field, rows) if is_text(field) else None
        if field.kind not in (INT, CHAR_ARRAY, ARRAY):
            return None
        values: List[Any] = self.cols[field.name][rows].tolist()
        if field.kind != CHAR_ARRAY:
            return values
        text = {raw: c_string(raw) for raw in set(values)}  # a name repeats: decoded once
        return [text[raw] for raw in values]

    def _strings(self, field: Field, rows: np.ndarray) -> List[str]:
        """A `__data_loc char[]` (or __rel_loc) field's strings: its locator from the column, the bytes it
        names (inside the record: the walk checked it) sliced from the record's buffer."""
        loc = self.cols[field.name][rows].astype(np.int64)
        start = self.offset[rows] + (loc & 0xFFFF) + (field.offset + field.size if field.kind == REL_LOC else 0)
        end = start + (loc >> 16)
        bufs, which = self.bufs, self.buf[rows].tolist()
        raws = [bytes(bufs[b][s:e]) for b, s, e in zip(which, start.tolist(), end.tolist())]
        text = {raw: c_string(raw) for raw in set(raws)}  # a name repeats: decoded once
        return [text[raw] for raw in raws]


def is_text(field: Field) -> bool:
    """A dynamic field of characters (a string)."""
    return field.type.replace("const ", "").strip() in ("char", "unsigned char", "signed char")


def fixed_parts(plan: FormatColumns, buf: Any, offsets: np.ndarray) -> np.ndarray:
    """The fixed part of each record (at `offsets` in `buf`) as a structured array (one copy of those bytes,
    gathered by the page walker's `gather`)."""
    if not len(offsets):
        return np.zeros(0, dtype=plan.dtype)
    return np.frombuffer(gather(buf, offsets, plan.size), dtype=plan.dtype)


def plans(formats: Sequence[EventFormat], byteorder: str = sys.byteorder,
          layouts: Optional[StructLayouts] = None) -> Dict[int, FormatColumns]:  # fmt: skip
    return {fmt.id: FormatColumns(fmt, byteorder, layouts) for fmt in formats}
