"""The `.npt` recording format: constants, limits, and validation of every record a reader trusts.

Pure: maps in, value objects (or a `RecordingError`) out. The layout is described in docs/recording-format.md.
Every length the reader accepts is bounded here, so a hostile file costs at most ~200 MiB and never hangs.
"""

from __future__ import annotations

import re
import struct
import zlib
from functools import lru_cache
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, overload

import msgpack
import zstandard

try:  # the chunks' CRC-32 through zlib-ng: the same checksum, computed with the CPU's carry-less multiply (7.6 ms
    # per 28 MB of chunk data became 1.0 ms here: a twentieth of check's time, on every chunk read and written)
    from zlib_ng.zlib_ng import crc32 as chunk_crc32
except ImportError:  # pragma: no cover - a host without the wheel: zlib's, the same values
    from zlib import crc32 as chunk_crc32

from npu_trace.errors import FormatError, RecordingError
from npu_trace.events import DAMAGED, KINDS, Loss, NpuEvent, event_loss
from npu_trace.ftrace.format import PageHeader, parse_header_page
from npu_trace.ftrace.inflate import unzstd
from npu_trace.ftrace.symbols import MAX_KALLSYMS_BYTES
from npu_trace.pipeline.batch import Mark

MAGIC = b"NPUTRACE"
SCHEMA_VERSION = 1
SUPPORTED_SCHEMAS = (1,)
PREAMBLE = struct.Struct(">8sH")  # magic, schema version (big-endian u16)

CODECS = ("zstd", "none")
DAMAGE_SOURCE = "recording"  # the source of the losses of what the reader skipped as damaged (DamagedChunk.losses)
MAX_HEADER_BYTES = 16 << 20  # the header map, format texts included
MAX_CHUNK_RAW = 64 << 20  # a chunk's pages, uncompressed
MAX_DATA_BYTES = MAX_CHUNK_RAW + (1 << 20)  # a chunk's stored data (zstd may grow incompressible input a little)
MAX_RECORD_BYTES = MAX_DATA_BYTES + (1 << 20)  # one record after the header, whole
MAX_PAGE_BYTES = 1 << 20  # one ring-buffer page (subbuffers go up to 1 MiB on current kernels)
MAX_PAGES_PER_CHUNK = 1 << 16
MAX_ARRAY_LEN = 1 << 17
MAX_ITEMS_PER_RECORD = 1 << 20  # list elements + map entries in one record: bounds object inflation
MAX_CPU = 1 << 15  # CPU numbers below this (the blocks hold them as int16)
INT64 = 1 << 63  # stamps, counts and devices lie in int64's range (pids in int32's, CPUs in int16's): the columns
MAX_EVENT_ROWS = 10_000  # rows per "ev" record (the writer splits bigger batches)


class Pages(Sequence[Tuple[int, bytes]]):
    """A decoded chunk's pages, (cpu, page bytes) in the order they were read, each page's bytes sliced from the
    chunk's data when it is asked for: a reader that walks the data in place (npu_trace.pipeline.blocktimeline)
    asks only for each page's CPU and length (`cpus`, `lens`), and copying every page out of the data cost a
    tenth of reading a recording."""

    __slots__ = ("_starts", "cpus", "lens", "raw")

    def __init__(self, raw: bytes, cpus: List[int], lens: List[int]) -> None:
        self.raw, self.cpus, self.lens = raw, cpus, lens
        self._starts: Optional[List[int]] = None

    def __len__(self) -> int:
        return len(self.cpus)

    @overload
    def __getitem__(self, i: int) -> Tuple[int, bytes]: ...

    @overload
    def __getitem__(self, i: slice) -> List[Tuple[int, bytes]]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        at = i + len(self) if i < 0 else i
        if not 0 <= at < len(self):
            raise IndexError("page index out of range")
        if self._starts is None:
            self._starts = [0]
            for n in self.lens:
                self._starts.append(self._starts[-1] + n)
        start = self._starts[at]
        return self.cpus[at], self.raw[start : start + self.lens[at]]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Pages, list, tuple)) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Pages({len(self)} pages, {len(self.raw)} bytes)"


