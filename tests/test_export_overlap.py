"""The drawing of a block beside the analysis of the next (npu_trace.export.overlap): jobs in order, an error
raised as the export's own, the thread ended on every exit path, and bytes that do not depend on when the
drawing runs (the process names each block is drawn with are those known when it was read)."""

from __future__ import annotations

import io
import random
import threading
from typing import Any, Callable, List, Optional

import pytest

import npu_trace.export.run as export_module
from export_reference import reference_export
from npu_trace.export.drawing import BlockDrawing
from npu_trace.export.overlap import Overlap
from npu_trace.export.perfetto import PerfettoWriter
from npu_trace.export.run import Request, export
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.recording import RecordingWriter
from npu_trace.sim.scenarios import SCENARIOS, plan
from npu_trace.sim.synth import synth_events
from test_export import _same_bytes, scenario
from test_timeline import HEADER, reads, spread, synth_header


def _drawing_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("npu-trace-drawing")]


def test_jobs_run_in_order_in_one_thread_and_the_first_error_is_raised() -> None:
    overlap, ran, threads = Overlap(), [], set()

    def job(k: int) -> Callable[[], None]:
        def run() -> None:
            threads.add(threading.get_ident())
            ran.append(k)
            if k == 3:
                raise KeyError("drawing failed")

        return run

    for k in range(6):
        overlap.submit(job(k))
    with pytest.raises(KeyError, match="drawing failed"):
        overlap.wait()
    overlap.close()
    assert ran == [0, 1, 2, 3]  # nothing drawn after the failure
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert not _drawing_threads()


def test_close_ends_the_thread_while_jobs_are_queued() -> None:
    overlap, started, release = Overlap(), threading.Event(), threading.Event()
    ran: List[int] = []

    def held() -> None:
        started.set()
        release.wait(10)
        ran.append(0)

    overlap.submit(held)
    overlap.submit(lambda: ran.append(1))
    assert started.wait(10)
    release.set()
    overlap.close()  # waits for the job running; the one queued is dropped
    assert ran == [0] and not _drawing_threads()


# ---- the export -----------------------------------------------------------------------------------------------
def _renamed(path: str, seed: int = 4) -> None:
    """A recording (a scenario spread over 3 CPUs, cut into reads) whose processes are renamed between reads."""
    events = synth_events(plan("ecc-reset", seed, 0.5, 3000, 4))
    enc = PageEncoder(HEADER)
    per_cpu = spread(events, 3, seed)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    pids = sorted({e.pid for e in events})
    with RecordingWriter(path, synth_header(3), chunk_bytes=16 << 10) as w:
        for i, batch in enumerate(reads(pages, [], random.Random(seed), events[-1].ts_ns + 1)):
            if i % 3 == 0:
                w.add_note({"comms": {str(pid): f"task{pid}-{i}" for pid in pids}})
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
            if batch.mark is not None:
                w.add_mark(batch.mark)


class _Late(Overlap):
    """The latest the drawing and the writing may run: each job when it is waited for (a block drawn after the
    next was read, its bytes written after the next was drawn)."""

    def __init__(self) -> None:
        super().__init__()
        self.later: List[Callable[[], None]] = []

    def submit(self, job: Callable[[], None]) -> None:
        self.later.append(job)
        self.given += 1

    def wait(self, upto: Optional[int] = None) -> None:
        count = len(self.later) if upto is None else max(0, min(upto - self._waited, len(self.later)))
        jobs, self.later = self.later[:count], self.later[count:]
        self._waited += count
        for job in jobs:
            job()


@pytest.mark.parametrize("overlap", [Overlap, _Late])
def test_the_bytes_do_not_depend_on_when_a_block_is_drawn(tmp_path: Any, monkeypatch: Any, overlap: Any) -> None:
    rec = str(tmp_path / "rec.npt")
    _renamed(rec)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 500)
    monkeypatch.setattr(export_module, "Overlap", overlap)
    for out, fmt in (("out.pftrace", "perfetto"), ("out.json", "chrome-json")):
        fast = export(Request(rec, str(tmp_path / ("fast-" + out)), fmt, progress=False))
        ref = reference_export(Request(rec, str(tmp_path / ("ref-" + out)), fmt, progress=False))
        assert (tmp_path / ("fast-" + out)).read_bytes() == (tmp_path / ("ref-" + out)).read_bytes(), out
        assert {**fast, "out": None} == {**ref, "out": None}
    assert b"-0\"" in (tmp_path / "fast-out.json").read_bytes()  # the names of the first reads are shown


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_block_drawn_after_the_next_is_analysed_is_drawn_alike(tmp_path: Any, monkeypatch: Any, name: str) -> None:
    """Every scenario in blocks of 61 rows, each block drawn only once the next was analysed and its bytes written
    only once the next was drawn: the analysis of a block leaves what the drawing of the one before reads as it
    was (the reference draws each block before the next is read)."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, name, 5, loss=True)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 61)
    monkeypatch.setattr(export_module, "Overlap", _Late)
    _same_bytes(tmp_path, rec)


def test_the_file_is_written_in_order_beside_the_drawing(tmp_path: Any, monkeypatch: Any) -> None:
    """The writer's lane: jobs given in order are written in order, the bytes counted, waited for up to a
    mark (the blocks before), an error in it raised where the drawing waits."""
    out = io.BytesIO()
    writer = PerfettoWriter(out)
    lane = writer.output.lane = Overlap()
    try:
        writer.put(b"a")
        view = bytearray(b"bc")
        writer.put(memoryview(view))  # a view into a buffer the caller reuses: copied
        view[:] = b"xx"
        writer.assembled(lambda buf: (buf.__setitem__(slice(0, 2), b"de"), 2)[1])
        mark = lane.given
        lane.wait(mark)
        assert out.getvalue() == b"abcde" and writer.counts["bytes"] == 5
        writer.assembled(lambda buf: 1 // 0)
        with pytest.raises(ZeroDivisionError):
            lane.wait()
    finally:
        lane.close()
    assert not _drawing_threads()


def test_an_error_in_the_drawing_is_the_exports_own(tmp_path: Any, monkeypatch: Any) -> None:
    rec = str(tmp_path / "rec.npt")
    _renamed(rec)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 500)
    drawn = [0]
    draw = BlockDrawing.draw

    def failing(self: BlockDrawing, *args: Any, **kw: Any) -> None:
        drawn[0] += 1
        if drawn[0] == 3:
            raise MemoryError("the third block")
        draw(self, *args, **kw)

    monkeypatch.setattr(BlockDrawing, "draw", failing)
    with pytest.raises(MemoryError, match="the third block"):
        export(Request(rec, str(tmp_path / "out.pftrace"), "perfetto", progress=False))
    assert drawn[0] == 3
    assert not _drawing_threads()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.npt"]  # the partial file removed
