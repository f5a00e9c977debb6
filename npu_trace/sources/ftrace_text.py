"""`npu-trace import` of ftrace text: what `cat trace`, `trace_pipe` and `trace-cmd report` (default, `-R`, `-r`,
`-l`) print, turned into the ring-buffer records a live recording holds, so check, replay, export and the TUI read
it as one.

Every line is read by `npu_trace.ftrace.textline` and counted as one of: an event, a frame of a stack event, a
header (comments, blank lines, trace-cmd's `cpus=`), a lost-events note (a loss record of that CPU), or other
(counted, a few kept as examples). An event whose name has a format in the `Catalog` (the text's own format
source, else the kernel events, the profiles' events) is read into that format's fields
(`npu_trace.ftrace.textfields`): per event name, of the catalog's formats of that name the one that reads most of
its lines. The rest are text events, never dropped: `text:<name>` with one field, `text` (the event's text, its
frames on lines of their own), or `text:event` (its text after the time) for a name the kernel would not give.

The records are encoded as the kernel writes them (`npu_trace.ftrace.encode`): common_pid, common_flags and
common_preempt_count from the line's task and latency columns; each CPU's in time order (stable: the file's order
among equal times). Times are the text's: seconds (any number of decimals; trace-cmd's six give µs) or raw counts
(the counter, x86-tsc and uptime clocks), kept as they are.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import struct
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, DefaultDict, Dict, Iterable, List, Optional, Sequence, Tuple

from npu_trace.device.kernlog import read_line as kernel_line
from npu_trace.errors import FormatError, InputError, RecordingError
from npu_trace.events import Loss
from npu_trace.ftrace import tracedat
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format
from npu_trace.ftrace.textfields import FieldReader, Layouts, Reading
from npu_trace.ftrace.textline import Line, flag_bits, read_line
from npu_trace.recording.reader import RecordingReader

TEXT_SYSTEM = "text"
MAX_TEXT_FORMATS = 4096  # distinct text events beyond this share `text:event`
MAX_EXAMPLES = 5
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ALIASES = {"tracing_mark_write": "print"}  # the kernel's `trace` shows a marker by its ip's symbol
_COMMON = (
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
)


@dataclass
class Event:
    """One event line (and its frames)."""

    line: Line
    number: int  # its line in the file, from 1
    frames: List[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join([self.line.text, *self.frames]) if self.frames else self.line.text


@dataclass
class TextImport:
    formats: List[EventFormat]  # the formats of the records, in id order
    texts: List[Dict[str, str]]  # their format texts: {"system", "name", "text"}
    pages: List[Tuple[int, bytes]]  # (cpu, page), the CPUs interleaved by page time
    losses: List[Loss]
    comms: Dict[str, str]  # pid -> the task name the lines show
    tasks: Dict[str, int]  # thread id -> its thread group (the tgid column), threads that are not its leader
    stats: Dict[str, Any]

    @property
    def cpus(self) -> List[int]:
        return sorted({cpu for cpu, _ in self.pages})


# ---- the catalog of formats ---------------------------------------------------------------------------------
class Catalog:
    """The formats an import knows, by event name (several per name: versions of an event, or one name in two
    systems), each renumbered: ids 1.. in the order given, so no two clash in the recording."""

    def __init__(self, entries: Iterable[Tuple[str, str]], layouts: Optional[Layouts] = None) -> None:
        self.layouts = layouts or {}
        self.by_name: DefaultDict[str, List[Tuple[EventFormat, str]]] = defaultdict(list)
        self.refused: List[str] = []
        for system, text in entries:
            self._add(system, text)

    def _add(self, system: str, text: str) -> None:
        numbered = renumber(text, sum(len(v) for v in self.by_name.values()) + 1)
        try:
            fmt = parse_format(numbered, system)
        except FormatError as exc:
            self.refused.append(str(exc))
            return
        if all(f.full_name != fmt.full_name or f.field_names != fmt.field_names for f, _ in self.by_name[fmt.name]):
            self.by_name[fmt.name].append((fmt, numbered))

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.by_name.values())

    def readers(self, name: str) -> List[Tuple[FieldReader, str]]:
        return [(FieldReader(fmt, self.layouts), text) for fmt, text in self.by_name.get(name, [])]


def renumber(text: str, ev_id: int) -> str:
    return re.sub(r"^ID:.*$", f"ID: {ev_id}", text, count=1, flags=re.M)


def text_format(name: str, ev_id: int) -> str:
    """The format of a text event: `text:<name>` with its text as a `__data_loc char[] text`."""
    body = "\tfield:__data_loc char[] text;\toffset:8;\tsize:4;\tsigned:0;\n"
    return f'name: {name}\nID: {ev_id}\nformat:\n{_COMMON}\n{body}\nprint fmt: "%s", __get_str(text)\n'


# ---- reading the lines ----------------------------------------------------------------------------------------
class _Reader:
    def __init__(self) -> None:
        self.events: List[Event] = []
        self.counts: Counter[str] = Counter()
        self.examples: List[List[Any]] = []
        self.lost: List[Tuple[int, Optional[int], int]] = []  # (cpu, count, line)
        self.cpus_said = 0

    def feed(self, number: int, text: str) -> None:
        line = read_line(text)
        kind = line.kind
        if kind == "frame" and not self.events:
            kind = "other"
        self.counts[kind] += 1
        if kind == "event":
            self.events.append(Event(_alias(line), number))
        elif kind == "frame":
            self.events[-1].frames.append(line.text)
        elif kind == "lost":
            self.lost.append((line.cpu, line.lost, number))
        elif kind == "header":
            self._header(text)
        elif len(self.examples) < MAX_EXAMPLES:
            self.examples.append([number, text.strip()[:160]])

    def _header(self, text: str) -> None:
        said = re.search(r"(?:#P:|^cpus=)(\d+)", text.strip())
        if said:
            self.cpus_said = max(self.cpus_said, int(said.group(1)))


def _alias(line: Line) -> Line:
    target = _ALIASES.get(line.name)
    if target is None:
        return line
    return dataclasses.replace(line, name=target, text=f"{line.name}: {line.text}")


def read_lines(lines: Iterable[str]) -> _Reader:
    reader = _Reader()
    for number, text in enumerate(lines, 1):
        reader.feed(number, text)
    return reader


# ---- fields: the best format per event name -------------------------------------------------------------------
@dataclass
class _Choice:
    fmt: Optional[EventFormat] = None
    text: str = ""
    readings: List[Optional[Reading]] = field(default_factory=list)

    @property
    def read(self) -> int:
        return sum(r is not None for r in self.readings)


def choose(events: Sequence[Event], catalog: Catalog) -> _Choice:
    """Of the catalog's formats of these events' name, the one that reads most of them (the first on a tie)."""
    best = _Choice(readings=[None] * len(events))
    for reader, text in catalog.readers(events[0].line.name):
        choice = _Choice(reader.fmt, text, [reader.read(ev.text) for ev in events])
        if choice.read > best.read:
            best = choice
        if best.read == len(events):
            break
    return best


# ---- the import -----------------------------------------------------------------------------------------------
def read_ftrace_text(lines: Sequence[str], catalog: Catalog, header: PageHeader) -> TextImport:
    """Every line read and counted; the events encoded into pages (see the module docstring)."""
    reader = read_lines(lines)
    by_name: DefaultDict[str, List[Event]] = defaultdict(list)
    for ev in reader.events:
        by_name[ev.line.name].append(ev)
    build = _Build(catalog.size + 1, header)
    for name, events in by_name.items():
        build.add(name, events, choose(events, catalog))
    stats = _stats(reader, build, len(lines))
    stats["formats_refused"] = catalog.refused
    return TextImport(build.formats, build.texts, build.pages(), _losses(reader), _comms(reader.events),
                      _tasks(reader.events), stats)  # fmt: skip


class _Build:
    """The records of every event, by CPU, and the formats they use."""

    def __init__(self, next_id: int, header: PageHeader) -> None:
        self.next_id = next_id
        self.encoder = PageEncoder(header)
        self.room = header.data_size - 64  # the longest record a page holds, less its headers
        self.truncated: List[List[Any]] = []  # [line, bytes cut] of the texts too long for a record
        self.formats: List[EventFormat] = []
        self.texts: List[Dict[str, str]] = []
        self.text_formats: Dict[str, EventFormat] = {}
        self.rows: DefaultDict[int, List[Tuple[int, int, Tuple[Any, ...]]]] = defaultdict(list)  # (ts, line, row)
        self.names: Dict[str, Dict[str, Any]] = {}

    def add(self, name: str, events: Sequence[Event], choice: _Choice) -> None:
        entry: Dict[str, Any] = {"events": len(events), "fields": choice.read, "text": len(events) - choice.read}
        if choice.fmt is not None and choice.read:
            self._use(choice.fmt, choice.text)
            entry.update(format=choice.fmt.full_name, forms=dict(Counter(r.form for r in choice.readings if r)))
            absent = sorted({a for r in choice.readings if r for a in r.absent})
            if absent:
                entry["not_in_text"] = absent
        for ev, reading in zip(events, choice.readings):
            if reading is not None and choice.fmt is not None and self._fits(ev, choice.fmt, reading.values):
                self._row(ev, choice.fmt, reading.values)
            else:
                entry["fields"] -= reading is not None
                entry["text"] += reading is not None
                self._text_row(ev)
        self.names[name or "(no name)"] = entry

    def _use(self, fmt: EventFormat, text: str) -> None:
        self.formats.append(fmt)
        self.texts.append({"system": fmt.system, "name": fmt.name, "text": text})

    def _fits(self, ev: Event, fmt: EventFormat, values: Tuple[Any, ...]) -> bool:
        """A record of these values fits in a page (checked only for long ones: a text of 4 KiB can)."""
        if sum(len(v) for v in values if isinstance(v, (str, bytes))) < self.room // 2:
            return True
        return len(self.encoder.records.payload(fmt, ev.line.pid, values)) <= self.room

    def _row(self, ev: Event, fmt: EventFormat, values: Tuple[Any, ...]) -> None:
        line = ev.line
        self.rows[line.cpu].append((line.ts, ev.number, (line.ts, line.pid, fmt, values, flag_bits(line.flags))))

    def _text_row(self, ev: Event) -> None:
        name = ev.line.name
        room = name in self.text_formats or len(self.text_formats) < MAX_TEXT_FORMATS
        known = room and _NAME.fullmatch(name) is not None
        fmt = self._text_format(name if known else "event")
        text = ev.text if known else (f"{name}: {ev.text}" if name else ev.text)
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) > self.room:
            self.truncated.append([ev.number, len(raw) - self.room])
            text = raw[: self.room].decode("utf-8", "ignore")
        self._row(ev, fmt, (text,))

    def _text_format(self, name: str) -> EventFormat:
        fmt = self.text_formats.get(name)
        if fmt is None:
            text = text_format(name, self.next_id)
            self.next_id += 1
            fmt = self.text_formats[name] = parse_format(text, TEXT_SYSTEM)
            self._use(fmt, text)
        return fmt

    def pages(self) -> List[Tuple[int, bytes]]:
        encoder = self.encoder
        tagged = []
        for cpu, rows in self.rows.items():
            rows.sort(key=lambda r: (r[0], r[1]))
            for i, page in enumerate(encoder.pages(row for _, _, row in rows)):
                tagged.append((struct.unpack_from("<Q" if encoder.end == "<" else ">Q", page, 0)[0], cpu, i, page))
        tagged.sort(key=lambda t: (t[0], t[1], t[2]))
        self.formats.sort(key=lambda f: f.id)
        self.texts.sort(key=lambda t: parse_id(t["text"]))
        return [(cpu, page) for _, cpu, _, page in tagged]


def parse_id(text: str) -> int:
    m = re.search(r"^ID:\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def _losses(reader: _Reader) -> List[Loss]:
    """The lost-events notes as losses of their CPU, each stamped with the time of that CPU's event before it in
    the text (the loss came after it: a replay shows it there, stamps alike putting a CPU's events first), else
    of its first event after it."""
    lines: DefaultDict[int, List[int]] = defaultdict(list)
    stamps: DefaultDict[int, List[int]] = defaultdict(list)
    for ev in reader.events:
        lines[ev.line.cpu].append(ev.number)
        stamps[ev.line.cpu].append(ev.line.ts)
    out = []
    for cpu, count, number in reader.lost:
        at, ts = bisect.bisect(lines[cpu], number), stamps[cpu]
        stamp = ts[at - 1] if at else ts[0] if ts else 0
        out.append(Loss("ftrace", cpu, "overrun" if count is not None else "page_missed", count or 0, stamp))
    return out


def _comms(events: Sequence[Event]) -> Dict[str, str]:
    return {str(ev.line.pid): ev.line.comm for ev in events if ev.line.comm not in ("<...>", "")}


def _tasks(events: Sequence[Event]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for ev in events:
        tgid = ev.line.tgid
        if tgid is not None and tgid != ev.line.pid:
            out[str(ev.line.pid)] = tgid
    return out


def _stats(reader: _Reader, build: _Build, lines: int) -> Dict[str, Any]:
    counts = reader.counts
    events = reader.events
    times = [ev.line for ev in events]
    return {
        "lines": lines, "events": counts["event"], "frames": counts["frame"], "headers": counts["header"],
        "lost_lines": counts["lost"], "lost_events": sum(c or 0 for _, c, _ in reader.lost), "other": counts["other"],
        "other_examples": reader.examples, "with_fields": sum(n["fields"] for n in build.names.values()),
        "as_text": sum(n["text"] for n in build.names.values()), "names": build.names,
        "time": "counts" if any(t.counts for t in times) else "seconds", "cpus_said": reader.cpus_said,
        "resolution_ns": 10 ** (9 - max((t.digits for t in times), default=9)) if times else 0,
        "truncated": build.truncated[:MAX_EXAMPLES], "truncated_events": len(build.truncated),
    }  # fmt: skip



# ---- the text's own formats: `import --formats SOURCE` ----------------------------------------------------------
def format_source(path: str) -> List[Tuple[str, str]]:
    """(system, format text) of every event a format source holds: a tracefs `events` directory as copied from
    the host (`<system>/<event>/format`, or the tracing directory holding `events/`), a trace.dat, or a
    recording. An InputError for anything else."""
    if os.path.isdir(path):
        return _format_dir(os.path.join(path, "events") if os.path.isdir(os.path.join(path, "events")) else path)
    if tracedat.is_tracedat(path):
        return [(f["system"], f["text"]) for f in tracedat.read(path).formats if f["system"] != "ftrace"
                or f["name"] == "print"]  # fmt: skip
    try:
        return [(f["system"], f["text"]) for f in RecordingReader(path).header.get("formats", [])]
    except RecordingError as exc:
        why = f"not a tracefs events directory, a trace.dat or a recording ({exc})"
        raise InputError(f"--formats {path}: {why}") from None


def _format_dir(root: str) -> List[Tuple[str, str]]:
    out = []
    for system in sorted(os.listdir(root)):
        sub = os.path.join(root, system)
        for name in sorted(os.listdir(sub)) if os.path.isdir(sub) else []:
            path = os.path.join(sub, name, "format")
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.append((system, f.read()))
    if not out:
        raise InputError(f"--formats {root}: no <system>/<event>/format file in it")
    return out


# ---- which reader a text file is for ---------------------------------------------------------------------------
SNIFF_LINES = 4000


def is_ftrace_text(lines: Sequence[str]) -> bool:
    """ftrace text rather than a kernel log: among the first SNIFF_LINES lines of either form (lines of neither,
    a preamble of any length, passed over), at least one event line, and no fewer of them than lines of a kernel
    log's forms."""
    events = kernel = 0
    for text in lines:
        event, logged = read_line(text).kind == "event", kernel_line(text).form != "none"
        if event or logged:
            events, kernel = events + event, kernel + logged
            if max(events, kernel) >= SNIFF_LINES:
                break
    return events > 0 and events >= kernel


_TRACER = re.compile(r"#\s*tracer:\s*(?P<name>\S+)")
_TRACERS_READ = ("nop", "function")  # text of other tracers (function_graph's call graph, ...) is in no event form


def nothing_read(path: str, lines: Sequence[str]) -> str:
    """The one line an import that read no event says."""
    first = next(((i, t.strip()) for i, t in enumerate(lines, 1) if t.strip()), None)
    where = f" (line {first[0]}: {first[1][:80]!r})" if first else ""
    tracer = next((m.group("name") for m in map(_TRACER.match, lines[:SNIFF_LINES]) if m), None)
    hint = (f"; the {tracer} tracer's text is not read: import the trace.dat trace-cmd records of it"
            if tracer is not None and tracer not in _TRACERS_READ else "")  # fmt: skip
    return (f"{os.path.basename(path)}: no event read: none of its {len(lines)} lines is an ftrace event or a "
            f"kernel log line{where}{hint}")  # fmt: skip
