"""The flight recorder end to end, offline: a simulated live session (the generator's reads of the simulator's
plan, pages laid out as the kernel lays them out) of a minute of steady load, then the ecc-reset scenario, fed
to `record --flight`'s sink (the ring, the live columnar analysis, the dumps). Exactly one dump: the batches of
its window as they were read, and `check` on it finds the reset with its precursors and nothing else."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

import pytest

from benchmarks.gen_recording import COMM, PID, T0_NS, Run, Spec, kernel_formats
from flight_support import check_the_reset_dump, ecc_expectations, kept_marks, the_one_dump
from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import Finding
from npu_trace.device.profiles import PROFILES
from npu_trace.events import LossLedger
from npu_trace.ftrace.decode import RecordDecoder, build_decoders
from npu_trace.ftrace.format import parse_header_page
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.pipeline.blocktimeline import block_timeline
from npu_trace.sinks.flight.flight_recorder import FlightRecorder, FlightSettings
from npu_trace.sinks.flight.live_flight import LiveFlight
from npu_trace.sources.procs import TaskSnapshot, snapshot_from_header
from npu_trace.sources.replay_source import ReplaySource

S = 1_000_000_000
MS = 1_000_000
CPUS = (0, 1)
PROFILE = PROFILES["sim"]


def fake_session() -> Tuple[SimpleNamespace, Dict[int, RecordDecoder]]:
    """What the recorder reads of a started TracefsSession, for the generator's formats."""
    formats, texts, header_page = kernel_formats()
    page_header = parse_header_page(header_page)
    fmts = list(formats.values())
    ledger = LossLedger()
    session = SimpleNamespace(
        formats=fmts, header=page_header, selected=[f.full_name for f in fmts], clock="mono", cpus=CPUS,
        format_texts=texts, header_page_text=header_page, ledger=ledger, update_loss=lambda: None,
        fs=SimpleNamespace(saved_cmdlines=lambda: {PID + t: COMM for t in range(8)}), scope_header=lambda: None,
        task_snapshot=TaskSnapshot({}, None),
    )  # fmt: skip
    return session, build_decoders(fmts, "little", PROFILE.layouts)


def runs() -> List[Run]:
    """A minute of steady load, then ecc-reset (device 0), back to back on the trace clock."""
    formats, _, header_page = kernel_formats()
    page_header = parse_header_page(header_page)
    steady = Run(Spec("steady", 3, 60.0, 300.0, 2), formats, page_header)
    return [steady, Run(Spec("ecc-reset", 4, 20.0, 300.0, 2), formats, page_header, t0_ns=T0_NS + 61 * S)]


@pytest.fixture(scope="module")
def session_reads() -> Tuple[List[Batch], List[Run]]:
    """Every read of the simulated session, and its runs (their truth)."""
    fed: List[Batch] = []
    plan = runs()
    for run in plan:
        fed.extend(run.batches())
    fed.append(Batch([], [], Mark(plan[-1].end_ns + 5 * S, CPUS, None), final=True))
    return fed, plan


GONE_THREAD = (5_000_001, 5_000_000)  # a thread the live analysis knows and /proc cannot (ids < 2**22)


def fly(directory: str, settings: Dict[str, Any], fed: List[Batch]) -> FlightRecorder:
    """`record --flight`'s sink over the session's reads, then closed as at the session's end."""
    session, decoders = fake_session()
    flight = FlightRecorder(session, FlightSettings(directory=directory, **settings), "sim")  # type: ignore[arg-type]
    analysis = Analysis(PROFILE, tasks=dict([GONE_THREAD]), processes=[GONE_THREAD[1]])
    timeline = block_timeline(session.header, decoders, PROFILE.layouts, "little", ledger=session.ledger, cpus=CPUS)
    sink = LiveFlight(flight, timeline, analysis)
    for batch in fed:
        sink(batch)
    flight.close()
    return flight


