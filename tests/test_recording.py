"""Recordings: round trip against the golden capture, truncation everywhere, crash safety, refusal to overwrite."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import zlib
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

import msgpack
import pytest

from goldens import kernel_dirs, load_formats, load_pages, read
from npu_trace.errors import InputError, RecordingError
from npu_trace.events import Loss, NpuEvent, TraceEvent
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.tracefs import parse_saved_cmdlines
from npu_trace.pipeline import Batch
from npu_trace.recording import RecordingReader, RecordingWriter, build_header
from npu_trace.recording.schema import PREAMBLE, Pages, chunk_crc32, event_losses
from npu_trace.recording.writer import PageCut
from npu_trace.sources.replay_source import ReplaySource
from reference.pages import PageDecoder, iter_events

ROOT = next(d for d in kernel_dirs() if "6.18.44" in d)
PAGE = 4096


def golden_header(root: str = ROOT, only: Tuple[str, ...] = ()) -> Dict[str, Any]:
    page_header, formats = load_formats(root)
    if only:
        formats = [f for f in formats if f.full_name in only]
    texts = {f.full_name: read(os.path.join(root, "events", f.system, f.name, "format")) for f in formats}
    session = SimpleNamespace(
        formats=formats, header=page_header, selected=[f.full_name for f in formats], clock="mono"
    )
    return build_header(session, "test", texts, read(os.path.join(root, "header_page")), extra={"run": 1})


def write(path: str, pages: List[Tuple[int, bytes]], per_chunk: int = 0, **kw: Any) -> None:
    """`pages` recorded (a loss after the sixth); `per_chunk`: a chunk of that many pages each (else the writer
    cuts its chunks by `chunk_bytes`)."""
    header = kw.pop("header", None) or golden_header()
    with RecordingWriter(path, header, **kw) as w:
        for i, (cpu, page) in enumerate(pages):
            w.add_page(cpu, page)
            if i == 5:
                w.add_loss(Loss("tracefs", 1, "overrun", 7, 123))
            if per_chunk and (i + 1) % per_chunk == 0:
                w.flush()


def stored(pages: List[Tuple[int, bytes]]) -> List[Tuple[int, bytes]]:
    """The pages as a recording of the golden capture keeps them: each cut after the bytes its readers read."""
    cut = PageCut(load_formats(ROOT)[0], "little")
    return [(cpu, cut(page)) for cpu, page in pages]


def read_all(path: str) -> Tuple[RecordingReader, List[Tuple[str, Any]]]:
    reader = RecordingReader(path)
    return reader, list(reader.records())


def direct_events(pages: List[Tuple[int, bytes]]) -> List[Any]:
    page_header, formats = load_formats(ROOT)
    table = build_decoders(formats, "little")
    decoders: Dict[int, PageDecoder] = {}
    out: List[Any] = []
    for cpu, page in pages:
        decoders.setdefault(cpu, PageDecoder(page_header, table, cpu, "little")).decode(page, out)
    return out


def key(item: Any) -> Any:
    if isinstance(item, TraceEvent):
        return (item.ts_ns, item.cpu, item.pid, item.event, item.fields())
    return item


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_round_trip_pages_and_events(tmp_path: Any, codec: str) -> None:
    pages = load_pages(ROOT)
    path = str(tmp_path / "r.npt")
    write(path, pages, per_chunk=3, compression=codec)
    reader, records = read_all(path)
    got = [p for kind, c in records if kind == "chunk" for p in c.pages]
    assert got == stored(pages) and [len(p) for _, p in got] != [len(p) for _, p in pages]  # some were cut
    assert [c.seq for kind, c in records if kind == "chunk"] == [0, 1, 2, 3]
    assert ("loss", Loss("tracefs", 1, "overrun", 7, 123)) in records
    assert not reader.truncated and reader.trailer is not None
    assert reader.trailer["pages"] == len(pages) and reader.trailer["losses"] == [["tracefs", "overrun", 1, 7]]
    assert reader.header["compression"] == codec and reader.header["extra"] == {"run": 1}
    events = [key(e) for e in iter_events(RecordingReader(path)) if isinstance(e, TraceEvent)]
    expected = [key(e) for e in direct_events(pages) if isinstance(e, TraceEvent)]
    assert events == expected and len(events) > 100


def test_index_points_at_chunks(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    write(path, load_pages(ROOT), chunk_bytes=4 * PAGE)
    reader, _ = read_all(path)
    assert reader.trailer is not None
    with open(path, "rb") as f:
        blob = f.read()
    for seq, offset in reader.trailer["index"]:
        rec = next(iter(msgpack.Unpacker(__import__("io").BytesIO(blob[offset:]), raw=False)))
        assert rec["t"] == "chunk" and rec["seq"] == seq


def test_header_has_no_paths_and_a_clock_anchor(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    write(path, load_pages(ROOT)[:1])
    header = RecordingReader(path).header
    assert header["magic"] == "NPUTRACE" and header["schema"] == 1 and header["clock"] == "mono"
    assert set(header["clock_anchor"]) == {"mono_ns", "realtime_ns"}
    assert "/" not in header["created_by"] and str(tmp_path) not in str(header)


# ---- truncation --------------------------------------------------------------------------------
def small_recording(tmp_path: Any, codec: str = "zstd") -> Tuple[bytes, List[Tuple[int, bytes]]]:
    pages = load_pages(ROOT)[:2] + load_pages(ROOT)[8:9]  # 3 chunks, one page each
    path = str(tmp_path / f"small-{codec}.npt")
    header = golden_header(only=("sched:sched_switch",))
    write(path, pages, per_chunk=1, compression=codec, header=header)
    with open(path, "rb") as f:
        return f.read(), pages


CUT_HEADER = re.compile("cut inside its (magic|header)")


def check_cut(path: str, blob: bytes, cut: int, pages: List[Tuple[int, bytes]], header_end: int) -> None:
    """Cuts must come in decreasing order: the file is truncated in place (rewriting it is 10x slower)."""
    os.truncate(path, cut)
    if cut < header_end:
        try:
            RecordingReader(path)
        except RecordingError as exc:
            assert CUT_HEADER.search(str(exc)), exc
            return
        raise AssertionError(f"cut at {cut} inside the header was not refused")
    reader, records = read_all(path)
    got = [p for kind, c in records if kind == "chunk" for p in c.pages]
    assert got == stored(pages)[: len(got)]
    assert reader.truncated == (cut < len(blob))
    if reader.truncated:
        assert reader.truncation and "\n" not in reader.truncation and reader.trailer is None


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_truncation_at_every_byte(tmp_path: Any, codec: str) -> None:
    blob, pages = small_recording(tmp_path, codec)
    header_end = RecordingReader(str(tmp_path / f"small-{codec}.npt")).data_offset
    path = str(tmp_path / "cut.npt")
    with open(path, "wb") as f:
        f.write(blob)
    step = 1 if codec == "zstd" else 11  # the uncompressed file is 4x larger: every 11th byte + every boundary
    cuts = set(range(0, len(blob) + 1, step)) | boundaries(tmp_path, codec, blob)
    for cut in sorted(cuts, reverse=True):
        check_cut(path, blob, cut, pages, header_end)


def boundaries(tmp_path: Any, codec: str, blob: bytes) -> set:
    reader, _ = read_all(str(tmp_path / f"small-{codec}.npt"))
    assert reader.trailer is not None
    offsets = [off for _, off in reader.trailer["index"]] + [reader.data_offset, len(blob)]
    return {o + d for o in offsets for d in (-1, 0, 1) if 0 <= o + d <= len(blob)}


def test_cut_at_chunk_boundary_reads_whole_chunks(tmp_path: Any) -> None:
    blob, _ = small_recording(tmp_path)
    reader, _ = read_all(str(tmp_path / "small-zstd.npt"))
    assert reader.trailer is not None
    path = str(tmp_path / "cut.npt")
    for n, (_, offset) in enumerate(reader.trailer["index"]):
        with open(path, "wb") as f:
            f.write(blob[:offset])
        cut, records = read_all(path)
        assert sum(kind == "chunk" for kind, _ in records) == n == cut.chunks_read
        assert cut.truncated and f"read {n} whole chunks" in cut.truncation


# ---- damaged chunks ----------------------------------------------------------------------------
def damage(blob: bytes, offset: int) -> Tuple[bytes, Dict[str, Any]]:
    """The file with one byte of the data of the chunk at `offset` flipped (the middle byte), and that record."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(blob[offset:])
    rec = unpacker.unpack()
    at = blob.index(rec["data"], offset) + len(rec["data"]) // 2
    return blob[:at] + bytes([blob[at] ^ 0xFF]) + blob[at + 1 :], rec


