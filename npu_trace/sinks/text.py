"""Text and NDJSON of the timeline's blocks: one line per record, made a format's rows at a time.

`StreamPrinter.write_block(block)` writes a block's rows in their order. A trace record's line is its format's
line (`FormatLines`): literal pieces (the field names; a field, a CPU and task, a second that every row of the
batch shares, written once) and the columns of its values, taken from the block (`Table.values`). The compiled
assembly (`_lines.c`: `render` a format's rows, `interleave` the formats in the block's order) writes them as
bytes; where it was not built, one %-formatting per row makes the same text (`IMPLEMENTATION` says which).
An event of the ftrace system's own (print, bprint, stacks, function graph) is shown by its special formatter
where one is given (`kernel`: `formatter(fmt)` returning an object whose `rows(columns)` gives each row's text,
None for a row it cannot make); an event no format describes as its bytes, as `trace-cmd report` shows an
unknown event ("[UNKNOWN TYPE n] 0a 1b ..."). A row that cannot be formatted is shown by its raw fields and
counted (`unformatted`), never dropped: every row of a block is one line. The other channels' events and the
losses are objects, shown one by one.

Untrusted strings (task names, kernel strings) are escaped, never interpreted: control characters and ANSI
escapes appear as \\x.. (text) or as JSON escapes (NDJSON).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, TextIO, Tuple, Union, cast

import numpy as np

from npu_trace.events import Loss, NpuEvent, RawRecord, TraceEvent
from npu_trace.ftrace.format import INT, EventFormat
from npu_trace.ftrace.special import KernelText
from npu_trace.pipeline.batch import Batch
from npu_trace.pipeline.blocks import OBJECT, Block
from npu_trace.pipeline.blocktimeline import BlockTimeline, LiveBlocks
from npu_trace.pipeline.order import stable_order
from npu_trace.pipeline.pump import Sink
from npu_trace.pipeline.scope import RawScope, ScopeFilter

try:
    from npu_trace.sinks import _lines
except ImportError:  # installed where no compiler was: the pure-Python lines, the same text
    _lines = None  # type: ignore[assignment]
IMPLEMENTATION = "c" if _lines is not None else "python"

CommOf = Callable[[int], str]
NS = 1_000_000_000

# Control characters (ANSI escapes, newlines in kernel strings) are shown escaped, never sent to the terminal;
# so are the C1 ones (U+0080-U+009F: U+009B is CSI, the escape sequence's start, to a terminal that reads them)
_CONTROL = {i: f"\\x{i:02x}" for i in [*range(0x20), 0x7F]}
_CONTROL.update({i: f"\\u{i:04x}" for i in range(0x80, 0xA0)})
_CONTROL.update({ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"})


def safe_text(value: str) -> str:
    return value.translate(_CONTROL)


def value_text(value: Any) -> str:
    """A field value as text shows it (strings escaped, arrays [a,b], structs {k=v})."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    return str(value)


def event_dict(ev: TraceEvent, comm: str) -> Dict[str, Any]:
    return {"ts_ns": ev.ts_ns, "cpu": ev.cpu, "pid": ev.pid, "comm": comm, "event": ev.fmt.full_name,
            "fields": ev.fields()}  # fmt: skip


def fields_text(ev: TraceEvent) -> str:
    """The fields of an event whose values are not what its format declares (one decoded elsewhere), one by
    one as far as both go."""
    hexed = ev.fmt.hex_fields
    return " ".join(f"{k}={hex(v) if k in hexed and isinstance(v, int) else value_text(v)}"
                    for k, v in zip(ev.fmt.field_names, ev.values))  # fmt: skip


Column = Union[np.ndarray, List[Any]]  # a field's values: an integer field's as an array, the others' as a list


# ("", literal text) or (code, a column: an int64/uint64 array; a list of str; or for "k" (an int64 array of
# indexes, the list of str they name); "t": int64 nanoseconds shown as seconds, %6d.%09d of their divmod)
Piece = Tuple[str, Any]
Chunk = Tuple[Union[bytes, memoryview], bytes]  # lines' UTF-8 text, each followed by a newline; int64 offsets
SPECS = {"d": "%d", "u": "%d", "x": "%#x", "X": "%#x", "9": "%09d", "6": "%6d", "s": "%s", "k": "%s"}


