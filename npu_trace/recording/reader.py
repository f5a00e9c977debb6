"""Reading `.npt` recordings: the header, then chunks and loss records in file order, decoded lazily.

A file cut anywhere after its header reads to its last whole record (`truncated`, `truncation` say where it
ends); a chunk whose fields are whole but whose data was damaged (corrupt zstd, a CRC-32 mismatch) is skipped,
its pages counted lost (a "damaged" loss on each of its CPUs, `damaged` says which and why), and the rest is read;
a file cut inside its magic or header, any other corrupt record, or an unknown schema is a `RecordingError`.
Every length is bounded (see `format`), so hostile input neither hangs the reader nor exhausts memory.
"""

from __future__ import annotations

import os
import struct
from typing import IO, Any, Dict, Iterator, List, Optional, Set, Tuple

import msgpack

from npu_trace.errors import FormatError, RecordingError
from npu_trace.ftrace.decode import RecordDecoder, StructLayouts, build_decoders
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format
from npu_trace.ftrace.printk import parse_formats
from npu_trace.ftrace.special import KernelText
from npu_trace.ftrace.symbols import Symbols
from npu_trace.recording.schema import (
    CHECKSUM_KEY,
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    PREAMBLE,
    Chunk,
    DamagedChunk,
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
        self.damaged: List[str] = []  # each damaged chunk skipped: DamagedChunk.report()
        self._previous: Optional[Chunk] = None  # the last whole chunk read
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
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise RecordingError(f"cannot open recording {self.path}: {exc.strerror}") from None

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
        self._previous = None
        with self._open() as f:
            f.seek(self.data_offset)
            yield from self._stream(f)

    def _stream(self, f: IO[bytes]) -> Iterator[Record]:
        budget = [0]
        unpacker = make_unpacker(f, MAX_RECORD_BYTES, budget)
        while True:
            start = self._offset = self.data_offset + unpacker.tell()
            budget[0] = 0
            rec = _next_record(unpacker, start)
            if rec is None:
                self._at_end(start, os.fstat(f.fileno()).st_size)
                return
            kind = record_type(rec, start)
            if kind == "trailer":
                self.trailer = validate_trailer(rec, self.chunks_read, start)
                self._after_trailer(self.data_offset + unpacker.tell(), os.fstat(f.fileno()).st_size)
                return
            if kind == "chunk":
                yield from self._chunk(rec, start)
                continue
            item = self._item(kind, rec, start)
            if item is not None:
                yield item

    def _chunk(self, rec: Dict[str, Any], start: int) -> List[Record]:
        """The chunk; for a damaged one, its losses (DamagedChunk)."""
        try:
            chunk = decode_chunk(rec, self.chunks_read, start)
        except DamagedChunk as damage:
            self.chunks_read += 1
            self.damaged.append(damage.report())
            return [("loss", loss) for loss in damage.losses(self._stamp_before())]
        self.chunks_read += 1
        self._previous = chunk
        return [("chunk", chunk)]

    def _stamp_before(self) -> int:
        """The last page stamp of the whole chunk read last (0: none), where a damaged chunk's losses are put when
        it kept no stamp of its own."""
        chunk = self._previous
        if chunk is None:
            return 0
        if chunk.last_ts is not None:
            return int(chunk.last_ts)
        at, size, best = self.page_header.ts_offset, self.page_header.ts_size, 0
        for _, page in chunk.pages:
            if len(page) >= at + size:
                best = max(best, int.from_bytes(page[at : at + size], self.byteorder))  # type: ignore[arg-type]
        return best

    def damage_text(self) -> str:
        """The damaged chunks skipped, for a summary line ("" when none)."""
        if not self.damaged:
            return ""
        more = f"; and {len(self.damaged) - 3} more" if len(self.damaged) > 3 else ""
        return f"{len(self.damaged)} damaged chunk(s) skipped: {'; '.join(self.damaged[:3])}{more}"

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

    def _after_trailer(self, end: int, size: int) -> None:
        if end != size:
            raise fail(f"recording {self.path}", f"{size - end} bytes after the trailer (at byte {end})")

    def pages(self) -> Iterator[Tuple[int, bytes]]:
        """Every (cpu, page) of the recording in file order."""
        for kind, item in self.records():
            if kind == "chunk":
                yield from item.pages


def _next_record(unpacker: msgpack.Unpacker, start: int) -> Any:
    """The next record, or None at the end of the file (whole or cut inside the record)."""
    try:
        return unpacker.unpack()
    except msgpack.OutOfData:
        return None
    except RecordingError as exc:
        raise fail(f"record at byte {start}", str(exc)) from None
    except _UNPACK_ERRORS as exc:
        raise fail(f"record at byte {start}", f"not valid msgpack ({exc})") from None


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
