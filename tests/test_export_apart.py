"""The drawing of an export in a process of its own (npu_trace.export.apart, npu_trace.export.ship): bytes that do
not depend on where or when a block is drawn, messages that come back as they were sent, an error in the child
raised as the export's own (a failed write: one line), and the child gone, reaped, on every exit path."""

from __future__ import annotations

import errno
import gc
import os
import random
import signal
from typing import Any, List, Optional, Set

import numpy as np
import pytest

import npu_trace.export.direct as direct
import npu_trace.export.output as output
import npu_trace.export.run as export_module
import npu_trace.export.ship as ship
from export_reference import reference_export
from npu_trace.errors import InputError
from npu_trace.export.apart import DrawingError
from npu_trace.export.drawing import BlockDrawing
from npu_trace.export.output import Output
from npu_trace.export.run import Exporter, Request, export
from npu_trace.export.ship import Receiver, Sender, Shared, Slots
from npu_trace.ftrace.columns import FormatColumns, Table
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.recording import RecordingWriter
from npu_trace.sim.scenarios import SCENARIOS, plan
from npu_trace.sim.synth import synth_events
from test_export import _same_bytes, scenario
from test_ftrace_decode import SMALL
from test_timeline import HEADER, reads, spread, synth_header


def children() -> Set[int]:
    """This process's children, running or not yet reaped."""
    mine = f"\nPPid:\t{os.getpid()}\n"
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    if mine in f.read():
                        out.add(int(entry))
            except OSError:
                continue  # it ended meanwhile
    return out


# ---- the bytes ----------------------------------------------------------------------------------------------
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


def test_each_block_is_drawn_with_the_names_known_when_it_was_read(tmp_path: Any, monkeypatch: Any) -> None:
    """The child draws a block while the parent reads the next ones (and the notes that rename processes): the
    names it draws with are those the parent knew when it read the block, as the reference draws them."""
    rec = str(tmp_path / "rec.npt")
    _renamed(rec)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 500)
    before = children()
    for out, fmt in (("out.pftrace", "perfetto"), ("out.json", "chrome-json")):
        fast = export(Request(rec, str(tmp_path / ("fast-" + out)), fmt, progress=False))
        assert children() == before  # the drawing's process, finished, reaped
        assert gc.get_freeze_count() == 0  # what was frozen for the fork is collected again
        ref = reference_export(Request(rec, str(tmp_path / ("ref-" + out)), fmt, progress=False))
        assert (tmp_path / ("fast-" + out)).read_bytes() == (tmp_path / ("ref-" + out)).read_bytes(), out
        assert {**fast, "out": None} == {**ref, "out": None}
    assert b'-0"' in (tmp_path / "fast-out.json").read_bytes()  # the names of the first reads are shown


@pytest.mark.parametrize("name", SCENARIOS)
def test_many_small_blocks_through_the_slots_are_drawn_alike(tmp_path: Any, monkeypatch: Any, name: str) -> None:
    """Every scenario in blocks of 61 rows: each slot of shared memory reused many times, the parent ahead of
    the child (the reference draws each block before the next is read)."""
    rec = str(tmp_path / "rec.npt")
    scenario(rec, name, 5, loss=True)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 61)
    _same_bytes(tmp_path, rec)


def test_the_cluster_s_way_draws_in_the_caller_s_process(tmp_path: Any) -> None:
    """An Exporter given no stream of its own (the cluster's: its writer is shared) forks nothing."""
    from npu_trace.export.perfetto import PerfettoWriter

    rec = str(tmp_path / "rec.npt")
    scenario(rec)
    with open(tmp_path / "out.pftrace", "wb") as f:
        exporter = Exporter(Request(rec, "", "perfetto", progress=False), PerfettoWriter(f))
        before = children()
        summary = exporter.run()
        assert children() == before and not hasattr(exporter.side, "pid")
    assert summary["written"]["slices"] > 100