class FormatLines:
    """One event format's lines, a batch of rows at a time: text `secs.nsecs [cpu] comm-pid system:name:
    field=value ...` (integers as %d, or %#x where the kernel prints them in hex) or the NDJSON of
    `event_dict`. A batch's line is a list of pieces: literal text (what every row shares: the field names, a
    field of one value) and columns (a value per row: numbers, or text made once per distinct value: a (CPU,
    task) pair's, a string field's). The compiled assembly (`_lines.render`) writes them as bytes; without it,
    one %-formatting per row does (`lines`), the same text."""

    def __init__(self, fmt: EventFormat, ndjson: bool) -> None:
        self.fmt, self.ndjson = fmt, ndjson
        self.hexed = fmt.hex_fields
        names = fmt.field_names
        self.json_ok = len(set(names)) == len(names)  # names that repeat make no JSON object: json.dumps it is
        self.name = fmt.full_name

    def lines(self, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray, columns: Sequence[Column],
              comm: Callable[[int], str]) -> List[str]:  # fmt: skip
        """The rows' lines: their stamps, CPUs and pids, one column per field, and each pid's name as shown."""
        pieces = self.pieces(stamps, cpus, pids, columns, comm)
        if pieces is None:
            return self.fallback(stamps, cpus, pids, columns, comm)
        pieces = _seconds_split(pieces)
        template = "".join(SPECS[code] if code else text.replace("%", "%%") for code, text in pieces)
        return list(map(template.__mod__, zip(*(_values(code, col) for code, col in pieces if code))))

    def render(self, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray, columns: Sequence[Column],
               comm: Callable[[int], str], into: Optional[bytearray] = None) -> Chunk:  # fmt: skip
        """The rows' lines as the compiled assembly writes them: (their UTF-8 text, each followed by a newline;
        int64 offsets of where each begins, and the end); `into`: the text written in that buffer (used again,
        grown when short: no new one per batch), a view of it given, and no offsets."""
        pieces = self.pieces(stamps, cpus, pids, columns, comm)
        if pieces is None:
            return as_chunk(self.fallback(stamps, cpus, pids, columns, comm))
        parts = tuple((code.encode(), col) if code else col.encode() for code, col in _merged(pieces))
        assert _lines is not None, "the compiled lines were not built"
        if into is not None:
            size = _lines.render_into(into, parts, len(stamps))  # before any view of it: it may be grown
            return memoryview(into)[:size], b""
        return _lines.render(parts, len(stamps))

    def pieces(self, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray, columns: Sequence[Column],
               comm: Callable[[int], str]) -> Optional[List[Piece]]:  # fmt: skip
        """The line's pieces for these rows; None when a value is not what its field declares (an event decoded
        elsewhere: one by one, `fallback`) or the format's field names repeat (NDJSON: json.dumps)."""
        if self.ndjson and not self.json_ok:
            return None
        pieces = self._head(stamps, cpus, pids, comm)
        for k, field in enumerate(self.fmt.fields):
            name = f"{json.dumps(field.name)}: " if self.ndjson else f"{field.name}="
            pieces.append(("", (", " if k else "") + name if self.ndjson else (" " if k else "") + name))
            piece = self._field(field, columns[k])
            if piece is None:
                return None
            pieces.append(piece)
        pieces.append(("", "}}" if self.ndjson else ""))
        return pieces

    def _field(self, field: Any, column: Column) -> Optional[Piece]:
        """A field's piece: its one value as text, or its column (None: a value of another type)."""
        if field.kind != INT:
            values = column.tolist() if isinstance(column, np.ndarray) else column
            return "s", _shown(values, json.dumps if self.ndjson else value_text)
        code = "d" if self.ndjson or field.name not in self.hexed else "x"
        array = _numbers(column)
        if array is None:
            return None
        if array.dtype == np.uint64:
            code = code.upper() if code == "x" else "u"
        if len(array) and (array == array[0]).all():
            return "", SPECS[code] % int(array[0])
        return code, array

    def _head(self, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray, comm: Callable[[int], str]) -> List[Piece]:
        """The pieces before the fields: (ts, the "cpu, pid, comm" of the row's (CPU, task)), or (seconds, the
        dot, nanoseconds, " [cpu] comm-pid name: ")."""
        if self.ndjson:
            who = _keyed(cpus, pids, lambda c, p: f'"cpu": {c}, "pid": {p}, "comm": {comm(p)}')
            return [("", '{"ts_ns": '), ("d", stamps.astype(np.int64)), ("", ", "), who,
                    ("", ', "event": ' + json.dumps(self.name) + ', "fields": {')]  # fmt: skip
        name = self.name
        who = _keyed(cpus, pids, lambda c, p: f" [{c:03d}] {comm(p)}-{p} {name}: ")
        return [("t", stamps.astype(np.int64, copy=False)), who]

    def fallback(self, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray, columns: Sequence[Column],
                 comm: Callable[[int], str]) -> List[str]:  # fmt: skip
        """Each row alone: its fields one by one where the template does not take them (text), json.dumps
        (NDJSON)."""
        lists = [c.tolist() if isinstance(c, np.ndarray) else c for c in columns]
        out = []
        for i, (ts, cpu, pid) in enumerate(zip(stamps.tolist(), cpus.tolist(), pids.tolist())):
            ev = TraceEvent(ts, cpu, pid, self.fmt, tuple(col[i] for col in lists))
            out.append(self._one(ev, comm(pid)))
        return out

    def _one(self, ev: TraceEvent, shown: str) -> str:
        if self.ndjson:
            return json.dumps(event_dict(ev, json.loads(shown)))
        try:
            fields = " ".join(f"{f.name}=" + ("%#x" if f.name in self.hexed else "%d") % v if f.kind == INT
                              else f"{f.name}={value_text(v)}" for f, v in zip(self.fmt.fields, ev.values))  # fmt: skip
            if len(ev.values) != len(self.fmt.fields):
                raise TypeError("not one value per field")
        except TypeError:
            fields = fields_text(ev)
        secs, nsecs = divmod(ev.ts_ns, NS)
        return f"{secs:6d}.{nsecs:09d} [{ev.cpu:03d}] {shown}-{ev.pid} {self.name}: {fields}"

    def special(self, bodies: Sequence[str], stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray,
                columns: Sequence[Column], comm: Callable[[int], str]) -> List[str]:  # fmt: skip
        """The lines of rows a special formatter made text of: the text in place of the fields (text), beside
        them (NDJSON: "text")."""
        if not self.ndjson:
            name = self.name
            return [f"{s // NS:6d}.{s % NS:09d} [{c:03d}] {comm(p)}-{p} {name}: {safe_text(body)}"
                    for s, c, p, body in zip(stamps.tolist(), cpus.tolist(), pids.tolist(), bodies)]  # fmt: skip
        plain = self.lines(stamps, cpus, pids, columns, comm)
        return [line[:-1] + ', "text": ' + json.dumps(body) + "}" for line, body in zip(plain, bodies)]