@pytest.mark.parametrize("codec", ["zstd", "none"])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_damaged_chunk_is_skipped_its_pages_counted_lost_the_rest_read(tmp_path: Any, codec: str, which: int) -> None:
    """A chunk whose data fails its CRC-32 or does not decompress (its fields whole): in its place one loss of an
    unknown number of events ("recording"/"damaged", lost 0) per CPU it held pages of, stamped with the last page
    stamp of the chunk before it (0 for the first: the writer kept no stamps per chunk here); every other chunk
    read, the trailer too; `damaged` names the chunk, why and its pages per CPU."""
    pages = load_pages(ROOT)[:12]
    path = str(tmp_path / "whole.npt")
    write(path, pages, per_chunk=4, compression=codec)  # 3 chunks of 4 pages, a loss record after the 6th page
    whole, records = read_all(path)
    assert whole.trailer is not None
    offset = dict(whole.trailer["index"])[which]
    with open(path, "rb") as f:
        blob, rec = damage(f.read(), offset)
    bad = tmp_path / "damaged.npt"
    bad.write_bytes(blob)
    reader, got = read_all(str(bad))
    assert reader.trailer is not None and not reader.truncated and reader.chunks_read == 3
    chunk_pages = pages[4 * which : 4 * which + 4]
    cpus = sorted({cpu for cpu, _ in chunk_pages})
    before = max((int.from_bytes(p[:8], "little") for _, p in pages[4 * which - 4 : 4 * which]), default=0)
    losses = [Loss("recording", cpu, "damaged", 0, before) for cpu in cpus]
    kept = [(k, i) for k, i in records if not (k == "chunk" and i.seq == which)]
    at = next(n for n, (k, i) in enumerate(records) if k == "chunk" and i.seq == which)
    assert got == kept[:at] + [("loss", loss) for loss in losses] + kept[at:]
    why = {"CRC-32 mismatch: the data is corrupt"} if codec == "none" else {"CRC-32 mismatch: the data is corrupt",
                                                                             "corrupt zstd data"}  # fmt: skip
    assert len(reader.damaged) == 1 and reader.damaged[0].startswith(f"chunk {which} at byte {offset}: ")
    assert any(w in reader.damaged[0] for w in why), reader.damaged
    per_cpu = ", ".join(f"cpu{cpu} {sum(c == cpu for c, _ in chunk_pages)}" for cpu in cpus)
    assert reader.damaged[0].endswith(f": its 4 pages skipped ({per_cpu})")
    assert rec["seq"] == which


