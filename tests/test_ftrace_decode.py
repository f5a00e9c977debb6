"""Ring-buffer page decoding from hand-built pages: every record kind, loss flags, malformed input, fuzzing."""

from __future__ import annotations

import struct
from typing import Any, List, Optional, Tuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from npu_trace.events import Loss, LossLedger, TraceEvent
from npu_trace.ftrace.decode import build_decoders
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import PageHeader, parse_format
from npu_trace.ftrace.framing import MISSED_EVENTS, MISSED_STORED
from reference.pages import PageDecoder

HEADER = PageHeader(ts_offset=0, ts_size=8, commit_offset=8, commit_size=8, data_offset=16, data_size=4080)
COMMON = """\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
"""


def fmt_text(name: str, eid: int, fields: str) -> str:
    return f'name: {name}\nID: {eid}\nformat:\n{COMMON}\n{fields}\nprint fmt: ""\n'


# id 10: two ints (16 bytes); id 11: a long char array (type_len 0 records); id 12: dynamic fields
SMALL = parse_format(fmt_text("small", 10, "\tfield:s32 a;\toffset:8;\tsize:4;\tsigned:1;\n"
                                           "\tfield:u32 b;\toffset:12;\tsize:4;\tsigned:0;\n"), "t")  # fmt: skip
BIG = parse_format(fmt_text("big", 11, "\tfield:char text[200];\toffset:8;\tsize:200;\tsigned:0;\n"), "t")
DYN = parse_format(fmt_text("dyn", 12,
    "\tfield:__data_loc u32[] vals;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:__rel_loc char[] rel;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\tfield:unsigned long arr[2];\toffset:16;\tsize:16;\tsigned:0;\n"
    "\tfield:u8 tail_byte;\toffset:32;\tsize:1;\tsigned:0;\n"), "t")  # fmt: skip
FORMATS = [SMALL, BIG, DYN]


def small(pid: int, a: int, b: int) -> bytes:
    return struct.pack("<HBBiiI", 10, 0, 0, pid, a, b)


