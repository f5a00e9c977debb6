"""Hostile recordings: every input ends in a one-line RecordingError or a correct partial read, quickly.

Set NPT_FUZZ_EXAMPLES=2000 for a longer local run (the committed setting stays fast).
"""

from __future__ import annotations

import os
import struct
from typing import Any, Dict, List, Tuple

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goldens import load_pages
from npu_trace.errors import RecordingError
from npu_trace.recording import RecordingReader
from npu_trace.recording.schema import MAX_CHUNK_RAW, MAX_DATA_BYTES, PREAMBLE
from test_recording import PAGE, ROOT, golden_header, stored, write

EXAMPLES = int(os.environ.get("NPT_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PAGES = load_pages(ROOT)[:2] + load_pages(ROOT)[8:9]
STORED = stored(PAGES)  # as the valid recordings hold them
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=8))
VALUES = st.recursive(SCALARS | st.binary(max_size=16), lambda v: st.lists(v, max_size=3), max_leaves=8)


class Recordings(dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:  # keeps hypothesis' failure reports short
        return "<valid recordings>"


@pytest.fixture(scope="module")
def valid(tmp_path_factory: Any) -> Dict[str, Any]:
    """Two small recordings (zstd, none) of 3 chunks: their bytes, header end and chunk offsets."""
    out: Dict[str, Any] = Recordings()
    for codec in ("zstd", "none"):
        path = str(tmp_path_factory.mktemp("valid") / f"{codec}.npt")
        write(path, PAGES, per_chunk=1, compression=codec, header=golden_header(only=("sched:sched_switch",)))
        reader = RecordingReader(path)
        list(reader.records())
        with open(path, "rb") as f:
            out[codec] = (f.read(), reader.data_offset, reader.trailer)
    out["dir"] = str(tmp_path_factory.mktemp("fuzz"))
    return out


def read_or_error(valid: Dict[str, Any], blob: bytes) -> Tuple[Any, List[Tuple[str, Any]]]:
    """(reader, records) for a readable file, (None, []) for a clear error; anything else fails the test."""
    path = os.path.join(valid["dir"], "f.npt")
    with open(path, "wb") as f:
        f.write(blob)
    reader = None
    records: List[Tuple[str, Any]] = []
    try:
        reader = RecordingReader(path)
        for item in reader.records():
            records.append(item)
    except RecordingError as exc:
        assert str(exc) and "\n" not in str(exc), exc
        return None, records
    return reader, records


def pages_of(records: List[Tuple[str, Any]]) -> List[Tuple[int, bytes]]:
    return [p for kind, c in records if kind == "chunk" for p in c.pages]


@FUZZ
@given(codec=st.sampled_from(["zstd", "none"]), flips=st.lists(st.integers(0, 10**9), min_size=1, max_size=4))
def test_bit_flips(valid: Dict[str, Any], codec: str, flips: List[int]) -> None:
    """Flips anywhere: past the header (it has a checksum) the file is read (a flip in the trailer may leave bytes
    after it: refused), every page read is one written, in its order (CRC-32 guards them), and each damaged part
    skipped is counted as a loss of an unknown number of events."""
    blob, header_end, _ = valid[codec]
    trailer = blob.rindex(b"\xa1t\xa7trailer") - 1
    data = bytearray(blob)
    at = [(flip >> 3) % len(data) for flip in flips]
    for flip, byte in zip(flips, at):
        data[byte] ^= 1 << (flip & 7)
    reader, records = read_or_error(valid, bytes(data))
    if all(header_end <= byte < trailer for byte in at):
        assert reader is not None
    if reader is not None:
        written = iter(STORED)
        assert all(page in written for page in pages_of(records))
        damaged = [c for k, c in records if k == "loss" and c.kind == "damaged"]
        assert bool(damaged) == bool(reader.damaged) and all(c.source == "recording" and c.lost == 0 for c in damaged)
        assert len(damaged) >= len(reader.damaged)


@FUZZ
@given(codec=st.sampled_from(["zstd", "none"]), tail=st.binary(max_size=256), keep=st.integers(0, 3))
def test_random_bytes_after_header(valid: Dict[str, Any], codec: str, tail: bytes, keep: int) -> None:
    blob, header_end, trailer = valid[codec]
    offsets = [off for _, off in trailer["index"]] + [len(blob)]
    cut = offsets[keep] if keep < len(offsets) - 1 else header_end
    reader, records = read_or_error(valid, blob[:cut] + tail)
    if reader is not None:
        assert pages_of(records) == STORED[: len(pages_of(records))]


def chunk_record(**changes: Any) -> Dict[str, Any]:
    import zlib

    page = PAGES[0][1]
    rec = {"t": "chunk", "seq": 0, "codec": "none", "n_pages": 1, "cpus": [0], "lens": [len(page)]}
    rec.update(raw_len=len(page), crc32=zlib.crc32(page), data=page)
    rec.update(changes)
    return rec


def test_handmade_chunk_reads(valid: Dict[str, Any]) -> None:
    blob, header_end, _ = valid["none"]
    reader, records = read_or_error(valid, blob[:header_end] + msgpack.packb(chunk_record()))
    assert reader is not None and reader.truncated and pages_of(records) == PAGES[:1]


@FUZZ
@given(
    field=st.sampled_from(["seq", "codec", "n_pages", "cpus", "lens", "raw_len", "crc32", "data", "t"]), value=VALUES
)
def test_wrong_types_in_chunks(valid: Dict[str, Any], field: str, value: Any) -> None:
    blob, header_end, _ = valid["none"]
    reader, records = read_or_error(valid, blob[:header_end] + msgpack.packb(chunk_record(**{field: value})))
    if reader is not None:
        assert [page for _, page in pages_of(records)] in ([], [PAGES[0][1]])  # a valid cpu may change


@FUZZ
@given(field=st.sampled_from(sorted(golden_header())), value=VALUES)
def test_wrong_types_in_header(valid: Dict[str, Any], field: str, value: Any) -> None:
    header = dict(golden_header(only=("sched:sched_switch",)), magic="NPUTRACE", schema=1, compression="none")
    header[field] = value
    blob, header_end, _ = valid["none"]
    preamble = PREAMBLE.pack(b"NPUTRACE", 1)
    read_or_error(valid, preamble + msgpack.packb(header, use_bin_type=True) + blob[header_end:])


@FUZZ
@given(raw_len=st.integers(MAX_CHUNK_RAW + 1, 2**64 - 1))
def test_oversized_raw_len(valid: Dict[str, Any], raw_len: int) -> None:
    blob, header_end, _ = valid["none"]
    reader, records = read_or_error(valid, blob[:header_end] + msgpack.packb(chunk_record(raw_len=raw_len)))
    assert reader is not None and records == [] and reader.truncated  # nothing follows it: read as a cut there
    assert reader.truncation.startswith(f"the record at byte {header_end} cannot be read (chunk 0 at byte ")


@FUZZ
@given(prefix=st.sampled_from([b"\xc6", b"\xdb", b"\xdd", b"\xdf"]), length=st.integers(MAX_DATA_BYTES + 1, 2**32 - 1))
def test_oversized_declared_lengths(valid: Dict[str, Any], prefix: bytes, length: int) -> None:
    """A bin/str/array/map declaring more bytes than the file holds: a cut record, never a big allocation."""
    blob, header_end, _ = valid["none"]
    body = b"\x81\xa4data" + prefix + struct.pack(">I", length) + b"x" * 64
    reader, records = read_or_error(valid, blob[:header_end] + body)
    assert reader is None or (reader.truncated and records == [])


def test_record_over_the_size_limit_is_refused(valid: Dict[str, Any]) -> None:
    """A bin really holding more than the limit: refused once the bounded buffer is full."""
    blob, header_end, _ = valid["none"]
    big = msgpack.packb({"t": "chunk", "data": bytes(MAX_DATA_BYTES + 1)}, use_bin_type=True)
    reader, records = read_or_error(valid, blob[:header_end] + big)
    assert reader is not None and records == [] and reader.truncated and "not valid msgpack" in reader.truncation
    reader, records = read_or_error(valid, blob[: valid["none"][2]["index"][1][1]] + big)  # after a whole chunk
    assert reader is not None and len(records) == 1 and reader.truncated and "not valid msgpack" in reader.truncation


def test_oversized_zstd_frame_is_skipped_never_inflated(valid: Dict[str, Any]) -> None:
    """A zstd bomb (64 MiB of zeros in a few KiB) declared as a 4 KiB chunk is a damaged chunk: skipped as its
    frame's declared size says, never inflated, its page counted lost."""
    import zstandard

    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (MAX_CHUNK_RAW + PAGE))
    blob, header_end, _ = valid["none"]
    rec = chunk_record(codec="zstd", data=bomb)
    reader, records = read_or_error(valid, blob[:header_end] + msgpack.packb(rec))
    assert reader is not None and [kind for kind, _ in records] == ["loss"] and records[0][1].kind == "damaged"
    assert reader.damaged == [f"chunk 0 at byte {header_end}: zstd frame declares {MAX_CHUNK_RAW + PAGE} bytes, "
                              f"raw_len says {PAGE}: its 1 page skipped (cpu0 1)"]  # fmt: skip