@pytest.mark.parametrize("codec", ["zstd", "none"])
@pytest.mark.parametrize("how", ["map", "field", "length"])
def test_a_record_that_cannot_be_read_is_skipped_to_the_next_chunk(tmp_path: Any, codec: str, how: str) -> None:
    """Chunk 1's record damaged where no CRC guards it: its map header ("map"), a field's name ("field"), or the
    length of its data, longer by 64 bytes (the next record then starts inside its data: "length"). The reader
    reads on from the next chunk: one loss of an unknown number of events on no CPU in particular, the skip named
    with the bytes it spans, the chunks lost, every other chunk and the trailer read."""
    pages = load_pages(ROOT)[:12]
    path = str(tmp_path / "whole.npt")
    write(path, pages, per_chunk=4, compression=codec)
    whole, records = read_all(path)
    assert whole.trailer is not None
    offsets = dict(whole.trailer["index"])
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    at = offsets[1]
    if how == "map":
        blob[at] = 0xC1  # a byte msgpack never uses
    elif how == "field":
        blob[blob.index(b"\xa4lens", at) + 1 : blob.index(b"\xa4lens", at) + 5] = b"LENS"
    else:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(bytes(blob[at:]))
        data = unpacker.unpack()["data"]
        start = blob.index(data, at)
        size = {0xC4: 1, 0xC5: 2, 0xC6: 4}[next(blob[start - n - 1] for n in (1, 2, 4) if blob[start - n - 1] in
                                            (0xC4, 0xC5, 0xC6) and blob[start - n - 2 : start - n - 1] == b"a")]
        head = start - size
        blob[head : head + size] = (len(data) + 64).to_bytes(size, "big")
    bad = tmp_path / "damaged.npt"
    bad.write_bytes(bytes(blob))
    reader, got = read_all(str(bad))
    assert reader.trailer is not None and not reader.truncated and reader.chunks_read == 3
    stamp = max(int.from_bytes(p[:8], "little") for _, p in pages[:4])
    one = next(n for n, (k, i) in enumerate(records) if k == "chunk" and i.seq == 1)
    two = next(n for n, (k, i) in enumerate(records) if k == "chunk" and i.seq == 2)
    assert records[one + 1 : two] == [("loss", Loss("tracefs", 1, "overrun", 7, 123))]  # lost with the bytes skipped
    (said,) = reader.damaged
    if how == "length" and codec == "zstd":  # the frame ends where it did: chunk 1 read whole, the bytes after it not
        stamp = max(int.from_bytes(p[:8], "little") for _, p in pages[4:8])
        assert got == [*records[:one + 1], ("loss", Loss("recording", -1, "damaged", 0, stamp)), *records[two:]]
        after = int(said.split()[4])  # where the next record seemed to begin: 64 bytes late, past chunk 2's start
        assert offsets[2] < after < offsets[2] + 64 and said.startswith(f"the record at byte {after} cannot be read (")
        assert said.endswith(f"): read on from chunk 2 at byte {offsets[2]}, 0 chunks lost (their CPUs unknown)")
        return
    assert got == [*records[:one], ("loss", Loss("recording", -1, "damaged", 0, stamp)), *records[two:]]
    assert said.startswith(f"the record at byte {at} cannot be read (")
    assert said.endswith(f"): read on from chunk 2 at byte {offsets[2]}, 1 chunk lost (their CPUs unknown)")


