"""Reading `.npt` recordings: the header, then chunks and loss records in file order, decoded lazily.

A file cut anywhere after its header reads to its last whole record (`truncated`, `truncation` say where it
ends). A file damaged after its header reads past the damage: a chunk whose fields are whole but whose data
is not (corrupt zstd, a CRC-32 mismatch) is skipped, a "damaged" loss of an unknown number of events on each of its
CPUs in its place; a record that cannot be read is skipped up to the next chunk or trailer that reads (the chunks
numbered in between are lost: one such loss on no CPU in particular); `damaged` says what was skipped and why. A
record that cannot be read and is followed by no chunk or trailer ends the reading as a cut would. Bytes after the
trailer are not read: named in `damaged`, with a loss of an unknown number of events (a recording appended to
another). A file cut inside its magic or header, a damaged header, a damaged first record after a header without
a checksum (where the header ends is then in doubt), or an unknown schema is a `RecordingError`.
Every length is bounded (see `format`), so hostile input neither hangs the reader nor exhausts memory.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from typing import IO, Any, Callable, Dict, Generator, Iterator, List, Optional, Set, Tuple

import msgpack

from npu_trace.errors import FormatError, RecordingError
from npu_trace.events import DAMAGED, Loss
from npu_trace.ftrace.decode import RecordDecoder, StructLayouts, build_decoders
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format
from npu_trace.ftrace.printk import parse_formats
from npu_trace.ftrace.special import KernelText
from npu_trace.ftrace.symbols import Symbols
from npu_trace.recording.schema import (
    CHECKSUM_KEY,
    DAMAGE_SOURCE,
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    PREAMBLE,
    Chunk,
    DamagedChunk,
    Pages,
    check_preamble,
    decode_chunk,
    decode_events,
    decode_loss,
    fail,
    header_page_of,
    kallsyms_text,
    make_unpacker,
    record_type,
    validate_header,
    validate_trailer,
    verify_header_checksum,
)

Record = Tuple[str, Any]  # ("chunk", Chunk) | ("loss", Loss) | ("note", dict) | ("events", [NpuEvent])
_UNPACK_ERRORS = (ValueError, msgpack.UnpackException, UnicodeDecodeError, TypeError)


class RecordingReader:
    """Opens a recording and reads its header; `records()` streams the rest (re-iterable)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.truncated = False
        self.truncation = ""
        self.trailer: Optional[Dict[str, Any]] = None
        self.skipped_records: Dict[str, int] = {}  # unknown record types, skipped: type -> count
        self.chunks_read = 0  # damaged ones too
        self.damaged: List[str] = []  # each damaged part skipped: a chunk (DamagedChunk.report()), or bytes (_resume)
        self._stamp = 0  # the latest page stamp of the last whole chunk read (`_latest_stamp`)
        self._offset = 0
        with self._open() as f:
            preamble = f.read(PREAMBLE.size)
            self.schema = check_preamble(preamble)
            header, self.data_offset = _read_header(f, os.fstat(f.fileno()).st_size)
            f.seek(PREAMBLE.size)
            raw = f.read(self.data_offset - PREAMBLE.size)
        # "crc32:<hex>": the header's checksum, verified (None: written before headers had one); not in `header`
        self.checksum = verify_header_checksum(preamble, raw, header) if isinstance(header, dict) else None
        if isinstance(header, dict):
            header.pop(CHECKSUM_KEY, None)
        self.header = validate_header(header)
        # the page layout and every event format the header carries, each checked to be one the kernel writes
        self.page_header, self.formats = header_formats(self.header)
        self._kernel: Optional[KernelText] = None

    def _open(self) -> IO[bytes]:
        try:  # opened without waiting: a FIFO's open waits for a writer (forever, for a name given by mistake)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise RecordingError(f"cannot open recording {self.path}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # read more than once, and from where a skip resumes
            os.close(fd)
            raise RecordingError(f"recording {self.path} is not a file (a pipe, a device): give the file itself")
        os.set_blocking(fd, True)
        return open(fd, "rb")  # returned open: the caller's `with` closes it

    def position(self) -> int:
        """File offset of the record being read (for progress displays)."""
        return self._offset

    @property
    def byteorder(self) -> str:
        return str(self.header["byteorder"])

    def kernel_text(self) -> KernelText:
        """The kernel's tables the ftrace system's own events are shown with (`npu_trace.ftrace.special`): the
        header's symbols and trace_printk formats (none in a file without them), read once."""
        if self._kernel is None:
            self._kernel = header_kernel_text(self.header)
        return self._kernel

    def records(self) -> Iterator[Record]:
        """("chunk", Chunk), ("loss", Loss), ("note", dict) and ("events", [NpuEvent, ...]) in file order, up to
        the trailer or the cut."""
        self.truncated, self.truncation, self.trailer = False, "", None
        self.skipped_records, self.chunks_read, self.damaged = {}, 0, []
        self._stamp = 0
        with self._open() as f:
            f.seek(self.data_offset)
            yield from self._stream(f)

    def _stream(self, f: IO[bytes]) -> Iterator[Record]:
        at: Optional[int] = self.data_offset
        while at is not None:  # from the header, then from each place the reading resumed past a damaged record
            at = yield from self._stream_from(f, at)

    def _stream_from(self, f: IO[bytes], base: int) -> Generator[Record, None, Optional[int]]:
        """The records from byte `base` on, up to the trailer or the cut (None), or up to a record that cannot be
        read: then where the reading resumes (`_skip`)."""
        f.seek(base)
        budget = [0]
        unpacker = make_unpacker(f, MAX_RECORD_BYTES, budget)
        size = os.fstat(f.fileno()).st_size
        read = base  # where the last record read began: a skip looks for the next chunk after it
        while True:
            start = self._offset = base + unpacker.tell()
            budget[0] = 0
            # after a header without a checksum, its first record is never skipped: the header may have ended early
            # (a length hit, its checksum entry cut off with the rest), and what follows it is then no record
            skippable = start != self.data_offset or self.checksum is not None
            try:
                kind, rec, items = self._next(f, unpacker, start, base, size)
            except RecordingError as exc:
                if not skippable:
                    raise
                return (yield from self._skip(f, start, read, size, str(exc), cut=False))
            if kind is None and start < size and skippable:  # lengths that run past the file's end: a cut, or damage
                why = f"record at byte {start}: runs past the end of the file"
                return (yield from self._skip(f, start, read, size, why, cut=True))
            read = start
            if kind is None:
                self._at_end(start, size)
                return None
            if kind == "trailer":
                try:
                    self.trailer = validate_trailer(rec, self.chunks_read, start)
                except RecordingError as exc:  # every chunk was read: the file's end is unreadable
                    self._unreadable_end(start, str(exc))
                    return None
                yield from self._after_trailer(base + unpacker.tell(), size)
                return None
            yield from items

    def _next(self, f: IO[bytes], unpacker: msgpack.Unpacker, start: int, base: int,
              size: int) -> Tuple[Optional[str], Any, List[Record]]:  # fmt: skip
        """(the type of the record at `start`, the record, what it gives); (None, None, []) at the end of the
        file. A RecordingError where it cannot be read, or where a damaged chunk's length is damaged too (no
        record follows it)."""
        rec = _next_record(unpacker, start)
        if rec is None:
            return None, None, []
        kind = record_type(rec, start)
        if kind == "chunk":
            return kind, rec, self._chunk(rec, start, lambda: _record_follows(f, base + unpacker.tell(), size))
        item = None if kind == "trailer" else self._item(kind, rec, start)
        return kind, rec, [item] if item is not None else []

    def _skip(self, f: IO[bytes], start: int, read: int, size: int, why: str,
              cut: bool) -> Generator[Record, None, Optional[int]]:  # fmt: skip
        """Past the record at `start` that cannot be read (the last read began at `read`): a loss of an unknown
        number of events, and where the reading resumes (`_resume`); None where nothing readable follows: the file
        read as cut at `start`."""
        resumed = self._resume(f, start, read, size, why)
        if resumed is None:
            if cut:
                self._at_end(start, size)
            else:
                self._unreadable_end(start, why)
            return None
        yield self._skipped()
        return resumed

    def _resume(self, f: IO[bytes], start: int, read: int, size: int, why: str) -> Optional[int]:
        """Where the reading resumes past the record at `start` that cannot be read: the first chunk or trailer
        after the last record read (at `read`: a damaged length may have put `start` past the next chunk) whose
        record reads, a chunk numbered on from those read or a trailer that counts at least as many; its number
        taken as the chunks read so far, the skip named in `damaged`. None where none follows."""
        for at in _sync_points(f, read + 1, size):
            rec = _record_at(f, at)
            kind = rec.get("t") if isinstance(rec, dict) else None
            seq = rec.get("seq") if kind == "chunk" else rec.get("chunks") if kind == "trailer" else None
            if at == start or type(seq) is not int or seq < self.chunks_read:  # not the record that failed
                continue
            lost, self.chunks_read = seq - self.chunks_read, seq
            onto = f"chunk {seq}" if kind == "chunk" else "the trailer"
            self.damaged.append(f"the record at byte {start} cannot be read ({why}): read on from {onto} at byte "
                                f"{at}, {lost} chunk{'' if lost == 1 else 's'} lost (their CPUs unknown)")  # fmt: skip
            return at
        return None

    def _unreadable_end(self, start: int, why: str) -> None:
        """A record that cannot be read, and no chunk or trailer after it: read as a file cut there."""
        self.truncated = True
        self.truncation = (f"the record at byte {start} cannot be read ({why}) and no chunk or trailer follows it; "
                           f"read {self.chunks_read} whole chunks, no trailer")  # fmt: skip

    def _chunk(self, rec: Dict[str, Any], start: int, followed: Callable[[], bool]) -> List[Record]:
        """The chunk; for a damaged one, its losses (DamagedChunk) when a record follows it (`followed`), else a
        RecordingError: its length was hit too, where it ends is unknown (skipped from its start: `_skip`)."""
        try:
            chunk = decode_chunk(rec, self.chunks_read, start)
        except DamagedChunk as damage:
            if not followed():
                raise fail(f"chunk {self.chunks_read} at byte {start}", "damaged, and no record follows it") from None
            self.chunks_read += 1
            self.damaged.append(damage.report())
            return [("loss", loss) for loss in damage.losses(self._stamp)]
        self.chunks_read += 1
        self._stamp = self._latest_stamp(chunk)
        return [("chunk", chunk)]

    def _latest_stamp(self, chunk: Chunk) -> int:
        """The chunk's latest page stamp, where the losses of a part skipped after it are put when that part kept
        no stamp of its own: its `last_ts`, or the latest stamp of the last page of each CPU it holds (a CPU's
        page stamps only grow), read backwards from the end of its data (a few pages)."""
        if chunk.last_ts is not None:
            return int(chunk.last_ts)
        pages = chunk.pages
        if not isinstance(pages, Pages):
            return max((self._page_stamp(page) for _, page in pages), default=0)
        left, end, best = set(pages.cpus), len(pages.raw), 0
        for cpu, n in zip(reversed(pages.cpus), reversed(pages.lens)):
            if cpu in left:
                left.discard(cpu)
                best = max(best, self._page_stamp(pages.raw[end - n : end]))
                if not left:
                    break
            end -= n
        return best

    def _page_stamp(self, page: bytes) -> int:
        at, size = self.page_header.ts_offset, self.page_header.ts_size
        return int.from_bytes(page[at : at + size], self.byteorder) if len(page) >= at + size else 0  # type: ignore[arg-type]

    def notes(self) -> str:
        """Where the file is cut and what of it was skipped as damaged, for a summary line ("" for a whole file):
        "; the file is cut: ...; 1 damaged part(s) skipped: ..."."""
        cut = f"; the file is cut: {self.truncation}" if self.truncated else ""
        return cut + (f"; {self.damage_text()}" if self.damaged else "")

    def damage_text(self) -> str:
        """The damaged parts skipped, for a summary line ("" when none)."""
        if not self.damaged:
            return ""
        more = f"; and {len(self.damaged) - 3} more" if len(self.damaged) > 3 else ""
        return f"{len(self.damaged)} damaged part(s) skipped: {'; '.join(self.damaged[:3])}{more}"

    def _item(self, kind: str, rec: Dict[str, Any], start: int) -> Optional[Record]:
        if kind == "loss":
            return "loss", decode_loss(rec, start)
        if kind == "note":
            return "note", rec
        if kind == "ev":
            return "events", decode_events(rec, start)
        self.skipped_records[kind] = self.skipped_records.get(kind, 0) + 1
        return None

    def _at_end(self, start: int, size: int) -> None:
        self.truncated = True
        whole = f"read {self.chunks_read} whole chunks"
        if start < size:
            self.truncation = f"file ends inside the record at byte {start} (file size {size}); {whole}, no trailer"
        else:
            self.truncation = f"file ends at byte {size} without a trailer; {whole}"

    def _after_trailer(self, end: int, size: int) -> Iterator[Record]:
        """Bytes after the trailer (the writer's last): not read (a recording appended to another, a bad copy),
        named in `damaged`, and a loss of an unknown number of events on no CPU in particular."""
        if end != size:
            self.damaged.append(f"{size - end} bytes after the trailer (at byte {end}) not read")
            yield self._skipped()

    def _skipped(self) -> Record:
        """The loss of a part skipped between records (its CPUs unknown, how many events too), at the latest stamp
        read before it."""
        return "loss", Loss(DAMAGE_SOURCE, -1, DAMAGED, 0, self._stamp)

    def pages(self) -> Iterator[Tuple[int, bytes]]:
        """Every (cpu, page) of the recording in file order."""
        for kind, item in self.records():
            if kind == "chunk":
                yield from item.pages