def _numbers(column: Column) -> Optional[np.ndarray]:
    """An integer field's values as an int64 array (uint64 when it is one: values past 2**63 - 1); None when one
    is not an integer (a record decoded elsewhere)."""
    if isinstance(column, np.ndarray):
        return column if column.dtype in (np.int64, np.uint64) else column.astype(np.int64)
    if not all(v.__class__ is int for v in column):
        return None
    try:
        return np.array(column, dtype=np.int64)
    except OverflowError:
        try:
            return np.array(column, dtype=np.uint64)
        except OverflowError:
            return None


def _seconds_split(pieces: List[Piece]) -> List[Piece]:
    """A stamp piece ("t": nanoseconds shown as seconds, which the compiled assembly writes itself) as the
    %-formatting's: its seconds (%6d), the dot, its nanoseconds (%09d)."""
    out: List[Piece] = []
    for code, col in pieces:
        if code == "t":
            secs, nsecs = np.divmod(col, NS)
            out += [("6", secs), ("", "."), ("9", nsecs)]
        else:
            out.append((code, col))
    return out


def _merged(pieces: List[Piece]) -> List[Piece]:
    """Adjacent literal pieces as one."""
    out: List[Piece] = []
    for code, value in pieces:
        if not code and out and not out[-1][0]:
            out[-1] = ("", out[-1][1] + value)
        elif code or value:
            out.append((code, value))
    return out