def test_one_dump_of_the_incident_with_its_precursors_and_the_whole_sequence(
    tmp_path: Any, session_reads: Tuple[List[Batch], List[Run]]
) -> None:
    directory = str(tmp_path / "dumps")
    fed, (_, ecc) = session_reads
    flight = fly(directory, {"seconds": 30.0, "max_bytes": 64 << 20}, fed)
    path = the_one_dump(directory)
    assert flight.written == [path] and os.path.basename(path).endswith("-dev0-reset.npt")
    source = ReplaySource(path)
    window = source.header["window"]
    assert window["ring"]["evicted"]["segments"] > 0  # the ring had rolled over before the incident
    assert window["from_ns"] == window["requested_from_ns"] == window["trigger"]["ts_ns"] - 30 * S
    assert window["from_ns"] < ecc.t0_ns  # the whole scenario, precursors first, and steady load before it
    # the dump holds the window's reads as they came: every mark from its start to its end
    replayed = [b for b in source.batches() if b.mark is not None]
    end = source.window["to_ns"]  # type: ignore[index]
    assert [b.mark for b in replayed] == kept_marks(fed_kept(fed), window["from_ns"], end)
    checked = check_the_reset_dump(path, ecc_expectations(ecc.tally.expectations()), 0)
    (reset,) = [f for f in checked["report"]["findings"] if f["kind"] == "reset_sequence"]
    assert end >= reset["details"]["steps"][-1]["ts_ns"] + 2 * S  # --after past the sequence's last step
    assert checked["report"]["summary"]["memory"]["live_allocations"] > 0  # live at its end: no leak found
    # the dump's header knows the threads the live analysis knew (over those alive when it was written)
    tasks = snapshot_from_header(source.header["extra"])
    assert tasks.threads[GONE_THREAD[0]] == GONE_THREAD[1] and tasks.processes and GONE_THREAD[1] in tasks.processes


def fed_kept(fed: List[Batch]) -> List[Batch]:
    """The batches a recording keeps (a quiet read's mark about every 100 ms)."""
    from npu_trace.sinks.batch_writer import keeps

    out, last = [], 0
    for b in fed:
        if keeps(b, last):
            out.append(b)
            last = b.mark.read_ns if b.mark is not None else last
    return out


def test_the_byte_bound_holds_less_than_asked_and_the_dump_says_so(tmp_path: Any) -> None:
    """Incompressible pages at 1.6 MiB/s into a 1 MiB ring asked for 600 s: a timeout's dump starts where the
    ring's memory ended, and its header says so."""
    directory = str(tmp_path / "dumps")
    session, _ = fake_session()
    notes: List[str] = []
    settings = FlightSettings(600.0, directory, max_bytes=1 << 20, after_s=2.0)
    flight = FlightRecorder(session, settings, "sim", on_note=notes.append)  # type: ignore[arg-type]
    rng = random.Random(7)
    for t in range(1, 2001):
        flight(Batch([(t % 2, rng.randbytes(4096))], [], Mark(T0_NS + t * 5 * MS, CPUS, None)))
    now = T0_NS + 10 * S
    flight.judge([Finding("timeout", 1, "mbox", now - S, {})], now)
    flight.judge([], now + 2 * S)
    path = the_one_dump(directory)
    assert path.endswith("-dev1-timeout.npt") and flight.written == [path]
    replay = ReplaySource(path)
    assert replay.reader.checksum is not None  # a dump's header carries its checksum, as every file's
    window = replay.header["window"]
    assert window["requested_from_ns"] == now - S - 600 * S
    assert window["held_from_ns"] > now - 3 * S  # about the last MiB: two seconds or so
    assert window["ring"]["evicted"]["early_segments"] > 0  # the byte bound, not the 600 s, let them go
    assert "by the byte bound before 600 s" in flight.summary()
    assert [n.split(":")[0] for n in notes] == ["flight", "flight"] and "dumping to" in notes[0]


