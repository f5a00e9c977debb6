"""The recorder sink: raw pages of a tracefs session into `.npt` files, with size/time rotation.

Pages are written as the kernel produced them (decoded lazily on replay), so recording costs no decoding.
The kernel's per-CPU loss counters are written as loss records: at each rotation the losses since the previous
file, so every file says what it is missing.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from npu_trace.events import Loss
from npu_trace.ftrace.framing import is_malformed
from npu_trace.pipeline.batch import Batch
from npu_trace.recording.host import SimulatedHost
from npu_trace.recording.writer import DEFAULT_MODE, RecordingWriter, build_header
from npu_trace.sinks.batch_writer import MARK_EVERY_NS, BatchWriter
from npu_trace.sources.comm import saved_comms
from npu_trace.sources.procs import TaskSnapshot, task_snapshot
from npu_trace.sources.tracefs_source import TracefsSession

__all__ = ["MARK_EVERY_NS", "Recorder", "new_losses", "numbered", "proc_comms", "session_header"]


def numbered(path: str, index: int) -> str:
    """run.npt, 3 -> run.0003.npt (rotation keeps the extension last)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.{index:04d}{ext or '.npt'}"


def proc_comms(proc: str = "/proc") -> Dict[str, str]:
    """pid -> comm of every process now (msgpack map keys as strings)."""
    out: Dict[str, str] = {}
    for name in os.listdir(proc):
        if name.isdigit():
            try:
                with open(f"{proc}/{name}/comm") as f:
                    out[name] = f.read().strip()
            except OSError:  # the process exited meanwhile
                continue
    return out


def session_header(session: TracefsSession, profile: str, extra: Dict[str, Any], tasks: Optional[TaskSnapshot] = None,
                   host: Optional[SimulatedHost] = None) -> Dict[str, Any]:  # fmt: skip
    """The header of a recording of this started session: its formats, header_page, scope, which process each
    thread belongs to (trace events name threads: per-process accounting on replay; `tasks`, by default the
    session's tasks when tracing began, the map the live analysis starts from); `extra` as given; `host`: a
    simulated host's identity and clock instead of this host's."""
    known = session.task_snapshot if tasks is None else tasks
    return build_header(session, profile, session.format_texts, session.header_page_text,
                        {**known.header(), **extra}, host)  # fmt: skip


class Recorder:
    """Receives the pump's batches (raw pages, the channels' events, the reads' marks); rotates by size and/or
    time. Every read's mark with data is kept, a quiet read's about every 100 ms: a replay's timeline then
    releases events as the live one did (a little later where quiet marks were left out)."""

    def __init__(
        self,
        session: TracefsSession,
        path: str,
        profile: str,
        *,
        compression: str = "zstd",
        max_size: Optional[int] = None,
        max_time: Optional[float] = None,
        overwrite: bool = False,
        extra: Optional[Dict[str, Any]] = None,
        mode: int = DEFAULT_MODE,
        host: Optional[SimulatedHost] = None,
    ) -> None:
        self.session = session
        self.host = host  # a simulated host (npu-trace sim cluster): its identity and clock in every file
        self.extra = dict(extra or {})  # more for the header's "extra" (e.g. {"channels": Channels.header()})
        self.channel_events = 0
        self.path = path
        self.profile = profile
        self.compression = compression
        self.max_size = max_size
        self.max_time = max_time
        self.overwrite = overwrite
        self.mode = mode
        self.rotating = max_size is not None or max_time is not None
        self.files: List[str] = []
        self.bytes_done = 0  # bytes of the files already closed
        self.pages = 0
        self._reported: Dict[Tuple[str, str, int], int] = {}
        self._opened_at = 0.0
        self._known_comms: Dict[str, str] = {}
        self._tasks: Optional[TaskSnapshot] = None  # the task map of the file before (None: the first file)
        self.writer: Optional[RecordingWriter] = None
        self._write: Optional[BatchWriter] = None
        self._open()

    def _open(self) -> None:
        path = numbered(self.path, len(self.files) + 1) if self.rotating else self.path
        comms = proc_comms()  # names of the processes alive at the start, for replay's display
        # the first file starts from the session's map; a rotated one from the tasks now over the file before's
        if self.files:
            self._tasks = task_snapshot().merged(self._tasks or self.session.task_snapshot)
        header = session_header(self.session, self.profile, {**self.extra, "comms": comms}, self._tasks, self.host)
        self.writer = RecordingWriter(path, header, compression=self.compression, overwrite=self.overwrite,
                                      before_chunk=lambda w: self._note_comms(w), mode=self.mode)  # fmt: skip
        self._write = BatchWriter(self.writer)
        self.files.append(path)
        self._opened_at = time.monotonic()
        self._known_comms = dict(comms)

    @property
    def bytes_written(self) -> int:
        return self.bytes_done + (self.writer.bytes_written if self.writer is not None else 0)

    def __call__(self, batch: Batch) -> None:
        writer, write = self.writer, self._write
        assert writer is not None and write is not None
        write(batch)
        self.channel_events += len(batch.events)
        self.pages += len(batch.pages)
        now = time.monotonic()
        writer.maybe_flush(now)
        if self._due(writer, now):
            self._finish_file()
            self._open()

    def _due(self, writer: RecordingWriter, now: float) -> bool:
        if self.max_size is not None and writer.bytes_written >= self.max_size:
            return True
        return self.max_time is not None and now - self._opened_at >= self.max_time

    def _note_comms(self, writer: RecordingWriter) -> None:
        """A note with the process names the kernel saved since the last one, before each chunk (a process or
        thread started after the file's header was written would otherwise be nameless on replay)."""
        saved = saved_comms(getattr(self.session, "fs", None))
        new = {str(pid): comm for pid, comm in saved.items() if self._known_comms.get(str(pid)) != comm}
        if new:
            self._known_comms.update(new)
            writer.add_note({"comms": new})

    def _finish_file(self) -> None:
        writer, self.writer = self.writer, None
        if writer is None:
            return
        self._note_comms(writer)
        self.session.update_loss()
        for loss in self._new_losses():
            writer.add_loss(loss)
        writer.close()
        self.bytes_done += writer.bytes_written

    def _new_losses(self) -> List[Loss]:
        """The kernel counters' growth since the last file (page-missed flags travel inside the pages)."""
        return new_losses(self.session.ledger.rows(), self._reported)

    def close(self) -> None:
        """Write the last losses and the trailer (call after the session stopped: its counters are final)."""
        self._finish_file()


def new_losses(rows: Iterable[Sequence[Any]], reported: Dict[Tuple[str, str, int], int]) -> List[Loss]:
    """The growth of a session's loss counters (`LossLedger.rows()`) since `reported` (updated to them), as
    loss records; page-missed flags and malformed records are left out: they travel inside the pages and
    reappear on decode."""
    out = []
    for source, kind, cpu, total in rows:
        if kind == "page_missed" or is_malformed(kind):
            continue
        key = (source, kind, cpu)
        delta = total - reported.get(key, 0)
        reported[key] = total
        if delta:
            out.append(Loss(source, cpu, kind, delta, 0))
    return out
