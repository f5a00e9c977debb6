"""The drawing of one block beside the analysis of the next: jobs run in order in one thread of their own.

An export analyses a block (check's reading, normalizing and detectors) and then draws it; the drawing reads
only the block, what the analysis handed over with it and its own state (the mapper, the tracks, the writer),
so block k can be drawn while block k+1 is analysed, on the machine's other CPU (the C and numpy steps of both
let go of the interpreter's lock). `Overlap.submit(job)` queues a job (they run one after another, in the
order given, in one thread); `wait()` returns once every job given has run (`wait(upto)`: the first `upto`
given, `given` counting them), and raises the first error one raised, as the caller's own (the jobs after a
failed one are not run); `close()` waits for the job running and ends the thread: the exporter calls it on
every exit path, and calls `wait()` before it gives the next block (at most one block waits to be drawn:
memory stays bounded) and before it touches the drawing's state itself. A second lane writes the file
(npu_trace.export.output): the drawing of a block waits, when it ends, for the writing of the block before.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, List, Optional


class Overlap:
    """See the module docstring."""

    def __init__(self) -> None:
        self._pool: Optional[ThreadPoolExecutor] = None
        self._queued: List[Future[None]] = []
        self._failed: Optional[BaseException] = None
        self.given = 0  # jobs given so far
        self._waited = 0  # of them, those waited for

    def submit(self, job: Callable[[], None]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npu-trace-drawing")
        self._queued.append(self._pool.submit(self._guarded, job))
        self.given += 1

    def _guarded(self, job: Callable[[], None]) -> None:
        if self._failed is None:  # after a failure nothing more is drawn: the error ends the export
            try:
                job()
            except BaseException as exc:
                self._failed = exc
                raise

    def wait(self, upto: Optional[int] = None) -> None:
        count = len(self._queued) if upto is None else max(0, min(upto - self._waited, len(self._queued)))
        queued, self._queued = self._queued[:count], self._queued[count:]
        self._waited += count
        for done in queued:
            done.exception()  # wait for each: the first error is raised below, once they all stopped
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Wait for the job running (those still queued are dropped) and end the thread."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._waited += len(self._queued)
        self._queued = []