def test_a_full_disk_loses_that_dump_counted_and_said_and_the_next_incident_is_dumped(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while a dump is written: it is counted as disk_full, said, its unfinished file removed; the ring
    and the session go on, and once there is room again the next incident's dump is written whole."""
    import errno

    from npu_trace.recording.writer import RecordingWriter

    directory = str(tmp_path / "dumps")
    session, _ = fake_session()
    notes: List[str] = []
    settings = FlightSettings(5.0, directory, after_s=2.0, gap_s=0.0)
    flight = FlightRecorder(session, settings, "sim", on_note=notes.append)  # type: ignore[arg-type]
    real_write = RecordingWriter._write
    full = {"on": True}

    def write(self: RecordingWriter, blob: bytes) -> None:
        if full["on"] and self.bytes_written > 0:  # the header went out, the first chunk does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, blob)

    monkeypatch.setattr(RecordingWriter, "_write", write)
    rng = random.Random(3)
    t = 0

    def read(n: int) -> None:
        nonlocal t
        for _ in range(n):
            t += 1
            flight(Batch([(t % 2, rng.randbytes(4096))], [], Mark(T0_NS + t * 10 * MS, CPUS, None)))

    read(500)  # 5 s
    flight.judge([Finding("timeout", 0, "mbox", T0_NS + 4 * S, {})], T0_NS + 5 * S)
    read(300)
    flight.judge([], T0_NS + 8 * S)
    assert flight.errors == {"disk_full": 1} and flight.written == [] and flight.writing() is None
    assert os.listdir(directory) == []  # nothing unfinished left holding the disk
    assert any("failed (disk full)" in n and "not kept" in n for n in notes), notes
    full["on"] = False
    flight.judge([Finding("timeout", 1, "mbox", T0_NS + 7 * S, {})], T0_NS + 8 * S)
    read(300)
    flight.judge([], T0_NS + 11 * S)
    path = the_one_dump(directory)
    assert path.endswith("-dev1-timeout.npt")
    stats = flight.stats()
    assert stats["dumps_written"] == 1 and stats["errors"] == {"disk_full": 1} and stats["incidents"] == 2
    assert "1 disk full" in flight.summary()
    replay = ReplaySource(path)
    assert sum(len(b.pages) for b in replay.batches()) > 0
    assert replay.window is not None and replay.window["closed"] == "quiet"  # the trailer, read at the end


@pytest.mark.parametrize("fails", ["header", "rename"])
def test_a_dump_that_fails_at_its_header_or_its_rename_leaves_no_partial_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """ENOSPC before the dump's header is whole (a disk fuller than one header), or a rename refused once the
    dump is closed: the failure is counted and said, and no `.partial` is left in the directory."""
    import errno

    from npu_trace.recording.writer import RecordingWriter

    directory = str(tmp_path / "dumps")
    session, _ = fake_session()
    notes: List[str] = []
    flight = FlightRecorder(session, FlightSettings(5.0, directory, after_s=2.0, gap_s=0.0), "sim",  # type: ignore[arg-type]
                            on_note=notes.append)  # fmt: skip
    if fails == "header":

        def write(self: RecordingWriter, blob: bytes) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(RecordingWriter, "_write", write)
    else:

        def replace(src: str, dst: str) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "replace", replace)
    rng = random.Random(3)
    for t in range(1, 801):
        flight(Batch([(t % 2, rng.randbytes(4096))], [], Mark(T0_NS + t * 10 * MS, CPUS, None)))
        if t == 500:
            flight.judge([Finding("timeout", 0, "mbox", T0_NS + 4 * S, {})], T0_NS + 5 * S)
    flight.judge([], T0_NS + 11 * S)
    assert flight.errors == {"disk_full": 1} and flight.written == [] and flight.writing() is None
    assert os.listdir(directory) == []
    assert any("failed (disk full)" in n and "not kept" in n for n in notes), notes