def as_chunk(lines: List[str]) -> Tuple[bytes, bytes]:
    """Lines made as str, as a chunk the compiled interleave reads: (their UTF-8 text, each followed by a
    newline; int64 offsets)."""
    encoded = [line.encode() for line in lines]
    ends = np.cumsum([0, *(len(e) + 1 for e in encoded)], dtype=np.int64)
    return (b"\n".join(encoded) + b"\n") if encoded else b"", ends.tobytes()


def _keyed(cpus: np.ndarray, pids: np.ndarray, text: Callable[[int, int], str]) -> Piece:
    """The text of each row's (CPU, task), made once per distinct pair: a literal when the rows share one."""
    if not len(cpus) or ((cpus == cpus[0]).all() and (pids == pids[0]).all()):
        return "", text(int(cpus[0]), int(pids[0])) if len(cpus) else ""
    who = (cpus.astype(np.int64) << 32) | (pids.astype(np.int64) & 0xFFFFFFFF)
    keys, at = np.unique(who, return_inverse=True)
    return "k", (at.astype(np.int64), [text(k >> 32, _s32(k)) for k in keys.tolist()])


def _values(code: str, column: Any) -> List[Any]:
    """A piece's values per row, for the %-formatting."""
    if code == "k":
        index, text = column
        return list(map(text.__getitem__, index.tolist()))
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def _s32(key: int) -> int:
    """The pid in a (cpu << 32 | pid) key."""
    low = key & 0xFFFFFFFF
    return low - (1 << 32) if low >= 1 << 31 else low


def _shown(values: List[Any], show: Callable[[Any], str]) -> List[str]:
    """Non-integer values as shown; each distinct string once (names repeat)."""
    if values and set(map(type, values)) == {str}:
        text = {v: show(v) for v in set(values)}
        return [text[v] for v in values]
    return [show(v) for v in values]