# ---- the messages ---------------------------------------------------------------------------------------------
class _Plan:
    """Stands for an object both processes hold (a format's column plan)."""


def test_a_message_comes_back_as_sent_its_columns_through_a_slot() -> None:
    down_r, down_w = os.pipe()
    slots, plan_ = Slots(size=4096), _Plan()
    shared = Shared([plan_])
    free = [0, 1]
    sender, receiver = Sender(down_w, slots, shared, free.pop), Receiver(down_r, slots, Shared([plan_]))
    try:
        cols = np.arange(100_000, dtype=np.int64)
        chunk = bytes(range(256)) * 64  # a record buffer (bytes: the decoders take bytes)
        small = np.arange(5, dtype=np.int16)
        assert sender.send(("block", (cols, chunk, chunk, small, plan_, {"x": [1, "a"]}))) == 1  # grown to hold it
        got = receiver.receive()
        assert got is not None
        (name, (c, b1, b2, s, p, d)), held = got
        assert name == "block" and held.slot == 1 and p is plan_ and d == {"x": [1, "a"]}
        assert np.array_equal(c, cols) and np.array_equal(s, small) and b1 == chunk and type(b1) is bytes
        assert b1 is b2  # sent once
        with pytest.raises(BufferError):
            receiver.release(held)  # `c` still reads the slot
        del c, got
        receiver.release(held)
        assert sender.send(("findings", ([], []))) is None  # nothing out of band: no slot taken
        assert receiver.receive() is not None
        other = bytes(8192)
        free.append(0)
        assert sender.send(("block", (chunk, other))) == 0  # the chunk again: not sent again, the other is
        got = receiver.receive()
        assert got is not None and got[0] == ("block", (b1, other)) and got[0][1][0] is b1
        assert len(got[1].views) == 1 and sorted(receiver.records) == [0, 1]  # the first message's chunk kept
        receiver.release(got[1])
    finally:
        os.close(down_w)
        assert receiver.receive() is None  # the sender's end closed
        os.close(down_r)
        slots.close()


def test_a_chunk_no_later_message_names_is_read_in_place_and_let_go_with_its_message() -> None:
    """Sender(later=...): a record buffer (bytes) no later message may name comes back as a memoryview into
    the slot (no copy), dropped from what the receiver holds and released once its message is (a copy of one
    the sender says a later message may name is kept); a table reads a record of one as of bytes."""
    down_r, down_w = os.pipe()
    slots, free = Slots(size=4096), [0, 1]
    kept = bytes(range(256)) * 32
    alone = bytes(reversed(range(256))) * 32
    sender = Sender(down_w, slots, Shared([]), free.pop, later=lambda chunk: chunk is kept)
    receiver = Receiver(down_r, slots, Shared([]))
    try:
        sender.send(("block", (kept, alone)))
        got = receiver.receive()
        assert got is not None
        (_, (k, a)), held = got
        assert type(k) is bytes and k == kept and type(a) is memoryview and a == alone
        assert sorted(receiver.records) == [0, 1]
        table = Table(_plan_of(), np.zeros(1), [a], np.zeros(1, np.int32), np.array([256], np.int64),
                      np.array([16], np.int64))  # fmt: skip
        assert table.row_values(0) == _plan_of().decoder.decode(alone, 256, 16)
        del got
        receiver.release(held)
        assert sorted(receiver.records) == [0]  # the chunk read in place let go with its message
        with pytest.raises(ValueError):
            table.row_values(0)  # and never read after it: the view is released, not left over a reused slot
        del a, table
        free.append(1)
        sender.send(("block", (kept, alone)))  # named again after all: sent again
        got = receiver.receive()
        assert got is not None and got[0][1][0] is k and got[0][1][1] == alone
        held = got[1]
        del got
        receiver.release(held)
    finally:
        os.close(down_w)
        os.close(down_r)
        slots.close()


