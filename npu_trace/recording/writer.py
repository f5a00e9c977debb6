"""Writing `.npt` recordings: raw ftrace pages in self-contained chunks, appended with plain `os.write`.

Each page is stored up to the last byte its readers read (`npu_trace.ftrace.framing.used_length`): a page read
before it filled carries the ring buffer's leftover bytes after its commit, often most of it, and those are left
out of the chunk (less to compress, checksum, decompress and hold in memory).

No Python buffering: a chunk is on disk (in the page cache) as soon as it is flushed, so a SIGKILL loses at
most the chunk being filled (bounded by `chunk_bytes` and `flush_interval`). `fsync=True` also survives a
power cut, at the cost of one fsync per chunk.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from functools import lru_cache
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import msgpack
import zstandard

import npu_trace
from npu_trace.errors import RecordingError
from npu_trace.events import Loss, LossLedger, NpuEvent
from npu_trace.ftrace.format import PageHeader
from npu_trace.ftrace.framing import commit_reader, used_length
from npu_trace.pipeline.batch import Mark
from npu_trace.recording.host import SimulatedHost, this_host
from npu_trace.recording.schema import (
    CHECKSUM_KEY,
    CODECS,
    MAGIC,
    MAX_CHUNK_RAW,
    MAX_EVENT_ROWS,
    MAX_KALLSYMS_STORED,
    MAX_PAGE_BYTES,
    MAX_PAGES_PER_CHUNK,
    SCHEMA_VERSION,
    chunk_crc32,
    event_losses,
    events_record,
    header_page_of,
    kallsyms_entry,
    loss_record,
    pack_header,
    pack_mark,
    validate_header,
)

DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_FLUSH_INTERVAL = 1.0


def clock_anchor() -> Dict[str, int]:
    """CLOCK_MONOTONIC and CLOCK_REALTIME read together (the realtime read is bracketed by two mono reads)."""
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    real = time.time_ns()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return {"mono_ns": (before + after) // 2, "realtime_ns": real}


def build_header(
    session: Any,
    profile_name: str,
    format_texts: Mapping[str, str],
    header_page_text: str,
    extra: Optional[Dict[str, Any]] = None,
    host: Optional[SimulatedHost] = None,
) -> Dict[str, Any]:
    """The header of a recording of a started TracefsSession (duck-typed: .formats, .header, .selected, .clock).

    `format_texts` maps "system:name" to the tracefs format text of every format in `session.formats`
    (from `Tracefs.event_format`); `header_page_text` is events/header_page. The host's identity and clock-sync
    state (npu_trace.recording.host) are this host's, or the simulated `host`'s.
    """
    uname = os.uname()
    header: Dict[str, Any] = {
        "tool_version": npu_trace.__version__,
        "host": socket.gethostname(),
        "kernel": uname.release,
        "machine": uname.machine,
        "cpus": os.cpu_count() or 0,
        "byteorder": sys.byteorder,
        "clock": session.clock,
        "clock_anchor": clock_anchor(),
        "profile": profile_name,
        "events": list(session.selected),
        "trace_cpus": list(getattr(session, "cpus", ())),
        "formats": _format_entries(session.formats, format_texts),
        "header_page": header_page_text,
        "page_size": session.header.page_size if session.header is not None else 0,
        "created_by": f"npu-trace {npu_trace.__version__} (npu_trace.recording, tracefs raw pages)",
    }
    header.update(this_host() if host is None else host.header())
    if host is not None:
        header["clock_anchor"] = host.anchor(header["clock_anchor"])
    header.update(kernel_fields(getattr(session, "tables", None)))
    scope = getattr(session, "scope_header", None)
    entry = scope() if callable(scope) else None
    if entry:
        header["scope"] = entry  # what was traced and where it was applied (npu_trace.pipeline.scope)
    if extra:
        header["extra"] = dict(extra)
    return header


def kernel_fields(tables: Any) -> Dict[str, Any]:
    """The header's `printk_formats` and `kallsyms` of a session's kernel tables (duck-typed: .printk_formats,
    .kallsyms, .only; npu_trace.sources.kernel_tables); a kallsyms too big for the header is left out."""
    out: Dict[str, Any] = {}
    if tables is None:
        return out
    if tables.printk_formats:
        out["printk_formats"] = tables.printk_formats
    if tables.kallsyms:
        entry = _kallsyms_entry(tables.kallsyms, tables.only)
        if len(entry["data"]) <= MAX_KALLSYMS_STORED:
            out["kallsyms"] = entry
    return out


@lru_cache(maxsize=2)
def _kallsyms_entry(text: str, only: Optional[Tuple[str, ...]]) -> Dict[str, Any]:
    """Compressed once per session (rotated files and flight dumps write it again)."""
    return kallsyms_entry(text, only)


def _format_entries(formats: Any, texts: Mapping[str, str]) -> List[Dict[str, str]]:
    entries = []
    for fmt in formats:
        if fmt.full_name not in texts:
            raise RecordingError(f"no format text for {fmt.full_name}: the recording could not be decoded")
        entries.append({"system": fmt.system, "name": fmt.name, "text": texts[fmt.full_name]})
    return entries


DEFAULT_MODE = 0o600  # a recording holds what only root may read on the host (kernel log, process names)


def _open_excl(path: str, overwrite: bool, mode: int = DEFAULT_MODE) -> int:
    """The new file, with exactly `mode` (whatever the umask, and also when an existing file is replaced)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise RecordingError(f"{path} already exists: refusing to overwrite a recording") from None
    except OSError as exc:
        raise RecordingError(f"cannot create recording {path}: {exc.strerror}", exc.errno) from None
    try:
        os.fchmod(fd, mode)
    except OSError as exc:
        os.close(fd)
        raise RecordingError(f"cannot set the mode of recording {path}: {exc.strerror}") from None
    return fd