@FUZZ
@given(schema=st.integers(0, 65535).filter(lambda v: v != 1))
def test_unknown_schema_version(valid: Dict[str, Any], schema: int) -> None:
    blob, _, _ = valid["zstd"]
    with pytest.raises(RecordingError, match=f"schema version {schema} is not supported by this build"):
        read_or_error_raw(valid, PREAMBLE.pack(b"NPUTRACE", schema) + blob[PREAMBLE.size :])


def read_or_error_raw(valid: Dict[str, Any], blob: bytes) -> None:
    path = os.path.join(valid["dir"], "s.npt")
    with open(path, "wb") as f:
        f.write(blob)
    RecordingReader(path)


@FUZZ
@given(kind=st.text(max_size=10).filter(lambda t: t not in ("chunk", "loss", "note", "trailer", "ev")))
def test_unknown_record_type_is_skipped_and_counted(valid: Dict[str, Any], kind: str) -> None:
    blob, _, trailer = valid["zstd"]
    first = trailer["index"][1][1]
    reader, records = read_or_error(valid, blob[:first] + msgpack.packb({"t": kind, "v": 1}) + blob[first:])
    assert reader is not None and reader.skipped_records == {kind: 1} and pages_of(records) == STORED


EV_ROW = [123, "timeout", 2, "heartbeat", 77, -1, {"source": "kmsg", "lost_count": 4}]


