"""trace-cmd's `trace.dat`, versions 6 and 7 (trace-cmd.dat.v6(5), trace-cmd.dat.v7(5)): the same raw ring-buffer
pages, header_page and event format files that npu-trace records, read back for `npu-trace import`.

v6: the magic, "6", endianness, long size, page size; header_page and header_event; the ftrace formats; the
event formats per system; kallsyms, printk formats, saved cmdlines; the CPU count; options (id, size, data; a
BUFFER option, id 3, names an instance's "flyrecord" and its (offset, size) per CPU at an offset) and then
"flyrecord" with (offset, size) per CPU.
v7: the magic, "7", endianness, long size, page size, the compression ("none", "zstd", "zlib") and the offset of
the first options section; then sections (id, flags, string id, size), compressed when flags & 1 (a 4-byte
compressed size and 4-byte raw size before the data). Options name the other sections by offset
(HEADER_INFO 16, FTRACE_EVENTS 17, EVENT_FORMATS 18, CMDLINES 21) and each instance's BUFFER (id 3: the
flyrecord section's offset, the instance name, its trace clock, page size and per-CPU offset and size); a DONE
option (id 0) holds the offset of the next options section. A compressed flyrecord holds, per CPU, a chunk count
and chunks (compressed size, raw size, data).

Every offset and size is checked against the file, and every event format it carries (but ftrace's own) is
checked as the kernel writes them (`npu_trace.ftrace.format.check_format`); a file that is not one, or is cut or
corrupt, or a format that is damaged, is a one-line `InputError` (the format's name and field in it); but a
compressed chunk of a CPU's data that does not inflate is skipped, its pages with it (a loss of an unknown number
of events in their place, `damaged` names it): the rest of the file is read. The data of each CPU is cut into
pages of `page_size`; an empty page (no committed bytes, no missed events) is skipped, a tail too short for a page
header is given as it is (the walk counts it malformed). The instance read is the one with events (the first such,
by name order: "" is the top instance).

The file is mapped, not read: the pages are cut from it as they are taken (`pages`, `pages_in_time_order`: one
compressed chunk of a CPU at a time), so that reading a trace.dat takes memory for its metadata and a few chunks,
whatever the size of its data.
"""

from __future__ import annotations

import heapq
import mmap
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Literal, Optional, Set, Tuple, Union

from npu_trace.errors import FormatError, InputError
from npu_trace.events import DAMAGED, Loss
from npu_trace.ftrace.format import parse_format, parse_header_page
from npu_trace.ftrace.framing import COMMIT_MASK, MISSED_EVENTS, commit_reader
from npu_trace.ftrace.printk import MAX_PRINTK_BYTES
from npu_trace.ftrace.symbols import MAX_KALLSYMS_BYTES
from npu_trace.ftrace.walk import Walker, WalkState

MAGIC = b"\x17\x08Dtracing"
MAX_SECTION = 256 << 20  # a metadata section larger than this is refused
MAX_CPUS = 4096
OPT_DONE, OPT_DATE, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME, OPT_CPUCOUNT = 0, 1, 3, 4, 5, 8
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS, OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES = 16, 17, 18, 19, 20, 21
_NAME = re.compile(r"^name: (\S+)$", re.M)
_ID = re.compile(r"^ID: (\d+)$", re.M)


def _order(td: TraceDat) -> Literal["little", "big"]:
    return "big" if td.byteorder == "big" else "little"


