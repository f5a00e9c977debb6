"""Ring-buffer page framing, specified once (kernel/trace/ring_buffer.c, as per_cpu/cpuN/trace_pipe_raw hands
pages over and a trace.dat stores them).

Two implementations follow this text rule for rule: the C walker (`npu_trace/ftrace/_walk.c`) and its one
pure-Python fallback (`npu_trace.ftrace.walk.walk_py`); the tests hold both to a per-record reference decoder
(`tests/reference/pages.py`). All three name a malformed page by the same reasons (`MALFORMED`).

The page (described by `events/header_page`: `npu_trace.ftrace.format.PageHeader`)
    ts_offset    u64 timestamp: the time the page's first record's delta adds to
    +8           local_t commit: 8 bytes on a 64-bit kernel, 4 on a 32-bit one; `int overwrite` shares its
                 top byte (nothing here reads it)
    data_offset  the records, `commit & COMMIT_MASK` bytes of them
The commit word's flags: MISSED_EVENTS (bit 31) the writer lost events before this page; MISSED_STORED (bit
30) it stored how many as a commit-sized word right after the committed data, when the page had room (else
the number is unknown: a loss of 0, flagged). A page shorter than its header is malformed ("short_page"); a
commit counting more bytes than the page holds is malformed ("commit_past_page") and the records up to the
page's end are still read.

A record starts with a u32 header word: type_len (its low 5 bits) and time_delta (its top 27 bits). A record is
read only while at least 6 bytes are left before the commit's end (a header word and an event id).
    type_len 1..28  data: time += delta; the payload is the next type_len * 4 bytes (common_type first)
    type_len 0      data: time += delta; the next u32 is the payload's length + 4, the payload follows it
                    (fewer than 8 bytes left: the page ends)
    29 padding      delta 0: the rest of the page is empty (the page ends); otherwise a discarded record:
                    4 + the next u32 bytes are stepped over
    30 time extend  time += (next u32 << 27) | delta
    31 time stamp   an absolute time: (next u32 << 27) | delta, with the running time's top 5 bits (TS_MSB)
                    carried over (and a carry into them when the stamp would go back below the running time
                    with them); a stamp before the running time counts in `backwards`
Types 29..31 need their second word: one cut by the commit's end is malformed ("cut_header") unless it is the
delta-0 padding that ends a page anyway.

A data record is judged against its event's format (event id = the payload's first u16), or kept as its bytes
where the walk keeps the records of events no format describes (replay, import: that one too is malformed when
stamped past 2**63 - 1, "ts_overflow"). A record of an event not wanted is stepped over and counted in `skipped`,
unless it is a long one (type_len 0) whose payload is
under 8 bytes ("bad_length": no room for its common fields; under 2, for its event id) or runs past the
commit's end ("record_past_commit"): malformed, and the page ends. A wanted record running past the commit's
end is malformed ("record_past_commit") and ends the page; one shorter than its format's fixed fields
("short_record"), one whose __data_loc / __rel_loc locator points outside the record ("dynamic_outside"),
and one stamped past 2**63 - 1 ("ts_overflow": only a corrupt page stamp or delta makes one, 292 years of
nanoseconds) are malformed, and the walk goes on with the next record. A page stamp before the previous record counts in
`backwards` (the stream's stamps then need sorting).

Every malformed record or page is a `Loss` of one event, of kind "malformed:<reason>" (`malformed_kind`),
stamped with the running time (a short page: the stream's last time; past 2**63 - 1: 2**63 - 1), counted by
reason in the loss ledger and shown wherever it is.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Tuple

TYPE_DATA_MAX = 28  # type_len 1..28: a data record of type_len * 4 bytes; 0: its length in the next word
TYPE_PADDING = 29
TYPE_TIME_EXTEND = 30
TYPE_TIME_STAMP = 31
TS_SHIFT = 27
TS_DELTA_MASK = (1 << TS_SHIFT) - 1
TS_MSB = 0xF8 << 56
TS_MAX = (1 << 63) - 1  # the last stamp a record may carry
MISSED_EVENTS = 1 << 31
MISSED_STORED = 1 << 30
COMMIT_MASK = MISSED_STORED - 1

# Why a page or a record is malformed, in the order of the C walker's codes (_walk.c: enum malformed_reason,
# exported as _walk.REASONS; tests/test_ftrace_walk.py keeps the two equal)
MALFORMED: Tuple[str, ...] = (
    "short_page",  # the page is shorter than its header
    "commit_past_page",  # the commit counts more bytes than the page holds
    "bad_length",  # a long record's length leaves no room for its event id and a field
    "record_past_commit",  # a record runs past the committed data
    "cut_header",  # a time extend, time stamp or padding whose second word lies past the commit
    "short_record",  # a record shorter than its format's fixed fields
    "dynamic_outside",  # a __data_loc / __rel_loc field's data lies outside the record
    "ts_overflow",  # a timestamp past 2**63 - 1
)
MALFORMED_PREFIX = "malformed:"
DESCRIBE = {
    "short_page": "page shorter than its header",
    "commit_past_page": "commit past the page's end",
    "bad_length": "record length too small",
    "record_past_commit": "record past the commit",
    "cut_header": "time or padding word cut by the commit",
    "short_record": "record shorter than its format",
    "dynamic_outside": "dynamic field outside its record",
    "ts_overflow": "timestamp past 2**63 - 1",
}


def commit_reader(offset: int, size: int, byteorder: str) -> Callable[[Any], int]:
    """The reader of a page's commit word (its `size` bytes, 8 or 4, at `offset`, in `byteorder`), for a page at
    least as long as its header: its length and its flags, as the rules above read them."""
    unpack = struct.Struct(("<" if byteorder == "little" else ">") + ("Q" if size == 8 else "I")).unpack_from

    def commit(page: Any) -> int:
        return int(unpack(page, offset)[0])

    return commit


def used_length(size: int, commit: int, data_offset: int, word: int) -> int:
    """How many of a page's `size` bytes its readers read, given its commit word (a page at least as long as its
    header): the header, the committed data and, after them, the missed-events count the page stores
    (MISSED_STORED, where it fits in the page). What follows is the ring buffer's leftover bytes, which no rule
    above reads. A commit past the page's end (malformed): the whole page, read as it is."""
    end = data_offset + (commit & COMMIT_MASK)
    if end > size:
        return size
    if commit & MISSED_STORED and end + word <= size:
        end += word
    return end


def malformed_kind(reason: str) -> str:
    """The Loss kind of a malformed record or page: "malformed:<reason>"."""
    return MALFORMED_PREFIX + reason


def is_malformed(kind: str) -> bool:
    """A Loss kind that says a record or page was malformed (whatever the reason)."""
    return kind == "malformed" or kind.startswith(MALFORMED_PREFIX)


def abs_ts(stamp: int, prev: int) -> int:
    """An absolute time stamp (type 31) after the running time `prev`: its top bits carried over (TS_MSB)."""
    if prev & TS_MSB:
        stamp |= prev & TS_MSB
        if stamp < prev:
            stamp += 1 << 59
    return stamp