@FUZZ
@given(index=st.integers(0, 6), value=VALUES)
def test_wrong_types_in_channel_events(valid: Dict[str, Any], index: int, value: Any) -> None:
    """An "ev" row with one field replaced: read as given when still valid, else one clear error."""
    row = list(EV_ROW)
    row[index] = value
    blob, header_end, _ = valid["none"]
    reader, records = read_or_error(valid, blob[:header_end] + msgpack.packb({"t": "ev", "rows": [row]}))
    assert reader is not None
    if records:
        ((kind, events),) = records
        assert kind == "events" and list(events[0]) == row
    else:  # refused: nothing follows it, read as a cut there
        assert reader.truncated and reader.truncation.startswith(f"the record at byte {header_end} cannot be read")


@pytest.mark.parametrize("checksum", [True, False])
def test_a_damaged_first_record_is_skipped_only_after_a_header_with_a_checksum(valid: Dict[str, Any],
                                                                             checksum: bool) -> None:  # fmt: skip
    """The first record's map header damaged. After a header with a checksum (verified: the header ended where
    it was written) it is skipped like any other, up to chunk 1; after one without (written before checksums,
    or one whose checksum entry a damaged length cut off) the file is refused: what follows may be the header's
    own bytes."""
    blob, header_end, trailer = valid["zstd"]
    rest = bytearray(blob[header_end:])
    rest[0] = 0xC1
    if checksum:
        reader, records = read_or_error(valid, blob[:header_end] + bytes(rest))
        assert reader is not None and pages_of(records) == STORED[1:] and not reader.truncated
        (said,) = reader.damaged
        assert said.startswith(f"the record at byte {header_end} cannot be read (") and said.endswith(
            f"read on from chunk 1 at byte {trailer['index'][1][1]}, 1 chunk lost (their CPUs unknown)")  # fmt: skip
        return
    header = dict(golden_header(only=("sched:sched_switch",)), magic="NPUTRACE", schema=1, compression="zstd")
    head = PREAMBLE.pack(b"NPUTRACE", 1) + msgpack.packb(header, use_bin_type=True)
    reader, _ = read_or_error(valid, head + bytes(rest))
    assert reader is None
    reader, records = read_or_error(valid, head + blob[header_end:])  # the same file undamaged: read whole
    assert reader is not None and pages_of(records) == STORED


@FUZZ
@given(rows=VALUES)
def test_channel_events_record_of_any_shape(valid: Dict[str, Any], rows: Any) -> None:
    blob, header_end, _ = valid["none"]
    read_or_error(valid, blob[:header_end] + msgpack.packb({"t": "ev", "rows": rows}))