# zstd level of the chunks: on trace pages level 1 compresses 1.4-2x faster than 3 (the recorder and the flight
# ring do it on the reader's CPU) to within 1% of its size (measured on the simulator's and generated recordings)
ZSTD_LEVEL = 1


class PageCut:
    """A page of this layout cut after the bytes its readers read (`used_length`); a page shorter than its
    header, or whose commit counts past its end, is kept whole (read as it is: malformed)."""

    def __init__(self, page: PageHeader, byteorder: str) -> None:
        self._commit = commit_reader(page.commit_offset, page.commit_size, byteorder)
        self._word, self._data = page.commit_size, page.data_offset

    def __call__(self, page: bytes) -> bytes:
        size = len(page)
        if size < self._data:
            return page
        used = used_length(size, self._commit(page), self._data, self._word)
        return page if used == size else page[:used]


class RecordingWriter:
    """Appends pages and loss records to a new `.npt` file. Use as a context manager; `close()` is idempotent."""

    def __init__(
        self,
        path: str,
        header_fields: Dict[str, Any],
        *,
        compression: str = "zstd",
        level: int = ZSTD_LEVEL,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        fsync: bool = False,
        overwrite: bool = False,
        before_chunk: Optional[Callable[[RecordingWriter], None]] = None,
        mode: int = DEFAULT_MODE,
    ) -> None:
        """`before_chunk(writer)`: called before each chunk is written (a note it adds goes before it).
        `mode`: the file's permissions (default 0600: private to its owner)."""
        if compression not in CODECS:
            raise RecordingError(f"compression {compression!r} is not one of {', '.join(CODECS)}")
        if not 0 < chunk_bytes <= MAX_CHUNK_RAW - MAX_PAGE_BYTES:
            raise RecordingError(f"chunk_bytes {chunk_bytes} outside (0, {MAX_CHUNK_RAW - MAX_PAGE_BYTES}]")
        header = dict(header_fields, magic=MAGIC.decode(), schema=SCHEMA_VERSION, compression=compression)
        header.pop(CHECKSUM_KEY, None)  # a header copied from another file: its checksum is made anew
        validate_header(header)
        self.path = path
        self.compression = compression
        self.chunk_bytes = chunk_bytes
        self.flush_interval = flush_interval
        self.fsync = fsync
        self.before_chunk = before_chunk
        self.ledger = LossLedger()
        self._zstd = zstandard.ZstdCompressor(level=level) if compression == "zstd" else None
        self._cut = PageCut(header_page_of(header), header["byteorder"])
        self._pending: List[Tuple[int, bytes]] = []
        self._pending_bytes = 0
        self._pending_ts: List[int] = []
        self._pending_losses: List[Loss] = []
        self._pending_notes: List[Dict[str, Any]] = []
        self._pending_marks: List[List[Any]] = []
        self._started = 0.0
        self._index: List[Tuple[int, int]] = []
        self._pages = self._bytes_raw = self._bytes_written = self._events = 0
        self._fd: Optional[int] = _open_excl(path, overwrite, mode)
        try:
            self._write(pack_header(header))  # the preamble, then the header map, its checksum last
        except RecordingError:  # no writer to close comes back: its descriptor is closed here
            os.close(self._fd)
            self._fd = None
            raise

    # ---- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        """Closed with its trailer when the block ended whole; else without one (`abandon`)."""
        if kind is None:
            self.close()
        else:
            self.abandon()

    def abandon(self) -> None:
        """Close without flushing or a trailer: the writing did not end, and the file reads as cut there."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self, totals: Optional[Dict[str, Any]] = None) -> None:
        """Flush, write the trailer and close. `totals` may hold "losses" (LossLedger rows, else the writer's
        own ledger) and any other counters, kept under the trailer's "totals"."""
        if self._fd is None:
            return
        try:
            self.flush()
            self._write(msgpack.packb(self._trailer(dict(totals or {})), use_bin_type=True))
            if self.fsync:
                os.fsync(self._fd)
        finally:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _trailer(self, totals: Dict[str, Any]) -> Dict[str, Any]:
        losses = totals.pop("losses", None)
        rows = [list(r) for r in (self.ledger.rows() if losses is None else losses)]
        trailer = {"t": "trailer", "chunks": len(self._index), "pages": self._pages, "bytes_raw": self._bytes_raw}
        trailer.update(losses=rows, index=[list(i) for i in self._index], totals=totals)
        return trailer

    # ---- data ----------------------------------------------------------------------------------
    def add_page(self, cpu: int, page: bytes, ts_ns: Optional[int] = None) -> None:
        """Queue one raw page read from `cpu` (ts_ns: its timestamp when the caller knows it, for the index), cut
        after the bytes its readers read (`PageCut`)."""
        if len(page) > MAX_PAGE_BYTES:
            raise RecordingError(f"page of {len(page)} bytes exceeds the {MAX_PAGE_BYTES}-byte limit")
        if not self._pending and not self._pending_marks:
            self._started = time.monotonic()
        kept = self._cut(bytes(page))
        self._pending.append((cpu, kept))
        self._pending_bytes += len(kept)
        if ts_ns is not None:
            self._pending_ts.append(ts_ns)
        if self._pending_bytes >= self.chunk_bytes or len(self._pending) >= MAX_PAGES_PER_CHUNK:
            self.flush()

    def add_mark(self, mark: Mark) -> None:
        """Queue the mark of the read whose pages were just added (it goes in their chunk, after them), so that
        a replay's timeline releases events exactly as the live one did."""
        if not self._pending and not self._pending_marks:
            self._started = time.monotonic()
        self._pending_marks.append(pack_mark(len(self._pending), mark))

    def add_loss(self, loss: Loss) -> None:
        """Queue a loss record; it is written after the chunk holding the pages queued before it."""
        self.ledger.add(loss)
        self._pending_losses.append(loss)
        if not self._pending:
            self._started = time.monotonic()

    def add_events(self, events: Sequence[NpuEvent]) -> None:
        """Write events of the other channels (kmsg, uevents, npu-smi, ...), already normalized. The pages queued
        before them go out first, so the file keeps the order in which the pipeline received everything.
        Their "lost" events also count in the trailer's loss totals."""
        if not events:
            return
        self.flush()
        for loss in event_losses(events):
            self.ledger.add(loss)
        blob = b"".join(
            msgpack.packb(events_record(events[i : i + MAX_EVENT_ROWS]), use_bin_type=True)
            for i in range(0, len(events), MAX_EVENT_ROWS)
        )
        self._write(blob)
        self._events += len(events)

    @property
    def events_written(self) -> int:
        """Events written with add_events."""
        return self._events

    def add_note(self, note: Dict[str, Any]) -> None:
        """Queue a note (a free map, e.g. {"comms": {pid: name}}); it is written before the next chunk, so a
        reader knows it before the pages queued with it."""
        self._pending_notes.append(dict(note, t="note"))
        if not self._pending and not self._pending_losses:
            self._started = time.monotonic()

    def maybe_flush(self, now: float) -> bool:
        """Flush when the queued data is older than flush_interval (now: time.monotonic()). True if flushed."""
        queued = self._pending or self._pending_losses or self._pending_notes or self._pending_marks
        if queued and now - self._started >= self.flush_interval:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Write the queued notes, the queued pages as one chunk, then the queued loss records."""
        if self._fd is None:
            raise RecordingError(f"recording {self.path} is closed")
        if self.before_chunk is not None and (self._pending or self._pending_marks):
            self.before_chunk(self)
        blob = b"".join(msgpack.packb(note, use_bin_type=True) for note in self._pending_notes)
        self._pending_notes.clear()
        blob += self._chunk_bytes() if self._pending or self._pending_marks else b""
        blob += b"".join(msgpack.packb(loss_record(loss)) for loss in self._pending_losses)
        self._pending_losses.clear()
        if blob:
            self._write(blob)
            if self.fsync:
                os.fsync(self._fd)

    def _chunk_bytes(self) -> bytes:
        raw = b"".join(page for _, page in self._pending)
        data = self._zstd.compress(raw) if self._zstd is not None else raw
        rec: Dict[str, Any] = {"t": "chunk", "seq": len(self._index), "codec": self.compression}
        rec.update(n_pages=len(self._pending), cpus=[c for c, _ in self._pending])
        rec.update(lens=[len(p) for _, p in self._pending], raw_len=len(raw), crc32=chunk_crc32(raw))
        if self._pending_ts:
            rec.update(first_ts=min(self._pending_ts), last_ts=max(self._pending_ts))
        if self._pending_marks:
            rec["marks"] = self._pending_marks
        rec["data"] = data
        self._index.append((len(self._index), self._bytes_written))
        self._pages += len(self._pending)
        self._bytes_raw += len(raw)
        self._pending, self._pending_bytes, self._pending_ts, self._pending_marks = [], 0, [], []
        return bytes(msgpack.packb(rec, use_bin_type=True))

    def _write(self, blob: bytes) -> None:
        assert self._fd is not None
        view = memoryview(blob)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
                self._bytes_written += n
        except OSError as exc:
            raise RecordingError(f"writing recording {self.path}: {exc.strerror}", exc.errno) from None

    # ---- counters ------------------------------------------------------------------------------
    @property
    def bytes_written(self) -> int:
        return self._bytes_written

    @property
    def pages(self) -> int:
        """Pages written to the file (queued pages not included)."""
        return self._pages

    @property
    def chunks(self) -> int:
        return len(self._index)

    @property
    def closed(self) -> bool:
        return self._fd is None