# Where a chunk's or the trailer's record begins: the writer packs each as a map (under 16 entries) whose first
# entry is "t": the record's type; a chunk's second entry is "seq".
_SYNC = re.compile(rb"[\x80-\x8f]\xa1t(?:\xa5chunk\xa3seq|\xa7trailer)")
_SCAN = 1 << 20


def _sync_points(f: IO[bytes], start: int, size: int) -> Iterator[int]:
    """The offsets from `start` on where a chunk or the trailer may begin, in file order."""
    at = start
    while at < size:
        f.seek(at)
        block = f.read(_SCAN + 16)
        for m in _SYNC.finditer(block, 0, _SCAN + 15):
            if m.start() < _SCAN:
                yield at + m.start()
        at += _SCAN


def _record_follows(f: IO[bytes], at: int, size: int) -> bool:
    """A record reads at byte `at` (a map with its type), or the file ends there; the file's position kept."""
    if at >= size:
        return True
    kept = f.tell()
    try:
        rec = _record_at(f, at)
    finally:
        f.seek(kept)
    return isinstance(rec, dict) and isinstance(rec.get("t"), str)


def _record_at(f: IO[bytes], at: int) -> Any:
    """The record at byte `at` (None when none reads there)."""
    f.seek(at)
    try:
        return _next_record(make_unpacker(f, MAX_RECORD_BYTES, [0]), at)
    except RecordingError:
        return None