class StreamPrinter:
    """Writes blocks (and single objects) to a text stream, as text or NDJSON. `kernel`: the tables the ftrace
    system's own events are shown with (see the module docstring; None: by their fields). `records` counts the
    trace records shown, `unformatted` those shown by their raw fields (their text could not be made)."""

    def __init__(self, out: TextIO, fmt: str, comm_of: CommOf, kernel: Optional[KernelText] = None,
                 compiled: Optional[bool] = None) -> None:  # fmt: skip
        """`compiled`: assemble the lines with the compiled `_lines` (default: where it was built)."""
        self.out = out
        self.ndjson = fmt == "ndjson"
        self.comm_of = comm_of
        self.kernel = kernel
        self.compiled = _lines is not None if compiled is None else compiled
        if self.compiled and _lines is None:
            raise ImportError("npu_trace.sinks._lines was not built (no compiler where npu-trace was installed)")
        self.lines = 0
        self.records = 0
        self.unformatted = 0
        self._formats: Dict[int, Tuple[EventFormat, FormatLines]] = {}
        self._comms: Dict[str, str] = {}  # names as shown (escaped, or JSON literals), a few thousand at most
        self._buffer = bytearray()  # a block's lines, when it has one format (see write_block)

    # ---- blocks ------------------------------------------------------------------------------------------
    def write_block(self, block: Block) -> None:
        """The block's lines, in its order, in one write."""
        if not len(block):
            return
        groups = _groups(block)
        if self.compiled:  # a block of one format: its lines made in the printer's buffer, not a new one
            into = self._buffer if len(groups) == 1 else None
            self._write_chunks([self._group(block, etype, rows, True, into) for etype, rows in groups], groups)
            return
        out: np.ndarray = np.empty(len(block), dtype=object)
        for etype, rows in groups:
            out[rows] = self._group(block, etype, rows, False)
        self._write(out.tolist())

    def _group(self, block: Block, etype: int, rows: np.ndarray, chunk: bool,
               into: Optional[bytearray] = None) -> Any:  # fmt: skip
        """One etype's rows of the block: their lines (`chunk`: as the compiled assembly's chunk, `into`: made
        in that buffer when they can be)."""
        if etype != OBJECT:
            return self._records(block, etype, rows, chunk, into)
        lines = self._objects(block, rows)
        return as_chunk(lines) if chunk else lines

    def _write_chunks(self, chunks: List[Chunk], groups: List[Tuple[int, np.ndarray]]) -> None:
        """The chunks' lines in the block's order, in one write."""
        assert _lines is not None
        n = sum(len(rows) for _, rows in groups)
        if len(chunks) == 1:
            data = chunks[0][0]
        else:
            which: np.ndarray = np.empty(n, dtype=np.int32)
            index: np.ndarray = np.empty(n, dtype=np.int64)
            for g, (_, rows) in enumerate(groups):
                which[rows] = g
                index[rows] = np.arange(len(rows))
            texts = cast(Tuple[bytes, ...], tuple(c for c, _ in chunks))  # bytes: `into` is for one format
            data = _lines.interleave(texts, tuple(o for _, o in chunks), which, index)
        try:
            self._emit(data)
        finally:  # the printer's buffer let go of, however the write ended: it may be grown for the next block
            if data.__class__ is memoryview:
                data.release()
        self.lines += n

    def _emit(self, data: Union[bytes, memoryview]) -> None:
        """The lines' bytes out, every one of them: to a file or pipe in a loop of os.write (a buffered stream's
        write interrupted by a signal after a part went out, a Ctrl-C while a reader is slow, loses the rest
        of its buffer: measured, CPython 3.11), to any other stream as text."""
        out = self.out
        fd = _fileno(out) if (getattr(out, "encoding", "") or "").lower().replace("-", "") == "utf8" else None
        if fd is None:
            out.write(str(data, "utf-8"))
            out.flush()
            return
        out.flush()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        finally:
            view.release()

    def _records(self, block: Block, etype: int, rows: np.ndarray, chunk: bool,
                 into: Optional[bytearray] = None) -> Any:  # fmt: skip
        table = block.tables[etype]
        if len(rows) == len(block):  # every row, in order: the block's own columns
            refs, stamps, cpus, pids = block.ref, block.ts, block.cpu, block.pid
        else:
            refs = block.ref[rows]
            stamps, cpus, pids = block.ts[rows], block.cpu[rows], block.pid[rows]
        self.records += len(rows)
        if table.plan is None:  # no format describes the event: its bytes
            self.unformatted += len(rows)
            rows_of = zip(stamps.tolist(), cpus.tolist(), pids.tolist(), refs.tolist())
            lines = [self.raw_line(RawRecord(s, c, p, etype, table.payload(r))) for s, c, p, r in rows_of]
            return as_chunk(lines) if chunk else lines
        columns = table.values(refs, arrays=True)
        return self._format_lines(table.plan.fmt, stamps, cpus, pids, columns, chunk, into)

    def _format_lines(self, fmt: EventFormat, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray,
                      columns: List[Column], chunk: bool = False,
                      into: Optional[bytearray] = None) -> Any:  # fmt: skip
        """The rows' lines (`chunk`: as the compiled assembly's chunk, `into`: made in that buffer)."""
        lines = self._lines(fmt)
        formatter = self.kernel.formatter(fmt) if self.kernel is not None else None
        if formatter is None:
            if chunk:
                return lines.render(stamps, cpus, pids, columns, self._shown_comm, into)
            return lines.lines(stamps, cpus, pids, columns, self._shown_comm)
        special = self._special(lines, formatter, stamps, cpus, pids, columns)
        return as_chunk(special) if chunk else special

    def _special(self, lines: FormatLines, formatter: Any, stamps: np.ndarray, cpus: np.ndarray, pids: np.ndarray,
                 columns: List[Column]) -> List[str]:  # fmt: skip
        """The rows of an ftrace event with a formatter: its text, or the raw fields where it made none."""
        bodies = formatter.rows([c.tolist() if isinstance(c, np.ndarray) else c for c in columns])
        done = [i for i, body in enumerate(bodies) if body is not None]
        if len(done) == len(bodies):
            return lines.special(bodies, stamps, cpus, pids, columns, self._shown_comm)
        self.unformatted += len(bodies) - len(done)
        out = lines.lines(stamps, cpus, pids, columns, self._shown_comm)  # the raw fields, then the rows made text
        if done:
            at = np.array(done, dtype=np.int64)
            picked = [c[at] if isinstance(c, np.ndarray) else [c[i] for i in done] for c in columns]
            special = lines.special([bodies[i] for i in done], stamps[at], cpus[at], pids[at], picked,
                                    self._shown_comm)  # fmt: skip
            for i, line in zip(done, special):
                out[i] = line
        return out

    def _objects(self, block: Block, rows: np.ndarray) -> List[str]:
        """Items that came as objects: the records decoded elsewhere (BPF's) a format at a time, the other
        channels' events and the losses one by one."""
        items = [block.objects[r] for r in block.ref[rows].tolist()]
        out: List[Optional[str]] = [None] * len(items)
        by_format: Dict[int, List[int]] = {}
        for i, item in enumerate(items):
            if item.__class__ is TraceEvent:
                by_format.setdefault(id(item.fmt), []).append(i)
            else:
                out[i] = self.line(item)
        for at in by_format.values():
            for i, line in zip(at, self._decoded([items[i] for i in at])):
                out[i] = line
        return out  # type: ignore[return-value]

    def _decoded(self, events: List[TraceEvent]) -> List[str]:
        """Records of one format decoded elsewhere (objects), as the format's lines."""
        self.records += len(events)
        fmt = events[0].fmt
        count = len(fmt.fields)
        try:
            stamps, cpus, pids = (np.array([ev[k] for ev in events], dtype=np.int64) for k in range(3))
        except (OverflowError, TypeError):  # a stamp or number past 64 bits: one by one
            return [self._odd(ev) for ev in events]
        if any(len(ev.values) != count for ev in events):  # not one value per field: one by one
            return [self._odd(ev) for ev in events]
        columns: List[Column] = [list(col) for col in zip(*(ev.values for ev in events))] or [[] for _ in range(count)]
        return self._format_lines(fmt, stamps, cpus, pids, columns)

    def _odd(self, ev: TraceEvent) -> str:
        return self._lines(ev.fmt)._one(ev, self._shown_comm(ev.pid))

    def _lines(self, fmt: EventFormat) -> FormatLines:
        hit = self._formats.get(id(fmt))
        if hit is None or hit[0] is not fmt:
            hit = self._formats[id(fmt)] = (fmt, FormatLines(fmt, self.ndjson))
        return hit[1]

    def _shown_comm(self, pid: int) -> str:
        """A pid's task name as shown (escaped, or a JSON literal)."""
        return self._comm(self.comm_of(pid))

    def _comm(self, comm: str) -> str:
        shown = self._comms.get(comm)
        if shown is None:
            if len(self._comms) >= 4096:
                self._comms.clear()
            shown = self._comms[comm] = json.dumps(comm) if self.ndjson else safe_text(comm)
        return shown

    # ---- single objects ------------------------------------------------------------------------------------
    def line(self, item: Any) -> Optional[str]:
        """An object's line (without its newline): a channel's event, a loss, a record; None for what is not
        shown."""
        if isinstance(item, TraceEvent):
            return self._decoded([item])[0]
        if isinstance(item, Loss):
            return json.dumps(loss_dict(item)) if self.ndjson else loss_text(item)
        if isinstance(item, NpuEvent):
            return json.dumps(channel_dict(item), default=str) if self.ndjson else channel_text(item)
        if isinstance(item, RawRecord):
            self.records += 1
            self.unformatted += 1
            return self.raw_line(item)
        return None

    def write_objects(self, items: Iterable[Any]) -> None:
        """Objects' lines in one write."""
        self._write([line for line in map(self.line, items) if line is not None])

    def raw_line(self, raw: RawRecord) -> str:
        """A record of an event no format describes: its bytes."""
        comm = self.comm_of(raw.pid)
        if self.ndjson:
            return json.dumps({"ts_ns": raw.ts_ns, "cpu": raw.cpu, "pid": raw.pid, "comm": comm,
                               "event": f"unknown:{raw.id}", "raw": raw.payload.hex()})  # fmt: skip
        secs, nsecs = divmod(raw.ts_ns, NS)
        data = "".join(f" {b:02x}" for b in raw.payload)
        return f"{secs:6d}.{nsecs:09d} [{raw.cpu:03d}] {self._comm(comm)}-{raw.pid} [UNKNOWN TYPE {raw.id}]{data}"

    def _write(self, lines: List[str]) -> None:
        if lines:
            self._emit(("\n".join(lines) + "\n").encode())
            self.lines += len(lines)
        else:
            self.out.flush()