def test_a_damaged_trailer_reads_every_chunk_as_a_file_cut_there(tmp_path: Any) -> None:
    """The trailer's map header damaged: every chunk read; the file's end unreadable, read as a cut (the default
    rules fail a cut file: its end is missing)."""
    path = str(tmp_path / "whole.npt")
    write(path, load_pages(ROOT)[:8], per_chunk=4)
    _whole, records = read_all(path)
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    at = blob.rindex(b"\xa1t\xa7trailer") - 1
    blob[at + 4] ^= 0x20  # "trailer" -> "Trailer": a record of a type no reader knows, then nothing
    bad = tmp_path / "damaged.npt"
    bad.write_bytes(bytes(blob))
    reader, got = read_all(str(bad))
    assert got == records and reader.trailer is None and reader.truncated and not reader.damaged
    assert reader.skipped_records == {"Trailer": 1} and reader.truncation.startswith(f"file ends at byte {len(blob)}")
    blob[at] = 0xC1
    bad.write_bytes(bytes(blob))
    reader, got = read_all(str(bad))
    assert got == records and reader.truncated and reader.truncation == (
        f"the record at byte {at} cannot be read (record at byte {at}: not valid msgpack (FormatError)) and no chunk "
        f"or trailer follows it; read 2 whole chunks, no trailer")  # fmt: skip


def test_bytes_after_the_trailer_are_named_and_flag_the_reading_incomplete(tmp_path: Any) -> None:
    """A recording with bytes after its trailer (another appended to it, a bad copy): every record read, the
    trailer too; then a loss of an unknown number of events (what the bytes held is not read), named."""
    path = str(tmp_path / "whole.npt")
    pages = load_pages(ROOT)[:8]
    write(path, pages, per_chunk=4)
    whole, records = read_all(path)
    with open(path, "rb") as f:
        blob = f.read()
    bad = tmp_path / "appended.npt"
    bad.write_bytes(blob + blob)
    reader, got = read_all(str(bad))
    stamp = max(int.from_bytes(p[:8], "little") for _, p in pages[4:8])  # the last chunk's latest page stamp
    assert got == [*records, ("loss", Loss("recording", -1, "damaged", 0, stamp))]
    assert reader.trailer == whole.trailer and not reader.truncated
    assert reader.damaged == [f"{len(blob)} bytes after the trailer (at byte {len(blob)}) not read"]


@pytest.mark.parametrize("bad", [
    Loss("kernel", 1_000_000, "overrun", 5, 1),  # a CPU past int16's
    Loss("kernel", 0, "overrun", -5, 1),  # a negative count: it cancelled real losses in the totals
    Loss("kernel", -40_000, "overrun", 5, 1),
    Loss("kernel", 0, "overrun", (1 << 64) - 1, 1),
    Loss("kernel", 0, "overrun", 1, (1 << 64) - 1),
    NpuEvent(1, "log", None, "x", 1 << 40, 0, {}),  # a pid past int32's
    NpuEvent(1, "log", None, "x", 1, 40_000, {}),
    NpuEvent(1, "log", (1 << 64) - 1, "x", 1, 0, {}),
    NpuEvent((1 << 64) - 1, "log", None, "x", 1, 0, {}),
])  # fmt: skip
def test_a_loss_or_event_record_out_of_range_is_skipped_as_damaged(tmp_path: Any, bad: Any) -> None:
    """Values no column holds (a CPU past int16, a pid past int32, a stamp or device past int64), or a negative
    count of lost events, in a loss or events record: the record skipped as one that cannot be read (before: an
    OverflowError in the timeline, or a loss of -5 hiding one of 5)."""
    path = str(tmp_path / "odd.npt")
    pages = load_pages(ROOT)[:8]
    with RecordingWriter(path, golden_header()) as w:
        for i, (cpu, page) in enumerate(pages):
            w.add_page(cpu, page)
            if i == 3:
                w.flush()
                w.add_loss(bad) if isinstance(bad, Loss) else w.add_events([bad])
                w.flush()
    reader, got = read_all(path)
    assert [kind for kind, _ in got] == ["chunk", "loss", "chunk"] and got[1][1].kind == "damaged"
    assert len(reader.damaged) == 1 and "out" in reader.damaged[0] and reader.trailer is not None