def _next_record(unpacker: msgpack.Unpacker, start: int) -> Any:
    """The next record, or None at the end of the file (whole or cut inside the record)."""
    try:
        return unpacker.unpack()
    except msgpack.OutOfData:
        return None
    except RecordingError as exc:
        raise fail(f"record at byte {start}", str(exc)) from None
    except _UNPACK_ERRORS as exc:
        raise fail(f"record at byte {start}", f"not valid msgpack ({str(exc) or type(exc).__name__})") from None


def _read_header(f: IO[bytes], size: int) -> Tuple[Dict[str, Any], int]:
    """The header map after the preamble -> (header, offset of the first record)."""
    budget = [0]
    unpacker = make_unpacker(f, MAX_HEADER_BYTES, budget)
    try:
        header = unpacker.unpack()
    except msgpack.OutOfData:
        raise RecordingError(f"recording cut inside its header (file size {size}): nothing can be read") from None
    except RecordingError as exc:
        raise fail("recording header", str(exc)) from None
    except msgpack.BufferFull:
        raise fail("recording header", f"larger than {MAX_HEADER_BYTES} bytes") from None
    except _UNPACK_ERRORS as exc:
        raise fail("recording header", f"not valid msgpack ({exc})") from None
    return header, PREAMBLE.size + unpacker.tell()