def is_tracedat(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


@dataclass
class Buffer:
    name: str
    clock: str
    page_size: int
    cpus: List[Tuple[int, int, int]]  # (cpu, offset, size)
    section: int = 0  # v7: the flyrecord section's offset (its data may be compressed)


@dataclass(frozen=True)
class CpuData:
    """Where one CPU's data lies in the file: `(offset, size)` pieces, each `raw` bytes once inflated (the pieces
    of a compressed flyrecord are its chunks; plain data is one piece)."""

    pieces: Tuple[Tuple[int, int, int], ...]  # (offset, size in the file, raw size)
    compressed: bool

    @property
    def raw(self) -> int:
        return sum(piece[2] for piece in self.pieces)


@dataclass(frozen=True)
class Damage:
    """A compressed chunk of one CPU's data that does not inflate (corrupt, or not the size it declares): the
    pages that lie in it, even in part, are skipped (`TraceDat.pages`)."""

    offset: int  # of the chunk in the file
    start: int  # where its bytes lie in the CPU's inflated data, and how many
    raw: int
    why: str

    def pages(self, size: int) -> int:
        """The pages of `size` bytes it touches."""
        return -(-(self.start + self.raw) // size) - self.start // size


DAMAGE_SOURCE = "trace.dat"  # the source of a damaged chunk's loss (TraceDat.pages)
PAGES_WALKED = 1024  # pages walked at a time when the ids the data holds are looked for (4 MiB of 4 KiB pages)


@dataclass
class TraceDat:
    version: int
    byteorder: str
    long_size: int
    page_size: int
    compression: str
    header_page: str = ""
    header_event: str = ""
    formats: List[Dict[str, str]] = field(default_factory=list)  # {"system", "name", "text"}
    left_out: List[str] = field(default_factory=list)  # "system:name: why", formats failing the check, no records
    cmdlines: str = ""
    kallsyms: str = ""  # the recording host's /proc/kallsyms, as trace-cmd saved it
    printk_formats: str = ""  # its printk_formats (trace_printk's format strings)
    cpu_count: int = 0
    clock: str = "local"
    uname: str = ""
    date_offset_ns: Optional[int] = None
    buffers: List[Buffer] = field(default_factory=list)
    data: Dict[int, CpuData] = field(default_factory=dict)  # cpu -> where its pages lie (the chosen buffer)
    page_count: int = 0  # the pages pages_in_time_order gave (set once they were all taken)
    damaged: List[str] = field(default_factory=list)  # each damaged chunk skipped, per CPU (set as pages are taken)
    blob: Any = b""  # the file (mapped), the data is cut from
    path: str = "trace.dat"

    def cpus_with_data(self) -> List[int]:
        return sorted(cpu for cpu, where in self.data.items() if where.raw)

    def pages(self, cpu: int) -> Iterator[Tuple[int, Union[bytes, Loss]]]:
        """(timestamp, page) of one CPU's pages with data, in file order, cut as they are taken; where a compressed
        chunk is damaged, (the last stamp, a loss of an unknown number of events) in place of its pages, the
        chunk named in `damaged`."""
        commit_size = 8 if self.long_size == 8 else 4  # the page header: u64 stamp, local_t commit
        commit = commit_reader(8, commit_size, _order(self))
        ts = 0
        for page in self._cut(cpu, self.page_size):
            if isinstance(page, Damage):
                n = page.pages(self.page_size)
                self.damaged.append(f"cpu{cpu}: the chunk at byte {page.offset} ({page.raw} bytes inflated): "
                                    f"{page.why}: its {n} page{'' if n == 1 else 's'} skipped")  # fmt: skip
                yield ts, Loss(DAMAGE_SOURCE, cpu, DAMAGED, 0, ts)
                continue
            if len(page) < 8 + commit_size:  # a cut tail: the walk counts it (a short page), at the last stamp
                yield ts, page
                continue
            if commit(page) & (COMMIT_MASK | MISSED_EVENTS):  # data, or a loss the page tells of
                ts = int.from_bytes(page[:8], _order(self))
                yield ts, page

    def _cut(self, cpu: int, size: int) -> Iterator[Union[bytes, Damage]]:
        """One CPU's data in pieces of `size` bytes (the last one shorter), one chunk inflated at a time; a damaged
        chunk as its Damage, the page begun before it dropped and the bytes after it skipped up to the next page
        boundary (pages lie at multiples of `size` in the CPU's data)."""
        rest, skip = b"", 0
        for data in self._pieces(cpu):
            if isinstance(data, Damage):
                yield data
                rest, skip = b"", -(data.start + data.raw) % size
                continue
            if skip:
                skipped = min(skip, len(data))
                data, skip = data[skipped:], skip - skipped
            data = rest + data if rest else data
            whole = len(data) - len(data) % size
            for off in range(0, whole, size):
                yield bytes(data[off : off + size])
            rest = bytes(data[whole:])
        if rest:
            yield rest

    def _pieces(self, cpu: int) -> Iterator[Any]:
        """One CPU's data, a chunk at a time: its bytes, or the Damage of a compressed chunk that does not inflate."""
        where = self.data.get(cpu)
        if where is None:
            return
        r = _Reader(self.blob, self.path)
        start = 0
        for offset, size, raw in where.pieces:
            if not where.compressed:
                yield memoryview(self.blob)[offset : offset + size]
                continue
            r.seek(offset)
            data, why = _inflated(self, r.take(size), raw)
            yield data if not why else Damage(offset, start, raw, why)
            start += raw

    def pages_in_time_order(self) -> Iterator[Tuple[int, Union[bytes, Loss]]]:
        """(cpu, page) of every CPU, each CPU's in its order (a damaged chunk's loss in place of its pages), the
        CPUs interleaved by page timestamp (ties: by CPU); `page_count` says how many pages once they were all
        taken."""
        self.page_count, self.damaged = 0, []
        tagged = [self._tagged(cpu) for cpu in self.cpus_with_data()]
        for _, cpu, _, page in heapq.merge(*tagged, key=lambda t: (t[0], t[1], t[2])):
            self.page_count += not isinstance(page, Loss)
            yield cpu, page

    def _tagged(self, cpu: int) -> Iterator[Tuple[int, int, int, Union[bytes, Loss]]]:
        for i, (ts, page) in enumerate(self.pages(cpu)):
            yield ts, cpu, i, page

    def used_formats(self) -> List[Dict[str, str]]:
        """The format files of every event the pages can hold (ftrace's own too: print, bprint, the stacks), but
        those left out (`left_out`)."""
        return list(self.formats)

    def summary(self) -> Dict[str, Any]:
        return {"version": self.version, "compression": self.compression, "clock": self.clock,
                "buffers": [b.name for b in self.buffers], "cpus": self.cpus_with_data(),
                "formats": len(self.formats)}  # fmt: skip


class _Reader:
    def __init__(self, blob: bytes, path: str) -> None:
        self.blob, self.path, self.pos, self.fmt = blob, path, 0, "<"

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.path}: not a readable trace.dat: {what} (at byte {self.pos})")

    def take(self, n: int) -> bytes:
        self.skip(n)
        return bytes(self.blob[self.pos - n : self.pos])

    def skip(self, n: int) -> None:
        """Past `n` bytes, all of them in the file."""
        if n < 0 or self.pos + n > len(self.blob):
            raise self.fail(f"cut: {n} bytes wanted, {len(self.blob) - self.pos} left")
        self.pos += n

    def u(self, size: int) -> int:
        return int(struct.unpack(self.fmt + {2: "H", 4: "I", 8: "Q"}[size], self.take(size))[0])

    def cstr(self, limit: int = 4096) -> str:
        end = self.blob.find(b"\0", self.pos, self.pos + limit)
        if end < 0:
            raise self.fail("an unterminated string")
        text = self.blob[self.pos : end].decode("utf-8", "replace")
        self.pos = end + 1
        return text

    def sized(self, size_bytes: int) -> bytes:
        n = self.u(size_bytes)
        if n > MAX_SECTION:
            raise self.fail(f"a {n}-byte block")
        return self.take(n)

    def seek(self, offset: int) -> None:
        if not 0 <= offset <= len(self.blob):
            raise self.fail(f"offset {offset} outside the file")
        self.pos = offset


def read(path: str) -> TraceDat:
    """The trace.dat at `path`, its file mapped (see the module docstring)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            blob: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    return parse(blob, path)


def parse(blob: bytes, path: str = "trace.dat") -> TraceDat:
    r = _Reader(blob, path)
    if r.take(len(MAGIC)) != MAGIC:
        raise r.fail("wrong magic")
    version_text = r.cstr(16)
    if version_text not in ("6", "7"):
        raise r.fail(f"version {version_text!r} (reads 6 and 7)")
    endian = r.take(1)[0]
    r.fmt = ">" if endian else "<"
    long_size = r.take(1)[0]
    page_size = r.u(4)
    if page_size not in (4096, 8192, 16384, 65536) or long_size not in (4, 8):
        raise r.fail(f"page size {page_size}, long size {long_size}")
    td = TraceDat(int(version_text), "big" if endian else "little", long_size, page_size, "none", blob=blob, path=path)
    try:
        (_v6 if td.version == 6 else _v7)(r, td)
    except (struct.error, UnicodeDecodeError, zlib.error, ValueError) as exc:
        raise r.fail(str(exc)) from None
    _check_formats(r, td)
    return td


# ---- shared sections ------------------------------------------------------------------------------------------
def _header_info(r: _Reader, td: TraceDat) -> None:
    if r.take(12) != b"header_page\0":
        raise r.fail("no header_page")
    td.header_page = r.sized(8).decode("utf-8", "replace")
    if r.take(13) != b"header_event\0":
        raise r.fail("no header_event")
    td.header_event = r.sized(8).decode("utf-8", "replace")


def _ftrace_formats(r: _Reader, td: TraceDat) -> None:
    for _ in range(_count(r)):
        _add_format(td, "ftrace", r.sized(8))


def _event_formats(r: _Reader, td: TraceDat) -> None:
    for _ in range(_count(r)):
        system = r.cstr(256)
        for _ in range(_count(r)):
            _add_format(td, system, r.sized(8))


def _count(r: _Reader) -> int:
    n = r.u(4)
    if n > 1 << 16:
        raise r.fail(f"a count of {n}")
    return n


def _add_format(td: TraceDat, system: str, blob: bytes) -> None:
    """Keep a format text: every one of an event system (checked by `_check_formats`), ftrace's own when it has
    a name and an ID (they describe no record of the pages imported)."""
    text = blob.decode("utf-8", "replace")
    name = _NAME.search(text)
    if system != "ftrace" or (name and _ID.search(text)):
        td.formats.append({"system": system, "name": name.group(1) if name else "?", "text": text})


def _check_formats(r: _Reader, td: TraceDat) -> None:
    """Every format the import writes into a recording (`used_formats`) parsed and checked as the kernel writes
    them (`npu_trace.ftrace.format.check_format`), their ids and names distinct: a damaged one is an InputError
    naming it and its field. A format that fails the check, of an event no record of the pages is of, is left
    out and said (`left_out`)."""
    ids: Dict[int, str] = {}
    present = _present_ids(r, td)
    kept = []
    for entry in td.formats:
        where = f"{entry['system']}:{entry['name']}"
        try:
            fmt = parse_format(entry["text"], entry["system"])
        except FormatError as exc:
            why, prefix = str(exc), f"format {exc.event}: "
            why = why.removeprefix(prefix)
            eid = _ID.search(entry["text"])
            if eid is None or int(eid.group(1)) in present:
                raise InputError(f"{r.path}: damaged trace.dat: format of {where}: {why}") from None
            td.left_out.append(f"{where}: {why}")
            continue
        kept.append(entry)
        if fmt.id in ids or fmt.full_name in ids.values():
            other = ids.get(fmt.id, fmt.full_name)
            raise InputError(f"{r.path}: damaged trace.dat: format of {where}: its event ID {fmt.id} or its name "
                             f"is also that of {other}")  # fmt: skip
        ids[fmt.id] = fmt.full_name
    td.formats = kept


def _present_ids(r: _Reader, td: TraceDat) -> Set[int]:
    """The event ids the pages hold records of (every CPU's pages walked)."""
    if not td.data:
        return set()
    try:
        walker = Walker(parse_header_page(td.header_page), None, td.byteorder)
    except (FormatError, ValueError) as exc:
        raise r.fail(f"header_page: {exc}") from None
    present: Set[int] = set()
    size = td.page_size
    for cpu in td.data:
        state, batch = WalkState(), []
        for page in td._cut(cpu, size):
            if isinstance(page, bytes) and len(page) == size:  # whole pages (a short tail, a damaged chunk: none)
                batch.append(page)
            if len(batch) == PAGES_WALKED:
                present |= _ids(walker, batch, size, state)
                batch = []
        present |= _ids(walker, batch, size, state)
    return present


def _ids(walker: Walker, pages: List[bytes], size: int, state: WalkState) -> Set[int]:
    if not pages:
        return set()
    index = [(i * size, size) for i in range(len(pages))]
    return {int(e) for e in set(walker.walk(b"".join(pages), index, 0, state).etype.tolist())}


def _table(r: _Reader, what: str, limit: int) -> str:
    """A text section with a 4-byte length (kallsyms, printk formats), at most `limit` bytes."""
    n = r.u(4)
    if n > limit:
        raise r.fail(f"{what} of {n} bytes (at most {limit})")
    return r.take(n).decode("utf-8", "replace")


# ---- v6 ------------------------------------------------------------------------------------------------------
def _v6(r: _Reader, td: TraceDat) -> None:
    _header_info(r, td)
    _ftrace_formats(r, td)
    _event_formats(r, td)
    td.kallsyms = _table(r, "kallsyms", MAX_KALLSYMS_BYTES)
    td.printk_formats = _table(r, "printk formats", MAX_PRINTK_BYTES)
    td.cmdlines = r.sized(8).decode("utf-8", "replace")
    td.cpu_count = r.u(4)
    if td.cpu_count > MAX_CPUS:
        raise r.fail(f"{td.cpu_count} CPUs")
    kind = r.take(10)
    instances: List[Tuple[str, int]] = []
    if kind == b"options  \0":
        instances = _v6_options(r, td)
        kind = r.take(10)
    if kind != b"flyrecord\0":
        raise r.fail(f"{kind!r} data (reads flyrecord)")
    top = [(cpu, r.u(8), r.u(8)) for cpu in range(td.cpu_count)]
    td.buffers.append(Buffer("", td.clock, td.page_size, top))
    for name, offset in instances:
        r.seek(offset)
        if r.blob[offset : offset + 10] == b"flyrecord\0":
            r.take(10)
        cpus = [(cpu, r.u(8), r.u(8)) for cpu in range(td.cpu_count)]
        td.buffers.append(Buffer(name, td.clock, td.page_size, cpus))
    _choose(r, td)


def _v6_options(r: _Reader, td: TraceDat) -> List[Tuple[str, int]]:
    instances: List[Tuple[str, int]] = []
    while True:
        option = r.u(2)
        if option == OPT_DONE:
            return instances
        data = r.sized(4)
        if option == OPT_BUFFER and len(data) >= 9:
            offset = int.from_bytes(data[:8], _order(td))
            instances.append((data[8:].split(b"\0")[0].decode("utf-8", "replace"), offset))
        else:
            _option(td, option, data)


def _option(td: TraceDat, option: int, data: bytes) -> None:
    text = data.split(b"\0")[0].decode("utf-8", "replace")
    if option == OPT_TRACECLOCK:
        chosen = re.search(r"\[(\w+)\]", text)
        td.clock = chosen.group(1) if chosen else td.clock
    elif option == OPT_UNAME:
        td.uname = text
    elif option == OPT_CPUCOUNT and len(data) >= 4:
        td.cpu_count = int.from_bytes(data[:4], _order(td))
    elif option == OPT_DATE and text.strip():
        try:
            td.date_offset_ns = int(text.strip(), 0) * 1000  # trace-cmd --date: the offset, in µs
        except ValueError:
            td.date_offset_ns = None


# ---- v7 ------------------------------------------------------------------------------------------------------
def _v7(r: _Reader, td: TraceDat) -> None:
    td.compression = r.cstr(64)
    r.cstr(64)  # its version
    if td.compression not in ("none", "zstd", "zlib"):
        raise r.fail(f"compression {td.compression!r} (reads none, zstd, zlib)")
    offset = r.u(8)
    seen = set()
    while offset and offset not in seen:
        seen.add(offset)
        offset = _v7_options(r, td, offset)
    _choose(r, td)


def _section(r: _Reader, td: TraceDat, offset: int, want: int) -> _Reader:
    """The data of the section at `offset` (uncompressed), as a reader of its own."""
    r.seek(offset)
    sid, flags = r.u(2), r.u(2)
    r.u(4)  # the description's string id
    size = r.u(8)
    if sid != want:
        raise r.fail(f"section {sid} where section {want} was named")
    data = r.take(size)
    if flags & 1:
        data = _decompress(r, td, data)
    sub = _Reader(data, r.path)
    sub.fmt = r.fmt
    return sub


def _decompress(r: _Reader, td: TraceDat, data: bytes) -> bytes:
    sub = _Reader(data, r.path)
    sub.fmt = r.fmt
    size, raw = sub.u(4), sub.u(4)
    if raw > MAX_SECTION:
        raise r.fail(f"a section of {raw} bytes")
    return _inflate(r, td, sub.take(size), raw)


def _inflate(r: _Reader, td: TraceDat, blob: bytes, raw: int) -> bytes:
    out, why = _inflated(td, blob, raw)
    if why:
        raise r.fail(why)
    return out


def _inflated(td: TraceDat, blob: bytes, raw: int) -> Tuple[bytes, str]:
    """(a compressed chunk inflated, "") or (b"", why it cannot be: corrupt, or not the `raw` bytes it declares)."""
    if td.compression == "zlib":
        try:
            out = zlib.decompressobj().decompress(blob, raw + 1)  # never more than one byte past what it declares
        except zlib.error as exc:
            return b"", f"corrupt zlib data ({exc})"
    else:
        from npu_trace.ftrace.inflate import unzstd  # zstandard: imported only for a file compressed with it

        return unzstd(blob, raw, "the file says")
    if len(out) != raw:
        return b"", f"a chunk of {len(out)} bytes, {raw} declared"
    return out, ""


def _v7_options(r: _Reader, td: TraceDat, offset: int) -> int:
    opts = _section(r, td, offset, 0)
    nxt = 0
    while opts.pos < len(opts.blob):
        option, data = opts.u(2), opts.sized(4)
        where = int.from_bytes(data[:8], _order(td)) if len(data) >= 8 else 0
        if option == OPT_DONE:
            nxt = where
            break
        if option == OPT_HEADER_INFO:
            _header_info(_section(r, td, where, 16), td)
        elif option == OPT_FTRACE_EVENTS:
            _ftrace_formats(_section(r, td, where, 17), td)
        elif option == OPT_EVENT_FORMATS:
            _event_formats(_section(r, td, where, 18), td)
        elif option == OPT_KALLSYMS:
            td.kallsyms = _table(_section(r, td, where, OPT_KALLSYMS), "kallsyms", MAX_KALLSYMS_BYTES)
        elif option == OPT_PRINTK:
            td.printk_formats = _table(_section(r, td, where, OPT_PRINTK), "printk formats", MAX_PRINTK_BYTES)
        elif option == OPT_CMDLINES:
            td.cmdlines = _section(r, td, where, 21).sized(8).decode("utf-8", "replace")
        elif option == OPT_BUFFER:
            td.buffers.append(_v7_buffer(opts, data, td))
        else:
            _option(td, option, data)
    return nxt


def _v7_buffer(r: _Reader, data: bytes, td: TraceDat) -> Buffer:
    b = _Reader(data, r.path)
    b.fmt = r.fmt
    section = b.u(8)
    name, clock = b.cstr(256), b.cstr(64)
    page_size, count = b.u(4), b.u(4)
    if count > MAX_CPUS:
        raise r.fail(f"a buffer of {count} CPUs")
    cpus = [(b.u(4), b.u(8), b.u(8)) for _ in range(count)]
    return Buffer(name, clock, page_size, cpus, section)


# ---- the data ------------------------------------------------------------------------------------------------
def _choose(r: _Reader, td: TraceDat) -> None:
    """Read the first buffer (by name) whose CPUs hold data."""
    for buf in sorted(td.buffers, key=lambda b: b.name):
        data = {cpu: _cpu_data(r, td, buf, off, size) for cpu, off, size in buf.cpus if size}
        if any(where.raw for where in data.values()):
            td.data, td.page_size = data, buf.page_size or td.page_size
            if td.version == 7:
                td.clock = buf.clock or td.clock
            return


def _cpu_data(r: _Reader, td: TraceDat, buf: Buffer, offset: int, size: int) -> CpuData:
    """Where a CPU's data lies (every piece checked against the file; chunks inflated only when taken)."""
    if td.version == 6 or td.compression == "none" or not _compressed(r, buf):
        r.seek(offset)
        r.skip(size)  # the whole piece is in the file
        return CpuData(((offset, size, size),), False)
    r.seek(offset)
    chunks = r.u(4)
    if chunks > 1 << 20:
        raise r.fail(f"{chunks} chunks")
    pieces = []
    for _ in range(chunks):
        csize, raw = r.u(4), r.u(4)
        if raw > MAX_SECTION:
            raise r.fail(f"a chunk of {raw} bytes")
        pieces.append((r.pos, csize, raw))
        r.skip(csize)
    return CpuData(tuple(pieces), True)


def _compressed(r: _Reader, buf: Buffer) -> bool:
    """A v7 flyrecord section's flags say whether its data is compressed."""
    r.seek(buf.section)
    r.u(2)
    return bool(r.u(2) & 1)