def rec(payload: bytes, delta: int) -> bytes:
    payload += b"\0" * (-len(payload) % 4)
    if len(payload) <= 112:
        return struct.pack("<I", (delta << 5) | (len(payload) // 4)) + payload
    return struct.pack("<II", delta << 5, len(payload) + 4) + payload


def extend(delta: int) -> bytes:
    return struct.pack("<II", (30 | ((delta & ((1 << 27) - 1)) << 5)), delta >> 27)


def absolute(ts: int) -> bytes:
    return struct.pack("<II", (31 | ((ts & ((1 << 27) - 1)) << 5)), ts >> 27)


def page(ts: int, body: bytes, flags: int = 0, missed: Optional[int] = None) -> bytes:
    data = body + (struct.pack("<Q", missed) if missed is not None else b"")
    return struct.pack("<QQ", ts, len(body) | flags) + data + b"\0" * (4080 - len(data))


def decode(pg: bytes, cpu: int = 0) -> Tuple[List[TraceEvent], List[Loss], PageDecoder]:
    dec = PageDecoder(HEADER, build_decoders(FORMATS, "little"), cpu, ledger=LossLedger())
    out: List[Any] = []
    dec.decode(pg, out)
    return [x for x in out if isinstance(x, TraceEvent)], [x for x in out if isinstance(x, Loss)], dec


def test_deltas_accumulate_from_the_page_timestamp() -> None:
    evs, losses, _ = decode(page(1000, rec(small(7, -1, 2), 5) + rec(small(8, 3, 4), 10)))
    assert [(e.ts_ns, e.pid, e.values) for e in evs] == [(1005, 7, (-1, 2)), (1015, 8, (3, 4))]
    assert not losses


def test_time_extend_adds_a_long_delta() -> None:
    gap = (5 << 27) + 123
    evs, _, _ = decode(page(1000, rec(small(1, 0, 0), 1) + extend(gap) + rec(small(1, 0, 1), 2)))
    assert [e.ts_ns for e in evs] == [1001, 1001 + gap + 2]


def test_absolute_timestamp_replaces_the_clock() -> None:
    evs, _, _ = decode(page(1000, rec(small(1, 0, 0), 1) + absolute(987654321987) + rec(small(1, 0, 1), 4)))
    assert [e.ts_ns for e in evs] == [1001, 987654321987 + 4]


def test_padding_discarded_record_is_skipped_and_null_padding_ends_the_page() -> None:
    # a discarded event: array[0] = its length after the 4-byte header (kernel rb_event_discard)
    discarded = struct.pack("<II", 29 | (7 << 5), 20) + b"\xee" * 16
    body = rec(small(1, 1, 1), 1) + discarded + rec(small(1, 2, 2), 1) + struct.pack("<I", 29) + b"\xff" * 40
    evs, losses, dec = decode(page(0, body))
    assert [e.values for e in evs] == [(1, 1), (2, 2)]
    assert not losses and dec.malformed == 0


def test_long_records_use_the_length_word() -> None:
    text = b"x" * 150 + b"\0"
    payload = struct.pack("<HBBi", 11, 0, 0, 9) + text.ljust(200, b"\0")
    evs, _, _ = decode(page(0, rec(payload, 3) + rec(small(2, 5, 6), 1)))
    assert evs[0].fields() == {"text": "x" * 150} and evs[0].ts_ns == 3
    assert evs[1].values == (5, 6) and evs[1].ts_ns == 4


def test_data_loc_rel_loc_and_arrays() -> None:
    fixed = struct.pack("<HBBi", 12, 0, 0, 3)
    vals = struct.pack("<3I", 7, 8, 9)
    rel_text = b"hi\0"
    # vals at 36 (12 bytes); rel_loc offset is counted from the end of its own field (12 + 4 = 16): 48 - 16 = 32
    body = fixed + struct.pack("<I", (12 << 16) | 36) + struct.pack("<I", (3 << 16) | 32)
    body += struct.pack("<QQ", 1, 2**64 - 1) + b"\x05" + b"\0" * 3 + vals + rel_text
    evs, losses, _ = decode(page(0, rec(body, 1)))
    assert not losses
    assert evs[0].fields() == {"vals": [7, 8, 9], "rel": "hi", "arr": [1, 2**64 - 1], "tail_byte": 5}


def test_missed_events_flag_with_and_without_a_stored_count() -> None:
    _, losses, dec = decode(page(50, rec(small(1, 0, 0), 1), MISSED_EVENTS | MISSED_STORED, missed=1234), cpu=1)
    assert losses == [Loss("tracefs", 1, "page_missed", 1234, 50)]
    assert dec.ledger.incomplete()
    _, losses, dec = decode(page(50, rec(small(1, 0, 0), 1), MISSED_EVENTS))
    assert losses == [Loss("tracefs", 0, "page_missed", 0, 50)]
    assert dec.ledger.incomplete() and dec.ledger.total == 0  # the kernel did not say how many: flagged


def test_unknown_event_ids_are_skipped_and_counted() -> None:
    other = struct.pack("<HBBiQ", 99, 0, 0, 1, 0)
    evs, losses, dec = decode(page(0, rec(other, 1) + rec(small(1, 4, 4), 1)))
    assert [e.values for e in evs] == [(4, 4)] and dec.skipped == 1 and not losses


def test_record_running_past_the_commit_is_malformed_not_a_crash() -> None:
    good = rec(small(1, 1, 1), 1)
    bad = struct.pack("<I", (1 << 5) | 20) + small(1, 2, 2)  # claims 80 bytes, has 16
    evs, losses, dec = decode(page(0, good + bad))
    assert [e.values for e in evs] == [(1, 1)]
    assert [x.kind for x in losses] == ["malformed:record_past_commit"] and dec.malformed == 1


def test_commit_beyond_the_page_is_malformed() -> None:
    pg = bytearray(page(0, rec(small(1, 1, 1), 1)))
    struct.pack_into("<Q", pg, 8, 9000)
    _, losses, _ = decode(bytes(pg))
    assert losses and losses[0].kind == "malformed:commit_past_page"


def test_short_page_is_malformed() -> None:
    _, losses, _ = decode(b"\x01\x02")
    assert [x.kind for x in losses] == ["malformed:short_page"]


def test_bulk_runs_equal_record_by_record_decoding() -> None:
    body = b"".join(rec(small(i, -i, i * 3), i % 7) for i in range(200))
    body += extend(1 << 28) + b"".join(rec(small(i, i, i), 1) for i in range(30))
    evs, _, _ = decode(page(10, body))
    ts, expect = 10, []
    for i in range(200):
        ts += i % 7
        expect.append((ts, i, (-i, i * 3)))
    ts += 1 << 28
    for i in range(30):
        ts += 1
        expect.append((ts, i, (i, i)))
    assert [(e.ts_ns, e.pid, e.values) for e in evs] == expect


def test_bulk_run_stops_at_an_event_of_another_type() -> None:
    other = struct.pack("<HBBiII", 99, 0, 0, 1, 0, 0)  # same length as `small`, unknown id
    body = b"".join(rec(small(i, i, i), 1) for i in range(20)) + rec(other, 1)
    body += b"".join(rec(small(i, i, i), 1) for i in range(20, 40))
    evs, _, dec = decode(page(0, body))
    assert [e.pid for e in evs] == list(range(40)) and dec.skipped == 1
    assert evs[-1].ts_ns == 41


def test_runs_of_events_not_decoded_are_stepped_over_with_their_time() -> None:
    """Runs of a format left out of the decoders are counted, not decoded, and their deltas still count."""
    other = struct.pack("<HBBiII", 99, 0, 0, 1, 0, 0)  # same length as `small`, not decoded
    body = b"".join(rec(other, 3) for _ in range(150)) + rec(small(1, 1, 1), 1)
    body += b"".join(rec(other, 2) for _ in range(20)) + extend(1 << 28) + rec(other, 1) + rec(small(2, 2, 2), 1)
    body += b"".join(rec(other, 1) for _ in range(40))  # runs to the end of the page
    evs, _, dec = decode(page(5, body))
    assert [(e.ts_ns, e.pid) for e in evs] == [(5 + 450 + 1, 1), (5 + 450 + 1 + 40 + (1 << 28) + 1 + 1, 2)]
    assert dec.skipped == 150 + 20 + 1 + 40
    only_small = PageDecoder(HEADER, build_decoders([SMALL], "little"), 0, ledger=LossLedger())
    full = PageDecoder(HEADER, build_decoders(FORMATS, "little"), 0, ledger=LossLedger())
    mixed = b"".join(rec(small(i, i, i), 1) if i % 50 == 49 else rec(struct.pack("<HBBi", 11, 0, 0, i) + bytes(200), 2)
                     for i in range(17))  # fmt: skip
    mixed += b"".join(rec(small(i, i, i), i % 3) for i in range(60))
    a: List[Any] = []
    b: List[Any] = []
    only_small.decode(page(9, mixed), a)
    full.decode(page(9, mixed), b)
    assert a == [e for e in b if e.fmt.name == "small"] and only_small.skipped == len(b) - len(a)


def _valid_page() -> bytes:
    body = b"".join(rec(small(i, i, i), 2) for i in range(20)) + extend(1 << 30)
    body += rec(struct.pack("<HBBi", 11, 0, 0, 9) + b"abc".ljust(200, b"\0"), 1) + rec(small(1, 1, 1), 1)
    return page(77, body)


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=4096))
def test_fuzz_random_pages_never_raise(data: bytes) -> None:
    evs, _, _ = decode(data)
    assert all(isinstance(e.values, tuple) for e in evs)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 7)), min_size=1, max_size=8))