# ---- decoding ----------------------------------------------------------------------------------
def header_formats(header: Dict[str, Any]) -> Tuple[PageHeader, List[EventFormat]]:
    """The page layout and the event formats of a (type-checked) header, each checked to be what the kernel
    writes (`npu_trace.ftrace.format.check_format`), their ids and names distinct, each text naming the event
    its entry names: a RecordingError naming the format and the field otherwise."""
    page_header = header_page_of(header)
    formats: List[EventFormat] = []
    ids: Dict[int, str] = {}
    names: Set[str] = set()
    for entry in header["formats"]:
        fmt = _parse_entry(entry)
        if fmt.id in ids:
            raise RecordingError(f"recording header: format of {fmt.full_name}: event ID {fmt.id} is also that of "
                                 f"{ids[fmt.id]}")  # fmt: skip
        if fmt.full_name in names:
            raise RecordingError(f"recording header: format of {fmt.full_name} appears twice")
        ids[fmt.id] = fmt.full_name
        names.add(fmt.full_name)
        formats.append(fmt)
    return page_header, formats


def header_kernel_text(header: Dict[str, Any]) -> KernelText:
    """The header's `kallsyms` and `printk_formats` as the tables the ftrace system's own events are shown with
    (a RecordingError for a `kallsyms` entry that does not read)."""
    symbols = None
    if "kallsyms" in header:
        text, only = kallsyms_text(header["kallsyms"])
        symbols = Symbols.parse(text, only)
    printk = parse_formats(header.get("printk_formats", ""))
    return KernelText(symbols, printk, str(header["byteorder"]))


def open_decoder(
    reader: RecordingReader, layouts: Optional[StructLayouts] = None
) -> Tuple[PageHeader, Dict[int, RecordDecoder]]:
    """The page layout and record decoders described by the recording's own format texts."""
    try:
        return reader.page_header, build_decoders(reader.formats, reader.byteorder, layouts)
    except (FormatError, struct.error, ValueError) as exc:
        raise RecordingError(f"recording header: cannot build decoders: {exc}") from None


def _parse_entry(entry: Dict[str, str]) -> EventFormat:
    name = f"{entry['system']}:{entry['name']}"
    try:
        fmt = parse_format(entry["text"], entry["system"])
    except FormatError as exc:
        why, prefix = str(exc), f"format {exc.event}: "  # said once: the entry's name
        raise RecordingError(f"recording header: format of {name}: {why.removeprefix(prefix)}") from None
    if fmt.name != entry["name"]:
        raise RecordingError(f"recording header: format of {name}: its text names the event {fmt.name!r}")
    return fmt