def _plan_of() -> Any:
    """A format's column plan whose records are 16 bytes (the common fields, two of 4)."""
    return FormatColumns(SMALL)


def test_arrays_come_back_as_sent_a_shared_record_type_by_reference(monkeypatch: Any) -> None:
    """Columns of numbers (any type, byte order, shape, writable or not, 0-d), a table's records of a shared
    record type (sent as its number, not as its fields), and arrays pickle leaves to numpy (not contiguous,
    objects)."""
    down_r, down_w = os.pipe()
    records = np.dtype({"names": ["common_pid", "a_field_name"], "formats": ["<i4", "<u8"], "offsets": [0, 8],
                        "itemsize": 16})  # fmt: skip
    slots, free = Slots(size=4096), [0, 1]
    sender = Sender(down_w, slots, Shared([records]), free.pop)
    receiver = Receiver(down_r, slots, Shared([records]))
    frozen = np.arange(3000, dtype=">u4")
    frozen.flags.writeable = False
    sent = [np.arange(6000, dtype=np.int64).reshape(2, 3000), frozen, np.array([True, False]), np.zeros(0, np.int8),
            np.zeros(1000, dtype=records), np.arange(10_000, dtype=np.int64)[::2],
            np.array([1, "a"], dtype=object), np.array(7, dtype=np.int32)]  # fmt: skip
    sent[4]["a_field_name"] = np.arange(1000)
    body: List[bytes] = []
    write_all = ship.write_all
    monkeypatch.setattr(ship, "write_all", lambda fd, data: (body.append(bytes(data)), write_all(fd, data))[1])
    try:
        sender.send(("block", tuple(sent)))
        got = receiver.receive()
        assert got is not None
        (name, back), held = got
        assert name == "block"
        for a, b in zip(sent, back):
            assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
        assert back[4].dtype is records  # the receiver's own
        assert b"a_field_name" not in body[0]
        del back, got
        receiver.release(held)
    finally:
        os.close(down_w)
        os.close(down_r)
        slots.close()


# ---- the child's errors, and the child gone ----------------------------------------------------------------------
def _failing_draw(monkeypatch: Any, nth: int, fail: Any) -> List[int]:
    drawn = [0]
    draw = BlockDrawing.draw

    def failing(self: BlockDrawing, *args: Any, **kw: Any) -> None:
        drawn[0] += 1
        if drawn[0] == nth:
            fail()
        draw(self, *args, **kw)

    monkeypatch.setattr(BlockDrawing, "draw", failing)
    return drawn


def _export_fails(tmp_path: Any, monkeypatch: Any, expected: Any, match: Optional[str]) -> None:
    rec = str(tmp_path / "rec.npt")
    _renamed(rec)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 500)
    before = children()
    with pytest.raises(expected, match=match):
        export(Request(rec, str(tmp_path / "out.pftrace"), "perfetto", progress=False))
    assert children() == before  # the child ended and reaped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.npt"]  # the partial file removed
    assert gc.get_freeze_count() == 0


def test_an_error_in_the_drawing_is_the_exports_own(tmp_path: Any, monkeypatch: Any) -> None:
    def fail() -> None:
        raise MemoryError("the third block")

    _failing_draw(monkeypatch, 3, fail)
    _export_fails(tmp_path, monkeypatch, MemoryError, "the third block")


def test_a_failed_write_in_the_child_is_one_line(tmp_path: Any, monkeypatch: Any) -> None:
    """A full disk: the child's write fails, through the stream; the export's error names the output and why
    (InputError: the CLI prints it as one line and exits 2)."""
    written = [0]
    write = Output.write

    def full(self: Output, data: Any) -> None:
        written[0] += 1
        if written[0] == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(self, data)

    monkeypatch.setattr(output, "DIRECT", False)
    monkeypatch.setattr(Output, "write", full)
    _export_fails(tmp_path, monkeypatch, InputError, "cannot write .*out.pftrace: No space left on device")