def test_a_damaged_chunk_makes_the_ledger_incomplete_of_an_unknown_number() -> None:
    """A damaged chunk's losses count no event but make the trace incomplete, said as of an unknown number."""
    from npu_trace.events import LossLedger

    ledger = LossLedger()
    ledger.add(Loss("recording", 1, "damaged", 0, 5))
    assert ledger.total == 0 and ledger.incomplete()
    said = "loss: an unknown number of events lost (recording/damaged/cpu1=unknown number (flagged))"
    assert ledger.summary() == said
    ledger.add(Loss("tracefs", 0, "overrun", 3, 6))
    assert ledger.summary().startswith("loss: 3 events lost (")


def test_a_stopped_channel_makes_the_ledger_incomplete() -> None:
    """A channel that stopped (kmsg's read failed) lost its events from then on, how many unknown: before, its
    row of 0 made nothing incomplete ("loss: none", check passed)."""
    from npu_trace.events import LossLedger
    from npu_trace.sources.host_channels import lost_event_note

    ledger = LossLedger()
    for loss in event_losses([lost_event_note("kmsg")]):
        ledger.add(loss)
    assert ledger.incomplete() and "kmsg/stopped/all=unknown number (flagged)" in ledger.summary()


@pytest.mark.parametrize("count", [-100, 1 << 63, "many", None, True, 1.5])
def test_a_lost_event_whose_count_is_not_one_is_a_damaged_part(count: Any) -> None:
    """A recorded "lost" event's count read as it was: -100 beside a real loss of 100 made "loss: none" (the
    sum 0) and check passed. A count that is not one (negative, past int64, not an integer) is a damaged part
    of an unknown number now."""
    from npu_trace.events import LossLedger, lost_event

    ledger = LossLedger()
    ledger.add(Loss("tracefs", -1, "dropped", 100, 5))
    bad = lost_event(Loss("tracefs", -1, "dropped", 0, 6))._replace(args={"source": "tracefs", "lost": count})
    for loss in event_losses([bad]):
        ledger.add(loss)
    assert ledger.total == 100 and ledger.incomplete() and "tracefs/damaged/all=unknown number" in ledger.summary()


# ---- errors ------------------------------------------------------------------------------------
def test_unknown_schema_is_one_clear_error(tmp_path: Any) -> None:
    blob, _ = small_recording(tmp_path)
    path = tmp_path / "v9.npt"
    path.write_bytes(PREAMBLE.pack(b"NPUTRACE", 9) + blob[PREAMBLE.size :])
    with pytest.raises(RecordingError, match=r"schema version 9 is not supported by this build \(reads: 1\)"):
        RecordingReader(str(path))


def test_not_a_recording(tmp_path: Any) -> None:
    path = tmp_path / "x.npt"
    path.write_bytes(b"hello world, not a trace")
    with pytest.raises(InputError, match="not an npu-trace recording"):
        RecordingReader(str(path))


def test_unknown_record_types_are_skipped_and_counted(tmp_path: Any) -> None:
    blob, pages = small_recording(tmp_path)
    reader, _ = read_all(str(tmp_path / "small-zstd.npt"))
    assert reader.trailer is not None
    first = reader.trailer["index"][1][1]
    path = tmp_path / "x.npt"
    path.write_bytes(blob[:first] + msgpack.packb({"t": "future", "x": [1, 2]}) + blob[first:])
    patched, records = read_all(str(path))
    assert patched.skipped_records == {"future": 1} and not patched.truncated
    assert [p for kind, c in records if kind == "chunk" for p in c.pages] == stored(pages)
    path.write_bytes(blob[: reader.trailer["index"][-1][1]] + msgpack.packb({"t": "future"}))
    cut, records = read_all(str(path))
    assert cut.skipped_records == {"future": 1} and cut.truncated