class Chunk(NamedTuple):
    """One chunk: its sequence number, its pages ((cpu, page bytes) in the order they were read: a list, or the
    decoded chunk's `Pages`) and the marks of the reads they came from: (number of the chunk's pages read before
    the mark, the mark)."""

    seq: int
    pages: Sequence[Tuple[int, bytes]]
    first_ts: Optional[int] = None
    last_ts: Optional[int] = None
    marks: List[Tuple[int, Mark]] = []
    raw: bytes = b""  # the pages one after the other, as stored (a reader that walks them in place)


# ---- marks: [page index, read_ns, caught-up CPUs as a bitmask (bit i of byte i // 8), channels_ns | nil] -----
def pack_mark(index: int, mark: Mark) -> List[Any]:
    mask = bytearray((max(mark.caught_up) // 8 + 1) if mark.caught_up else 0)
    for cpu in mark.caught_up:
        mask[cpu // 8] |= 1 << (cpu % 8)
    return [index, mark.read_ns, bytes(mask), mark.channels_ns]


def unpack_marks(rows: Any, n_pages: int, where: str) -> List[Tuple[int, Mark]]:
    if not isinstance(rows, list):
        raise fail(where, f"field 'marks' is {type(rows).__name__}, not a list")
    out: List[Tuple[int, Mark]] = []
    last = 0
    for i, row in enumerate(rows):  # thousands per chunk: exact type tests (msgpack makes plain int and bytes)
        if type(row) is not list or len(row) != 4:
            raise fail(where, f"mark {i} is not a list of 4 fields")
        index, read_ns, mask, channels_ns = row
        ok = type(index) is int and last <= index <= n_pages and type(read_ns) is int and type(mask) is bytes
        if not ok or len(mask) > MAX_CPU // 8 or not (channels_ns is None or type(channels_ns) is int):
            raise fail(where, f"mark {i} has a field of the wrong type or out of order")
        out.append((index, Mark(read_ns, _caught(mask), channels_ns)))
        last = index
    return out


@lru_cache(maxsize=256)
def _caught(mask: bytes) -> Tuple[int, ...]:
    """The CPUs of a caught-up bitmask (a recording holds a few distinct masks, thousands of times)."""
    return tuple(b * 8 + bit for b, byte in enumerate(mask) for bit in range(8) if byte >> bit & 1)


def fail(where: str, why: str) -> RecordingError:
    return RecordingError(f"{where}: {why}")


def make_unpacker(file: Any, max_bytes: int, budget: List[int]) -> msgpack.Unpacker:
    """A msgpack stream reader bounding every length; `budget[0]` counts items of the record being read."""

    def list_hook(items: List[Any]) -> List[Any]:
        _spend(budget, len(items))
        return items

    def map_hook(pairs: Dict[Any, Any]) -> Dict[Any, Any]:
        _spend(budget, len(pairs))
        return pairs

    return msgpack.Unpacker(
        file,
        raw=False,
        use_list=True,
        list_hook=list_hook,
        object_hook=map_hook,
        read_size=min(1 << 20, max_bytes),
        max_buffer_size=max_bytes,
        max_bin_len=min(max_bytes, MAX_DATA_BYTES),
        max_str_len=min(max_bytes, MAX_HEADER_BYTES),
        max_array_len=MAX_ARRAY_LEN,
        max_map_len=MAX_ARRAY_LEN,
        max_ext_len=1024,
    )


def _spend(budget: List[int], n: int) -> None:
    budget[0] += n
    if budget[0] > MAX_ITEMS_PER_RECORD:
        raise RecordingError(f"a record holds more than {MAX_ITEMS_PER_RECORD} items")


# ---- field checks ------------------------------------------------------------------------------
def need(rec: Dict[str, Any], key: str, kind: Any, where: str, optional: bool = False) -> Any:
    """rec[key], checked to be of `kind` (bools are not ints); a clear error when absent or mistyped."""
    if key not in rec:
        if optional:
            return None
        raise fail(where, f"field {key!r} is missing")
    value = rec[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise fail(where, f"field {key!r} is {type(value).__name__}, not {names}")
    return value


def need_ints(rec: Dict[str, Any], key: str, where: str, low: int, high: int) -> List[int]:
    values = need(rec, key, list, where)
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v < high:
            raise fail(where, f"field {key!r} holds {v!r}, not an integer in [{low}, {high})")
    return values


def need_range(rec: Dict[str, Any], key: str, where: str, low: int, high: int) -> int:
    value = need(rec, key, int, where)
    if not low <= value <= high:
        raise fail(where, f"field {key!r} is {value}, outside [{low}, {high}]")
    return int(value)


# ---- header ------------------------------------------------------------------------------------
_HEADER_STRINGS = (
    "magic", "tool_version", "host", "kernel", "machine", "byteorder", "clock", "profile", "header_page",
    "compression", "created_by",
)  # fmt: skip


def check_preamble(blob: bytes) -> int:
    """The 10 leading bytes -> schema version; a clear error for another file or an unknown schema."""
    if len(blob) < PREAMBLE.size:
        what = "recording cut inside its magic" if MAGIC.startswith(blob[:8]) else "not an npu-trace recording"
        raise RecordingError(f"{what}: {len(blob)} bytes, shorter than the {PREAMBLE.size}-byte preamble")
    magic, schema = PREAMBLE.unpack_from(blob)
    if magic != MAGIC:
        raise RecordingError(f"not an npu-trace recording (magic {magic!r}, expected {MAGIC!r})")
    if schema not in SUPPORTED_SCHEMAS:
        supported = ", ".join(str(s) for s in SUPPORTED_SCHEMAS)
        raise RecordingError(f"recording schema version {schema} is not supported by this build (reads: {supported})")
    return int(schema)


# ---- the header's checksum ------------------------------------------------------------------------------------
# The header map's last entry, "checksum": "crc32:" and 8 hex digits, the CRC-32 (zlib.crc32) of the preamble
# and the header map as stored, those 8 digits counted as "00000000". Files written before it have none.
CHECKSUM_KEY = "checksum"
_CHECKSUM_RE = re.compile(r"^crc32:[0-9a-f]{8}$")
_CHECKSUM_ZERO = b"00000000"


def pack_header(header: Dict[str, Any]) -> bytes:
    """The preamble and the header map (any "checksum" it holds replaced), its checksum last: the file's first
    bytes."""
    body = {k: v for k, v in header.items() if k != CHECKSUM_KEY}
    body[CHECKSUM_KEY] = "crc32:" + _CHECKSUM_ZERO.decode()
    blob = PREAMBLE.pack(MAGIC, SCHEMA_VERSION) + msgpack.packb(body, use_bin_type=True)
    return blob[:-8] + b"%08x" % zlib.crc32(blob)


def verify_header_checksum(preamble: bytes, raw: bytes, header: Dict[str, Any]) -> Optional[str]:
    """The header's checksum ("crc32:..."), verified over the bytes it was read from (`preamble`, then `raw`: the
    header map as stored); None for a header written without one. A RecordingError "header damaged" when the
    stored and computed checksums differ: a flipped bit or a changed byte, which an unusual kernel never makes."""
    where = "recording header damaged"
    keys = list(header)
    last = keys[-1] if keys else None
    value = header.get(last) if isinstance(last, str) else None
    if CHECKSUM_KEY not in header:
        if isinstance(value, str) and _CHECKSUM_RE.match(value) and raw.endswith(msgpack.packb(value)):
            raise RecordingError(f"{where} (checksum {value} under the key {last!r}, not {CHECKSUM_KEY!r})")
        return None  # written before headers had a checksum
    stored = header[CHECKSUM_KEY]
    if not isinstance(stored, str) or not _CHECKSUM_RE.match(stored):
        raise RecordingError(f"{where} (checksum {str(stored)[:40]!r} is not crc32: and 8 hex digits)")
    if last != CHECKSUM_KEY or not raw.endswith(msgpack.packb(stored)):
        raise RecordingError(f"{where} (checksum {stored} is not the header's last entry)")
    computed = zlib.crc32(preamble + raw[:-8] + _CHECKSUM_ZERO)
    if computed != int(stored[6:], 16):
        raise RecordingError(f"{where} (checksum {stored} stored, crc32:{computed:08x} computed): "
                             "a flipped bit or a changed byte")  # fmt: skip
    return stored


def validate_header(header: Any) -> Dict[str, Any]:
    """Type-check every header field a reader uses; returns the header."""
    where = "recording header"
    if not isinstance(header, dict):
        raise fail(where, f"is {type(header).__name__}, not a map")
    for key in _HEADER_STRINGS:
        need(header, key, str, where)
    for key in ("cpus", "page_size", "schema"):
        need_range(header, key, where, 0, 1 << 31)
    if header["byteorder"] not in ("little", "big"):
        raise fail(where, f"byteorder {header['byteorder']!r} is neither 'little' nor 'big'")
    if header["compression"] not in CODECS:
        raise fail(where, f"compression {header['compression']!r} is not one of {', '.join(CODECS)}")
    _validate_anchor(need(header, "clock_anchor", dict, where))
    _validate_strings(need(header, "events", list, where), "events")
    for i, entry in enumerate(need(header, "formats", list, where)):
        _validate_format_entry(entry, i)
    need(header, "extra", dict, where, optional=True)
    need(header, "printk_formats", str, where, optional=True)  # the kernel's trace_printk formats (below)
    need(header, "kallsyms", dict, where, optional=True)  # its symbols: kallsyms_text() reads the entry
    need(header, "scope", dict, where, optional=True)  # its entries: npu_trace.pipeline.scope.Scope.from_header
    need(header, "window", dict, where, optional=True)  # a flight recorder's dump: what triggered it, its span
    need(header, "host_identity", dict, where, optional=True)  # npu_trace.recording.host; absent in older files
    need(header, "clock_sync", dict, where, optional=True)
    return header


def header_page_of(header: Dict[str, Any]) -> PageHeader:
    """The page layout a (type-checked) header's `header_page` describes: a RecordingError naming it otherwise."""
    try:
        return parse_header_page(header["header_page"])
    except FormatError as exc:
        raise RecordingError(f"recording header: header_page: {exc}") from None


def _validate_anchor(anchor: Dict[str, Any]) -> None:
    for key in ("mono_ns", "realtime_ns"):
        need(anchor, key, int, "recording header clock_anchor")


def _validate_strings(values: Sequence[Any], key: str) -> None:
    for v in values:
        if not isinstance(v, str):
            raise fail("recording header", f"{key} holds {type(v).__name__} {v!r}, not a string")


def _validate_format_entry(entry: Any, i: int) -> None:
    where = f"recording header formats[{i}]"
    if not isinstance(entry, dict):
        raise fail(where, f"is {type(entry).__name__}, not a map")
    for key in ("system", "name", "text"):
        need(entry, key, str, where)


# ---- the kernel's symbols (header `kallsyms`): /proc/kallsyms, zstd-compressed ------------------------------
MAX_KALLSYMS_STORED = 8 << 20  # compressed: a table larger than this is not stored (the header holds 16 MiB)
MAX_KALLSYMS_ONLY = 64  # the functions a cut table is limited to


def kallsyms_entry(text: str, only: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The header's `kallsyms` entry of a kallsyms text (`only`: the functions a cut table resolves)."""
    raw = text.encode()
    data = zstandard.ZstdCompressor(level=3).compress(raw)
    entry: Dict[str, Any] = {"codec": "zstd", "raw_len": len(raw), "data": data}
    if only is not None:
        entry["only"] = list(only)
    return entry


def kallsyms_text(entry: Dict[str, Any]) -> Tuple[str, Optional[List[str]]]:
    """A header's `kallsyms` entry -> (the kallsyms text, the functions it is cut to or None), every field
    checked and the text decompressed within its declared length (a RecordingError otherwise)."""
    where = "recording header kallsyms"
    raw_len = need_range(entry, "raw_len", where, 0, MAX_KALLSYMS_BYTES)
    codec, data = need(entry, "codec", str, where), need(entry, "data", bytes, where)
    if codec == "zstd":
        raw = _unzstd(data, raw_len, where)
    elif codec == "none":
        raw = data
    else:
        raise fail(where, f"codec {codec!r} is not one of {', '.join(CODECS)}")
    if len(raw) != raw_len:
        raise fail(where, f"holds {len(raw)} bytes, raw_len says {raw_len}")
    only = need(entry, "only", list, where, optional=True)
    if only is not None:
        if len(only) > MAX_KALLSYMS_ONLY:
            raise fail(where, f"cut to {len(only)} functions (at most {MAX_KALLSYMS_ONLY})")
        for name in only:
            if not isinstance(name, str):
                raise fail(where, f"field 'only' holds {type(name).__name__} {name!r}, not a function's name")
    return raw.decode("utf-8", "replace"), only


# ---- records -----------------------------------------------------------------------------------
def record_type(rec: Any, offset: int) -> str:
    if not isinstance(rec, dict):
        raise fail(f"record at byte {offset}", f"is {type(rec).__name__}, not a map")
    return str(need(rec, "t", str, f"record at byte {offset}"))


class DamagedChunk(RecordingError):
    """A chunk whose fields are whole but whose data is not what they say (corrupt zstd, a size unlike raw_len, a
    CRC-32 mismatch): the reader skips it and counts its pages lost (`losses`), the rest of the file is read."""

    def __init__(self, where: str, why: str, cpus: Sequence[int], first_ts: Optional[int]) -> None:
        super().__init__(f"{where}: {why}")
        self.cpus = list(cpus)
        self.first_ts = first_ts if first_ts is not None else 0

    def report(self) -> str:
        """What was skipped and why, in one line: "chunk 3 at byte 9001: CRC-32 mismatch: the data is corrupt:
        its 40 pages skipped (cpu0 30, cpu1 10)"."""
        per_cpu = ", ".join(f"cpu{cpu} {self.cpus.count(cpu)}" for cpu in sorted(set(self.cpus)))
        n = len(self.cpus)
        return f"{self}: its {n} page{'' if n == 1 else 's'} skipped ({per_cpu or 'none'})"

    def losses(self, stamp: int) -> List[Loss]:
        """A loss of an unknown number of events on each CPU the chunk held pages of (LossLedger: flagged), at
        the chunk's first stamp, or at `stamp` when it has none (a recording that kept no stamps per chunk)."""
        at = self.first_ts or stamp
        return [Loss(DAMAGE_SOURCE, cpu, DAMAGED, 0, at) for cpu in sorted(set(self.cpus))]


def decode_chunk(rec: Dict[str, Any], expected_seq: int, offset: int) -> Chunk:
    """A chunk record -> Chunk: fields checked, data decompressed within its declared length, CRC verified. A
    field missing, mistyped, out of bounds or unlike the others is a RecordingError; data that is not what the
    whole fields say is a DamagedChunk."""
    where = f"chunk at byte {offset}"
    seq = need(rec, "seq", int, where)
    if seq != expected_seq:
        raise fail(where, f"sequence number {seq} where {expected_seq} was expected")
    where = f"chunk {seq} at byte {offset}"
    n_pages = need_range(rec, "n_pages", where, 0, MAX_PAGES_PER_CHUNK)
    cpus = need_ints(rec, "cpus", where, 0, MAX_CPU)
    lens = need_ints(rec, "lens", where, 0, MAX_PAGE_BYTES + 1)
    if len(cpus) != n_pages or len(lens) != n_pages:
        raise fail(where, f"{n_pages} pages but {len(cpus)} cpus and {len(lens)} lengths")
    codec = need(rec, "codec", str, where)
    if codec not in CODECS:
        raise fail(where, f"codec {codec!r} is not one of {', '.join(CODECS)}")
    raw_len = need_range(rec, "raw_len", where, 0, MAX_CHUNK_RAW)
    if sum(lens) != raw_len:
        raise fail(where, f"page lengths add up to {sum(lens)}, raw_len says {raw_len}")
    data, crc = need(rec, "data", bytes, where), need(rec, "crc32", int, where)
    first_ts, last_ts = need(rec, "first_ts", int, where, True), need(rec, "last_ts", int, where, True)
    marks = unpack_marks(rec["marks"], n_pages, where) if "marks" in rec else []
    raw, why = _chunk_data(codec, data, raw_len, crc)
    if why:
        raise DamagedChunk(where, why, cpus, first_ts)
    return Chunk(seq, Pages(raw, cpus, lens), first_ts, last_ts, marks, raw)


def _chunk_data(codec: str, data: bytes, raw_len: int, crc: int) -> Tuple[bytes, str]:
    """(the chunk's data, "") or (b"", why it is not the raw_len bytes of CRC-32 `crc` its fields say)."""
    raw, why = _inflate(data, raw_len) if codec == "zstd" else (data, "")
    if why:
        return b"", why
    if len(raw) != raw_len:
        return b"", f"data holds {len(raw)} bytes, raw_len says {raw_len}"
    if chunk_crc32(raw) != crc:
        return b"", "CRC-32 mismatch: the data is corrupt"
    return raw, ""


def _unzstd(data: bytes, raw_len: int, where: str) -> bytes:
    """Decompress one zstd frame, never producing more than raw_len bytes whatever the frame says."""
    raw, why = _inflate(data, raw_len)
    if why:
        raise fail(where, why)
    return raw


def _inflate(data: bytes, raw_len: int) -> Tuple[bytes, str]:
    """(one zstd frame decompressed, "") or (b"", why it cannot be): a frame that declares raw_len bytes (the
    writer's always does), never more made."""
    return unzstd(data, raw_len, "raw_len says", declared=True)


def decode_loss(rec: Dict[str, Any], offset: int) -> Loss:
    where = f"loss record at byte {offset}"
    source, kind = need(rec, "source", str, where), need(rec, "kind", str, where)
    cpu, lost = need_range(rec, "cpu", where, -MAX_CPU, MAX_CPU - 1), need_range(rec, "lost", where, 0, INT64 - 1)
    return Loss(source, cpu, kind, lost, need_range(rec, "ts_ns", where, -INT64, INT64 - 1))


# ---- events of the other channels (kmsg, uevents, npu-smi, ...): already normalized -----------------------
def events_record(events: Sequence[NpuEvent]) -> Dict[str, Any]:
    """An "ev" record: NpuEvents as rows [ts_ns, kind, dev, op, pid, cpu, args] (integers msgpack cannot hold
    are kept as their decimal text)."""
    return {"t": "ev", "rows": [[e.ts_ns, e.kind, e.dev, e.op, e.pid, e.cpu, _packable(e.args)] for e in events]}


def _packable(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (str, float, bytes)):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 64) else str(value)
    if isinstance(value, dict):
        return {str(k): _packable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_packable(v) for v in value]
    return str(value)


def decode_events(rec: Dict[str, Any], offset: int) -> List[NpuEvent]:
    """An "ev" record -> NpuEvents, every field type-checked."""
    where = f"events record at byte {offset}"
    rows = need(rec, "rows", list, where)
    out: List[NpuEvent] = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 7:
            raise fail(where, f"row {i} is not a list of 7 fields")
        ts, kind, dev, op, pid, cpu, args = row
        ok = (
            _is_int(ts) and kind in KINDS and (dev is None or _is_int(dev)) and isinstance(op, str)
            and _is_int(pid) and _is_int(cpu) and isinstance(args, dict)
        )  # fmt: skip
        if not ok:
            raise fail(where, f"row {i} has a field of the wrong type or an unknown kind ({kind!r})")
        if not (-INT64 <= ts < INT64 and -(1 << 31) <= pid < 1 << 31 and -MAX_CPU <= cpu < MAX_CPU
                and (dev is None or -INT64 <= dev < INT64)):  # fmt: skip
            raise fail(where, f"row {i} has a stamp, pid, CPU or device out of what its column holds")
        out.append(NpuEvent(ts, kind, dev, op, pid, cpu, args))
    return out


def event_losses(events: Sequence[NpuEvent]) -> List[Loss]:
    """The "lost" events among the other channels' events, as Loss items (for a loss ledger)."""
    return [event_loss(ev) for ev in events if ev.kind == "lost"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_trailer(rec: Dict[str, Any], chunks: int, offset: int) -> Dict[str, Any]:
    where = f"trailer at byte {offset}"
    for key in ("chunks", "pages", "bytes_raw"):
        need(rec, key, int, where)
    need(rec, "losses", list, where)
    need(rec, "index", list, where)
    if rec["chunks"] != chunks:
        raise fail(where, f"says {rec['chunks']} chunks, the file holds {chunks}")
    return rec


def loss_record(loss: Loss) -> Dict[str, Any]:
    return {"t": "loss", "source": loss.source, "cpu": loss.cpu, "kind": loss.kind, "lost": loss.lost,
            "ts_ns": loss.ts_ns}  # fmt: skip