def test_a_failed_direct_write_in_the_child_is_one_line(tmp_path: Any, monkeypatch: Any) -> None:
    """The same, the file written direct (npu_trace.export.direct): the writing thread's second write fails,
    the error is raised by the drawing's next call."""
    written = [0]
    write_all = direct._Writes._all

    def full(self: Any, view: memoryview) -> None:
        assert self.direct >= 0  # the file takes O_DIRECT (the tests' tmp_path is on a file system that does)
        written[0] += 1
        if written[0] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_all(self, view)

    monkeypatch.setattr(direct, "CHUNK", 1 << 16)  # many writes in a small export
    monkeypatch.setattr(direct._Writes, "_all", full)
    _export_fails(tmp_path, monkeypatch, InputError, "cannot write .*out.pftrace: No space left on device")


def test_a_child_killed_is_one_line(tmp_path: Any, monkeypatch: Any) -> None:
    """The child ends without a word (the out-of-memory killer): the export says so."""
    _failing_draw(monkeypatch, 2, lambda: os.kill(os.getpid(), signal.SIGKILL))
    _export_fails(tmp_path, monkeypatch, DrawingError, "drawing process ended unexpectedly \\(signal 9\\)")


def test_the_child_is_ended_when_the_analysis_is_interrupted(tmp_path: Any, monkeypatch: Any) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP: npu_trace.process.Terminated) while the parent analyses: the child, stopped
    meanwhile so that it can end only by being killed, is killed and reaped, the partial file removed."""
    fed = [0]
    feed = Exporter._feed

    def interrupted(self: Exporter, *args: Any) -> None:
        fed[0] += 1
        if fed[0] == 4:
            pid = getattr(self.side, "pid", None)
            assert pid is not None  # the child runs by now
            os.kill(pid, signal.SIGSTOP)
            raise KeyboardInterrupt
        feed(self, *args)

    monkeypatch.setattr(Exporter, "_feed", interrupted)
    _export_fails(tmp_path, monkeypatch, KeyboardInterrupt, None)


def test_a_drawing_process_that_cannot_start_is_one_line(tmp_path: Any, monkeypatch: Any) -> None:
    """fork fails (the user's process limit): one line, nothing left open (pipes, shared memory)."""
    import npu_trace.export.apart as apart

    def no_fork() -> int:
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(apart.os, "fork", no_fork)
    fds = len(os.listdir("/proc/self/fd"))
    _export_fails(tmp_path, monkeypatch, DrawingError, "cannot start the export's drawing process: Resource")
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_scoped_recording_is_drawn_apart_as_in_the_callers_process(tmp_path: Any, monkeypatch: Any) -> None:
    """A recording with a scope takes the per-event path (its events, tasks and memory changes sent as objects):
    drawn in the drawing's process, the bytes are those drawn in the caller's."""
    from npu_trace.export.perfetto import PerfettoWriter

    events = synth_events(plan("ecc-reset", 6, 0.5, 3000, 4))
    enc = PageEncoder(HEADER)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs)
             for cpu, evs in spread(events, 3, 6).items()}  # fmt: skip
    header = synth_header(3)
    header["scope"] = {"device": [1, 2]}
    rec = str(tmp_path / "rec.npt")
    with RecordingWriter(rec, header, chunk_bytes=16 << 10) as w:
        for batch in reads(pages, [], random.Random(6), events[-1].ts_ns + 1):
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
    monkeypatch.setattr(export_module, "EXPORT_ROWS", 500)
    apart = export(Request(rec, str(tmp_path / "apart.pftrace"), "perfetto", progress=False))
    with open(tmp_path / "here.pftrace", "wb") as f:
        here = Exporter(Request(rec, "", "perfetto", progress=False), PerfettoWriter(f)).run()
    assert (tmp_path / "apart.pftrace").read_bytes() == (tmp_path / "here.pftrace").read_bytes()
    assert apart["mapped"] == here["mapped"] and apart["written"]["slices"] > 50