def test_refuses_to_overwrite(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    write(path, load_pages(ROOT)[:1])
    with pytest.raises(RecordingError, match="already exists: refusing to overwrite"):
        RecordingWriter(path, golden_header())
    write(path, load_pages(ROOT)[:2], overwrite=True)
    assert len(list(RecordingReader(path).pages())) == 2


def test_close_is_idempotent_and_counts(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    pages = load_pages(ROOT)[:5]
    # a chunk of two pages: no page as stored is twice as long as another
    w = RecordingWriter(path, golden_header(), chunk_bytes=2 * min(len(p) for _, p in stored(pages)))
    for cpu, page in pages:
        w.add_page(cpu, page, ts_ns=1000 + cpu)
    assert (w.pages, w.chunks) == (4, 2)
    w.close({"events": 42})
    size = w.bytes_written
    w.close()
    assert os.path.getsize(path) == size and (w.pages, w.chunks) == (5, 3)
    reader, records = read_all(path)
    assert reader.trailer is not None and reader.trailer["totals"] == {"events": 42}
    assert records[0][1].first_ts == 1000


def test_maybe_flush_after_interval(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    with RecordingWriter(path, golden_header(), flush_interval=0.5) as w:
        w.add_page(*load_pages(ROOT)[0])
        assert not w.maybe_flush(time.monotonic())
        assert w.maybe_flush(time.monotonic() + 1.0) and w.chunks == 1
        reader, records = read_all(path)
        assert reader.truncated and len(records) == 1  # readable while being written


def test_bad_header_fields_refused_by_writer(tmp_path: Any) -> None:
    header = dict(golden_header(), cpus="four")
    with pytest.raises(RecordingError, match="'cpus' is str, not int"):
        RecordingWriter(str(tmp_path / "r.npt"), header)


def test_malformed_format_text_is_a_clear_error(tmp_path: Any) -> None:
    header = golden_header(only=("sched:sched_switch",))
    header["formats"][0]["text"] = "name: broken\nformat:\n"
    path = str(tmp_path / "r.npt")
    write(path, load_pages(ROOT)[:1], header=header)
    with pytest.raises(RecordingError, match="format of sched:sched_switch"):
        list(iter_events(RecordingReader(path)))


# ---- crash safety ------------------------------------------------------------------------------
KILLED_WRITER = """
import sys, time
sys.path.insert(0, {tests!r})
from test_recording import golden_header, load_pages, ROOT
from npu_trace.recording import RecordingWriter
w = RecordingWriter({path!r}, golden_header(), chunk_bytes=1)
pages = load_pages(ROOT)
for i in range(10 ** 6):
    w.add_page(*pages[i % len(pages)])
    if i == 20:
        print("ready", flush=True)
"""


def test_sigkill_mid_write_reads_to_last_whole_chunk(tmp_path: Any) -> None:
    path = str(tmp_path / "killed.npt")
    script = KILLED_WRITER.format(tests=os.path.dirname(__file__), path=path)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader, records = read_all(path)
    assert reader.truncated and reader.trailer is None and reader.chunks_read > 20
    pages = stored(load_pages(ROOT))
    got = [p for kind, c in records if kind == "chunk" for p in c.pages]
    assert got == [pages[i % len(pages)] for i in range(len(got))]


def test_notes_come_before_the_chunk_queued_with_them(tmp_path: Any) -> None:
    pages = load_pages(ROOT)[:4]
    path = str(tmp_path / "n.npt")
    with RecordingWriter(path, golden_header(), chunk_bytes=64 * PAGE) as w:
        w.add_page(pages[0][0], pages[0][1])
        w.add_note({"comms": {"4242": "late-proc"}})
        w.add_page(pages[1][0], pages[1][1])
        w.flush()
        w.add_note({"comms": {"4243": "at-close"}})
    _, records = read_all(path)
    assert [kind for kind, _ in records] == ["note", "chunk", "note"]
    assert records[0][1]["comms"] == {"4242": "late-proc"}
    source = ReplaySource(path)
    seen = [source.comm(4242) for batch in source.batches() if batch.pages]
    assert seen == ["late-proc"] and source.comm(4243) == "at-close" and source.comm(1) == "<...>"


def test_saved_cmdlines_parsing() -> None:
    text = "3835 npusim\n15 rcu_preempt\n907 a name with spaces\nbad line\n12\n"
    assert parse_saved_cmdlines(text) == {3835: "npusim", 15: "rcu_preempt", 907: "a name with spaces"}


def test_recorder_notes_new_process_names(tmp_path: Any, monkeypatch: Any) -> None:
    from npu_trace.events import LossLedger
    from npu_trace.sinks import npt_sink as recorder_mod
    from npu_trace.sources.procs import TaskSnapshot

    page_header, formats = load_formats(ROOT)
    saved = {1: "init"}
    session = SimpleNamespace(
        formats=formats, header=page_header, selected=[f.full_name for f in formats], clock="mono",
        format_texts={f.full_name: read(os.path.join(ROOT, "events", f.system, f.name, "format")) for f in formats},
        header_page_text=read(os.path.join(ROOT, "header_page")), ledger=LossLedger(), update_loss=lambda: None,
        fs=SimpleNamespace(saved_cmdlines=lambda: dict(saved)), task_snapshot=TaskSnapshot({}, None),
    )  # fmt: skip
    monkeypatch.setattr(recorder_mod, "proc_comms", lambda: {"1": "init"})
    path = str(tmp_path / "r.npt")
    rec = recorder_mod.Recorder(session, path, "test")
    pages = load_pages(ROOT)
    rec(Batch(pages[:2], []))
    rec.writer.flush()  # nothing new before this chunk: no note
    saved[777] = "started-later"
    rec(Batch(pages[2:4], []))
    rec.writer.flush()  # noted before the chunk it may be in
    saved[777] = "renamed"
    rec(Batch(pages[4:6], []))
    rec.close()
    _, records = read_all(path)
    notes = [item["comms"] for kind, item in records if kind == "note"]
    assert notes == [{"777": "started-later"}, {"777": "renamed"}]


def test_a_rotated_recordings_files_each_start_from_the_task_map(tmp_path: Any, monkeypatch: Any) -> None:
    """The first file's header holds the session's tasks at the start (the live analysis's map); each later
    one the tasks alive at its opening over the file before's (a thread gone meanwhile may still have events
    in the pages read next)."""
    from npu_trace.events import LossLedger
    from npu_trace.sinks import npt_sink as recorder_mod
    from npu_trace.sources.procs import TaskSnapshot, snapshot_from_header

    page_header, formats = load_formats(ROOT)
    session = SimpleNamespace(
        formats=formats, header=page_header, selected=[f.full_name for f in formats], clock="mono",
        format_texts={f.full_name: read(os.path.join(ROOT, "events", f.system, f.name, "format")) for f in formats},
        header_page_text=read(os.path.join(ROOT, "header_page")), ledger=LossLedger(), update_loss=lambda: None,
        fs=SimpleNamespace(saved_cmdlines=dict), task_snapshot=TaskSnapshot({11: 10}, frozenset({10})),
    )  # fmt: skip
    now = iter([TaskSnapshot({21: 20}, frozenset({10, 20})), TaskSnapshot({11: 10}, frozenset({10})),
                TaskSnapshot({11: 30}, None)])  # fmt: skip
    monkeypatch.setattr(recorder_mod, "task_snapshot", lambda: next(now))
    rec = recorder_mod.Recorder(session, str(tmp_path / "r.npt"), "test", max_size=1)
    pages = load_pages(ROOT)
    for i in range(3):
        rec(Batch(pages[i : i + 1], []))
    rec.close()
    maps = [snapshot_from_header(RecordingReader(path).header["extra"]) for path in rec.files]
    assert all(RecordingReader(path).checksum for path in rec.files)  # each rotated file's header: its checksum
    assert maps == [TaskSnapshot({11: 10}, frozenset({10})), TaskSnapshot({11: 10, 21: 20}, frozenset({10, 20})),
                    TaskSnapshot({21: 20, 11: 10}, frozenset({10, 20})),
                    TaskSnapshot({21: 20, 11: 30}, None)]  # fmt: skip


def test_check_decoding_only_mapped_events_gives_the_full_decoding_report(tmp_path: Any) -> None:
    """analyze() decodes only the events the profile maps (the rest are counted): same report, same counts,
    on the golden capture that mixes ascend:* with syscalls, sched and irq events."""
    from npu_trace.ci.recording_analysis import analyze
    from npu_trace.detectors import Analysis
    from npu_trace.device.profiles import PROFILES

    path = str(tmp_path / "g.npt")
    write(path, load_pages(ROOT))
    full = Analysis(PROFILES["sim"])
    source = ReplaySource(path)
    timeline = source.block_timeline()
    for batch in source.batches():
        full.feed_block(timeline.push(batch), timeline.now)
    got = analyze(path, "sim", progress=False)
    assert got["analysis"] == full.finish()
    assert got["reading"]["events"] == source.events_read
    counts = got["analysis"]["summary"]["events"]["by_kind"]
    assert counts["log"] > 100 and sum(counts.values()) - counts.get("lost", 0) == source.events_read


def test_channel_events_keep_their_place_between_chunks(tmp_path: Any) -> None:
    """Events of the other channels (kmsg, uevents, npu-smi) are written after the pages queued before them,
    with the reads' marks beside the pages, so a replay's timeline places them among the trace's events by
    time, as the live one did; lost ones count in the trailer."""
    from npu_trace.events import NpuEvent
    from npu_trace.pipeline import Mark

    pages = load_pages(ROOT)[:6]
    stamps = sorted(e.ts_ns for e in direct_events(pages) if isinstance(e, TraceEvent))
    t = stamps[len(stamps) // 2]
    kmsg = NpuEvent(t, "timeout", 2, "heartbeat", 77, -1, {"source": "kmsg", "lost_count": 4, "big": 1 << 70})
    lost = NpuEvent(t + 1, "lost", None, "overwritten", -1, -1, {"source": "kmsg", "lost": 3})
    path = str(tmp_path / "c.npt")
    with RecordingWriter(path, golden_header(), chunk_bytes=64 * PAGE) as w:
        for cpu, page in pages[:3]:
            w.add_page(cpu, page)
        w.add_mark(Mark(t, (), t))  # the channels had nothing before t
        w.add_events([kmsg, lost])
        for cpu, page in pages[3:]:
            w.add_page(cpu, page)
        w.add_mark(Mark(t + 2, (), t + 2))
        assert w.events_written == 2
    reader, records = read_all(path)
    assert [kind for kind, _ in records] == ["chunk", "events", "chunk"]
    got = records[1][1]
    assert got[0] == kmsg._replace(args={**kmsg.args, "big": str(1 << 70)}) and got[1] == lost
    assert reader.trailer is not None and reader.trailer["losses"] == [["kmsg", "overwritten", -1, 3]]
    source = ReplaySource(path)
    batches = list(source.batches())
    assert batches[1] == Batch([], got) and source.channel_events_read == 2 and source.ledger.total == 3
    assert [len(b.pages) for b in batches] == [3, 0, 3, 0] and batches[-1].final
    assert [b.mark for b in batches] == [Mark(t, (), t), None, Mark(t + 2, (), t + 2), None]
    from npu_trace.detectors import Analysis
    from npu_trace.device.profiles import PROFILES

    analysis = Analysis(PROFILES["sim"])
    timeline = source.block_timeline()
    items = []
    for batch in batches:
        released = timeline.push(batch)
        items += released.items()
        analysis.feed_block(released, timeline.now)
    assert [x.ts_ns for x in items] == sorted(x.ts_ns for x in items)  # one time order
    at = items.index(got[0])
    assert all(x.ts_ns <= t for x in items[:at]) and all(x.ts_ns >= t for x in items[at:])
    assert len(items) == len(stamps) + 2 and source.ledger.total == 3  # nothing late: the marks told the merge
    kinds = [f["kind"] for f in analysis.finish()["findings"]]
    assert "timeout" in kinds and "loss" in kinds


def test_recordings_are_private_by_default_whatever_the_umask(tmp_path: Any) -> None:
    """A recording holds what only root may read (kernel log lines, process names, driver addresses): 0600,
    also when it replaces a world-readable file; another mode only when asked for."""
    pages = load_pages(ROOT)[:2]
    old = os.umask(0)
    try:
        path = str(tmp_path / "p.npt")
        write(path, pages)
        assert os.stat(path).st_mode & 0o777 == 0o600
        os.chmod(path, 0o644)
        write(path, pages, overwrite=True)
        assert os.stat(path).st_mode & 0o777 == 0o600
        shared = str(tmp_path / "s.npt")
        write(shared, pages, mode=0o640)
        assert os.stat(shared).st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_a_bad_mode_is_a_one_line_usage_error(tmp_path: Any) -> None:
    proc = subprocess.run([sys.executable, "-m", "npu_trace", "record", "-o", str(tmp_path / "x.npt"), "--mode",
                           "0999"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "not a file mode" in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "x.npt")


def test_the_chunks_checksum_is_zlibs_crc32() -> None:
    """Chunks are checked with zlib-ng's CRC-32 (installed by scripts/setup): the same values as zlib's, so
    recordings written with either read with the other."""
    assert chunk_crc32.__module__.startswith("zlib_ng")
    data = os.urandom(1 << 20) + bytes(4093)
    for piece in (b"", b"a", data[:7], data):
        assert chunk_crc32(piece) == zlib.crc32(piece)


def test_a_decoded_chunk_s_pages_are_its_data_cut_at_their_lengths() -> None:
    """Pages slices each page out of the chunk's data when asked (the block timeline reads only the CPUs and
    lengths): as the list of (cpu, bytes) it stands for, by index, from the end, by slice and whole."""
    cut = [(0, b"ab"), (1, b""), (0, b"cde"), (2, b"f")]
    pages = Pages(b"".join(p for _, p in cut), [c for c, _ in cut], [len(p) for _, p in cut])
    assert len(pages) == 4 and list(pages) == cut and pages == cut and pages[2] == (0, b"cde")
    assert pages[-1] == (2, b"f") and pages[1:3] == cut[1:3] and pages[::-2] == cut[::-2]
    for bad in (4, -5):
        with pytest.raises(IndexError):
            pages[bad]
    assert (pages.cpus, pages.lens) == ([0, 1, 0, 2], [2, 0, 3, 1])


def test_a_recorded_chunk_reads_back_as_its_pages(tmp_path: Any) -> None:
    path = str(tmp_path / "rec.npt")
    pages = [(cpu, bytes([cpu + 1]) * (100 + 7 * i)) for i, cpu in enumerate([0, 1, 1, 0, 3])]
    with RecordingWriter(path, golden_header(), chunk_bytes=400) as w:  # two chunks or more
        for cpu, page in pages:
            w.add_page(cpu, page)
    chunks = [item for kind, item in RecordingReader(path).records() if kind == "chunk"]
    assert [p for c in chunks for p in c.pages] == pages and len(chunks) > 1
    assert all(isinstance(c.pages, Pages) for c in chunks)