@example([(432, 0)])  # once a KeyError: a short record turned long (its id is then in the payload)
def test_fuzz_bit_flips_in_a_valid_page_never_raise(flips: List[Tuple[int, int]]) -> None:
    pg = bytearray(_valid_page())
    for offset, bit in flips:
        pg[offset] ^= 1 << bit
    decode(bytes(pg))


@pytest.mark.parametrize("cut", [0, 7, 16, 20, 100, 500])
def test_truncated_pages_never_raise(cut: int) -> None:
    decode(_valid_page()[:cut])


def test_long_records_of_a_format_without_fixups_use_their_own_decoder() -> None:
    """A record longer than 112 bytes carries its length in a second word: its event id is in the payload,
    not where a short record's is (found by the bit-flip fuzzer: a KeyError, or the wrong decoder)."""
    wide = parse_format(fmt_text("wide", 13, "".join(f"\tfield:u64 v{i};\toffset:{8 + 8 * i};\tsize:8;\tsigned:0;\n"
                                                     for i in range(16))), "t")  # fmt: skip
    payload = struct.pack("<HBBi", 13, 0, 0, 77) + struct.pack("<16Q", *range(100, 116))
    dec = PageDecoder(HEADER, build_decoders([SMALL, wide], "little"), 0, ledger=LossLedger())
    out: List[Any] = []
    dec.decode(page(0, rec(payload, 5) + rec(small(1, 2, 3), 1)), out)
    assert [(e.fmt.name, e.pid, e.values) for e in out] == [("wide", 77, tuple(range(100, 116))), ("small", 1, (2, 3))]


def test_big_endian_pages_decode_as_little_endian_ones() -> None:
    """Long records carry their event id in the payload, in the page's byte order (it was read little-endian:
    on a big-endian page the record was skipped as an unknown id)."""
    rows = [(5, 1, BIG, ("x" * 150,)), (6, 2, SMALL, (-3, 4)), (9, 3, DYN, ([], "hi", [1, 2], 5))]
    got = {}
    for order in ("little", "big"):
        pages = PageEncoder(HEADER, order).pages(rows)
        dec = PageDecoder(HEADER, build_decoders(FORMATS, order), 0, order, ledger=LossLedger())
        out: List[Any] = []
        for pg in pages:
            dec.decode(pg, out)
        got[order] = [(e.ts_ns, e.pid, e.values) for e in out]
        assert dec.skipped == dec.malformed == 0
    assert got["big"] == got["little"] == [(5, 1, ("x" * 150,)), (6, 2, (-3, 4)), (9, 3, ([], "hi", [1, 2], 5))]