def _fileno(out: Any) -> Optional[int]:
    """The file descriptor under a text stream (None: a stream of no file, as io.StringIO)."""
    try:
        return int(out.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return None


def _groups(block: Block) -> List[Tuple[int, np.ndarray]]:
    """(etype, its rows in order) for each etype of the block."""
    if block.groups is not None:
        return block.groups
    order = stable_order(block.etype)
    cuts = np.flatnonzero(np.diff(block.etype[order])) + 1
    return [(int(block.etype[part[0]]), part) for part in np.split(order, cuts) if len(part)]


# ---- a pump sink that prints, and what a summary says of it -------------------------------------------------
def printing(timeline: BlockTimeline, printer: StreamPrinter, keep: Optional[RawScope] = None) -> Sink:
    """A pump sink: each batch into the timeline; what it released, taken as a live consumer takes it (a
    block every few thousand rows or 50 ms, and at the end), printed in time order (in scope)."""
    blocks = LiveBlocks(timeline, time.monotonic)

    def sink(batch: Batch) -> None:
        block = blocks.push(batch)
        if block is not None:
            printer.write_block(block if keep is None else keep.keep(block))

    return sink


def unformatted_summary(unformatted: int) -> str:
    """ ", 3 of them shown by their fields (their text could not be made)" for a summary line; "" for none."""
    return f", {unformatted} of them shown by their fields (their text could not be made)" if unformatted else ""


def scope_summary(scope: Optional[ScopeFilter]) -> str:
    """ ", 120 left out by the scope (device 100, irq 20)" for a summary line; "" when the pipeline left
    nothing out (the kernel's filters never delivered what they left out: not counted)."""
    dropped = scope.dropped if scope is not None else {}
    if not sum(dropped.values()):
        return ""
    why = ", ".join(f"{k} {n}" for k, n in sorted(dropped.items()))
    return f", {sum(dropped.values())} left out by the scope ({why})"


# ---- the other channels' events and the losses ------------------------------------------------------------------
def channel_text(ev: NpuEvent) -> str:
    """An event of another channel (kmsg, uevent, npu-smi): already normalized, shown as kind, device, op, args."""
    secs, nsecs = divmod(ev.ts_ns, NS)
    cpu = f"{ev.cpu:03d}" if ev.cpu >= 0 else "---"
    source = safe_text(str(ev.args.get("source", "?")))
    dev = "-" if ev.dev is None else str(ev.dev)
    fields = " ".join(f"{safe_text(str(k))}={value_text(v)}" for k, v in ev.args.items() if k != "source")
    return f"{secs:6d}.{nsecs:09d} [{cpu}] {source} {ev.kind} dev={dev} {safe_text(ev.op)}: {fields}"


def channel_dict(ev: NpuEvent) -> Dict[str, Any]:
    return {"ts_ns": ev.ts_ns, "cpu": ev.cpu, "pid": ev.pid, "event": f"{ev.args.get('source', '?')}:{ev.kind}",
            "kind": ev.kind, "dev": ev.dev, "op": ev.op, "fields": ev.args}  # fmt: skip


def loss_dict(loss: Loss) -> Dict[str, Any]:
    """A loss as NDJSON: its count, or null where how many is unknown (as the text says "an unknown number")."""
    return {"ts_ns": loss.ts_ns, "cpu": loss.cpu, "event": "npu_trace:lost", "source": loss.source,
            "kind": loss.kind, "count": loss.lost or None}  # fmt: skip


def loss_text(loss: Loss) -> str:
    secs, nsecs = divmod(loss.ts_ns, NS)
    count = str(loss.lost) if loss.lost else "an unknown number of"
    cpu = f"{loss.cpu:03d}" if loss.cpu >= 0 else "---"  # -1: not one CPU's (as a channel's line says)
    return f"{secs:6d}.{nsecs:09d} [{cpu}] !! LOST {count} events ({loss.source}/{loss.kind})"
