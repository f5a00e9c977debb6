"""The page walker against the reference decoder: for every record the walk returns, decoding its payload with
the reference RecordDecoder gives PageDecoder's TraceEvent; the losses are PageDecoder's at the same places,
the state moves as PageDecoder's counters do; the C walker and the pure-Python one return identical columns.

Inputs: the golden captures of this kernel (with the overrun capture), pages made by PageEncoder (time
extends, long records, every simulator event type, `wanted` subsets, both byte orders), the hand-built pages of
test_ftrace_decode and more malformed ones, and hypothesis fuzzing (records built from a grammar with lying
lengths, random bytes, bit flips, truncations).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from functools import cache
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from goldens import kernel_dirs, load_formats, load_pages
from npu_trace.events import Loss, LossLedger, RawRecord, TraceEvent
from npu_trace.ftrace import walk as W
from npu_trace.ftrace.decode import RecordDecoder, build_decoders
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format
from npu_trace.ftrace.framing import MISSED_EVENTS, MISSED_STORED
from npu_trace.recording.writer import PageCut
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import formats as sim_formats
from npu_trace.sim.synth import synth_events
from reference.pages import PageDecoder
from test_ftrace_decode import FORMATS, HEADER, SMALL, _valid_page, absolute, extend, fmt_text, rec, small
from test_ftrace_decode import page as make_page

Walker = Callable[..., W.Walk]
IMPLEMENTATIONS = [W.walk_c, W.walk_py]
GAP = b"\xa5" * 5  # between pages in a batch: a read past a page's end would see these bytes
TAIL = parse_format(fmt_text("tail", 14, "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
                                         "\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:0;\n"), "t")  # fmt: skip
ALL = [*FORMATS, TAIL]


def pack(pages: Sequence[bytes]) -> Tuple[bytes, List[Tuple[int, int]]]:
    """Pages into one buffer, `GAP` between them: (buffer, (offset, length) of each)."""
    buf, index = bytearray(GAP), []
    for pg in pages:
        index.append((len(buf), len(pg)))
        buf += pg + GAP
    return bytes(buf), index


class Result:
    """What a walk or the reference made of one CPU's pages: events, losses at their index, the counters."""

    def __init__(self, events: List[TraceEvent], losses: List[Tuple[int, Loss]], state: W.WalkState) -> None:
        self.events, self.losses, self.state = events, losses, state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and (self.events, self.losses, self.state) == (
            other.events, other.losses, other.state)  # fmt: skip

    def __repr__(self) -> str:
        return f"Result({len(self.events)} events, losses={self.losses}, {self.state})"


def reference(decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader = HEADER,
              cpu: int = 0, byteorder: str = "little") -> Result:  # fmt: skip
    dec = PageDecoder(header, decoders, cpu, byteorder, ledger=LossLedger())
    out: List[Any] = []
    for pg in pages:
        dec.decode(pg, out)
    events: List[TraceEvent] = []
    losses: List[Tuple[int, Loss]] = []
    for x in out:
        if isinstance(x, Loss):
            losses.append((len(events), x))
        else:
            events.append(x)
    state = W.WalkState(dec.last_ts, dec.backwards, dec.pages, dec.skipped, dec.malformed)
    return Result(events, losses, state)


def walked(fn: Walker, decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader = HEADER,
           cpu: int = 0, byteorder: str = "little") -> Tuple[Result, W.Walk]:  # fmt: skip
    buf, index = pack(pages)
    state = W.WalkState()
    walk = fn(buf, index, header, cpu, state, W.wants(decoders), byteorder)
    events = []
    for ts, etype, offset, length in zip(*(col.tolist() for col in walk[:4])):
        dec = decoders[etype]
        assert length == len(buf[offset : offset + length])
        pid, values = dec.decode(buf[offset : offset + length], 0, length)  # the payload alone
        events.append(TraceEvent(ts, cpu, pid, dec.fmt, values))
    return Result(events, walk.losses, state), walk


def same_walks(a: W.Walk, b: W.Walk) -> None:
    for col_a, col_b in zip(a[:4], b[:4]):
        assert col_a.dtype == col_b.dtype and np.array_equal(col_a, col_b)
    assert a.losses == b.losses


def check(decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader = HEADER, cpu: int = 0,
          byteorder: str = "little") -> Result:  # fmt: skip
    """Both walkers equal the reference and each other; returns the reference's result."""
    want = reference(decoders, pages, header, cpu, byteorder)
    (got_c, walk_c), (got_py, walk_py) = (walked(fn, decoders, pages, header, cpu, byteorder) for fn in IMPLEMENTATIONS)
    assert got_c == want
    assert got_py == want
    same_walks(walk_c, walk_py)
    paged(decoders, pages, header, cpu, byteorder)
    kept_raw(decoders, pages, header, cpu, byteorder, walk_c, want.state)
    return want


def kept_raw(decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader, cpu: int,
             byteorder: str, walk: W.Walk, state: W.WalkState) -> None:  # fmt: skip
    """With `keep_unknown`, the records of ids no decoder describes come as rows of their raw bytes (the C
    walker and the Python one alike) instead of being skipped, but for one stamped past 2**63 - 1: malformed
    ("ts_overflow"), as a decoded one is, never skipped unseen; nothing else changes: the same other losses, the
    same decoded rows, the same state but for those counts."""
    buf, index = pack(pages)
    runs = []
    for c_ext in (True, False):
        walker = W.Walker(header, W.wants(decoders), byteorder, keep_unknown=True)
        got_state = W.WalkState()
        got = walker.walk_c(buf, index, cpu, got_state) if c_ext else W.walk_py(
            buf, index, header, cpu, got_state, walker.wanted, byteorder)  # fmt: skip
        runs.append(got)
        known = np.isin(got.etype, np.array(sorted(decoders), dtype=np.uint16))
        for col, want in zip(got[:4], walk[:4]):
            assert np.array_equal(col[known], want)
        overflow = "malformed:ts_overflow"
        assert [loss for _, loss in got.losses if loss.kind != overflow] == [
            loss for _, loss in walk.losses if loss.kind != overflow]  # fmt: skip
        past = sum(loss.kind == overflow for _, loss in got.losses) - sum(
            loss.kind == overflow for _, loss in walk.losses)  # fmt: skip
        assert past >= 0  # the raw records stamped past the range
        raw = int((~known).sum())
        assert (got_state.skipped + raw + past, got_state.malformed - past, got_state.last_ts) == (
            state.skipped, state.malformed, state.last_ts)  # fmt: skip
        raws = [(ts, etype, buf[o : o + n]) for ts, etype, o, n in zip(*(col[~known].tolist() for col in got[:4]))]
        assert raws == reference_raws(decoders, pages, header, cpu, byteorder)
    same_walks(*runs)


def reference_raws(decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader, cpu: int,
                   byteorder: str) -> List[Tuple[int, int, bytes]]:  # fmt: skip
    """The reference decoder's raw records (keep_unknown) as (ts, event id, bytes)."""
    dec = PageDecoder(header, decoders, cpu, byteorder, ledger=LossLedger(), keep_unknown=True)
    out: List[Any] = []
    for pg in pages:
        dec.decode(pg, out)
    return [(x.ts_ns, x.id, x.payload) for x in out if isinstance(x, RawRecord)]


def paged(decoders: Mapping[int, RecordDecoder], pages: Sequence[bytes], header: PageHeader, cpu: int,
          byteorder: str) -> None:  # fmt: skip
    """walk_paged (C and Python) is the walk, and where each page ended is what walking up to that page says."""
    buf, index = pack(pages)
    results = []
    for c_ext in (True, False):
        walker = W.Walker(header, W.wants(decoders), byteorder)
        state = W.WalkState()
        got = walker._walk_c(buf, index, cpu, state, True) if c_ext else W.walk_py_paged(
            buf, index, header, cpu, state, W.wants(decoders), byteorder)  # fmt: skip
        results.append(got)
        for i in range(len(index)):
            alone = W.WalkState()
            upto = W.walk_py(buf, index[: i + 1], header, cpu, alone, W.wants(decoders), byteorder)
            assert int(got.page_end[i]) == len(upto.ts)
            assert (got.page_ts[i], got.page_backwards[i]) == (alone.last_ts, alone.backwards)
            assert sum(1 for p in got.loss_page if p <= i) == len(upto.losses)
    c, py = results
    same_walks(c.walk, py.walk)
    assert (c.page_end.tolist(), c.page_ts, c.page_backwards, c.loss_page) == (
        py.page_end.tolist(), py.page_ts, py.page_backwards, py.loss_page)  # fmt: skip


def table(formats: Sequence[EventFormat] = ALL, byteorder: str = "little") -> Dict[int, RecordDecoder]:
    return build_decoders(formats, byteorder)


# ---- the implementation -------------------------------------------------------------------------------------
def test_the_compiled_walker_is_built_and_chosen() -> None:
    """scripts/setup's editable install builds the extension in place (gcc is one of its packages)."""
    assert W.IMPLEMENTATION == "c"
    assert W.walk is W.walk_c and W.gather is W.gather_c


def test_without_the_extension_the_python_walker_runs() -> None:
    code = ("import sys; sys.modules['npu_trace.ftrace._walk'] = None\n"  # the import then fails, as unbuilt
            "from npu_trace.ftrace import walk\n"
            "print(walk.IMPLEMENTATION, walk.walk is walk.walk_py, walk.gather is walk.gather_py)")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.split() == ["python", "True", "True"]


# ---- golden captures ------------------------------------------------------------------------------------------
def golden(root: str) -> Tuple[PageHeader, Dict[int, RecordDecoder], Dict[int, List[bytes]]]:
    header, formats = load_formats(root)
    by_cpu: Dict[int, List[bytes]] = {}
    for cpu, pg in load_pages(root):
        by_cpu.setdefault(cpu, []).append(pg)
    return header, build_decoders(formats), by_cpu


@pytest.mark.parametrize("sub", ["", "overrun"])
@pytest.mark.parametrize("root", kernel_dirs(), ids=os.path.basename)
def test_golden_captures(root: str, sub: str) -> None:
    header, decoders, by_cpu = golden(os.path.join(root, sub))
    seen = []
    for cpu, pages in by_cpu.items():
        seen.append(check(decoders, pages, header, cpu))
        check({k: v for k, v in decoders.items() if v.fmt.system != "ascend"}, pages, header, cpu)
    assert sum(len(r.events) for r in seen) > (400 if sub else 500)
    kinds = {loss.kind for r in seen for _, loss in r.losses}
    assert kinds == ({"page_missed"} if sub else set())


@pytest.mark.parametrize("root", kernel_dirs(), ids=os.path.basename)
def test_one_call_per_page_equals_one_call_per_batch(root: str) -> None:
    header, decoders, by_cpu = golden(root)
    for cpu, pages in by_cpu.items():
        buf, index = pack(pages)
        for fn in IMPLEMENTATIONS:
            whole_state, parts_state = W.WalkState(), W.WalkState()
            whole = fn(buf, index, header, cpu, whole_state, W.wants(decoders))
            parts = [fn(buf, [one], header, cpu, parts_state, W.wants(decoders)) for one in index]
            assert whole_state == parts_state
            for i in range(4):
                assert np.array_equal(whole[i], np.concatenate([p[i] for p in parts]))


# ---- encoded pages ----------------------------------------------------------------------------------------------
SIM = sim_formats()


RESET_STEP = SIM["ascend_devdrv_reset_step"]  # dev, step, step_name (a __data_loc string), ret


@cache
@cache  # made once per (byteorder, gap): the property test below walks the same pages 60 times
def sim_pages(byteorder: str, gap: int = 0) -> Tuple[Tuple[TraceEvent, ...], Tuple[bytes, ...]]:
    """A mixed scenario (every kind of HAL call), reset steps with long names (type_len 0 records) and, every 50th
    record, a gap of `gap` ns (past 2**27: time extends). Tuples: shared by every caller, changed by none."""
    events = synth_events(plan("mixed", 2, 1.0, 3000, 2))
    long = [(0x400000, 1, 2, "n" * (i % 300), -5) for i in range(len(events) // 40)]
    events += [TraceEvent(e.ts_ns, 0, e.pid, RESET_STEP, v) for e, v in zip(events[::40], long)]
    events.sort(key=lambda e: e.ts_ns)
    shifted = [e._replace(ts_ns=e.ts_ns + gap * (i // 50)) for i, e in enumerate(events)]
    rows = [(e.ts_ns, e.pid, e.fmt, e.values) for e in shifted]
    return tuple(shifted), tuple(PageEncoder(HEADER, byteorder).pages(rows, missed=3))


@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("gap", [0, 1 << 30, 1 << 45])
def test_encoded_scenario_pages(byteorder: str, gap: int) -> None:
    events, pages = sim_pages(byteorder, gap)
    got = check(table([*SIM.values()], byteorder), pages, byteorder=byteorder)
    assert len(pages) > 20 and [e._replace(cpu=0) for e in got.events] == list(events)
    assert got.losses == [(0, Loss("tracefs", 0, "page_missed", 3, events[0].ts_ns))]


@settings(max_examples=20, deadline=None)  # each example walks the pages four ways: 0.2-0.4 s; the edges below
@given(st.sets(st.integers(0, 80)), st.sampled_from(["little", "big"]))
@example(set(), "little")  # nothing wanted: every record skipped
@example(set(range(81)), "big")  # every format wanted
@example({0}, "little")
def test_wanted_subsets_skip_the_rest(chosen: Set[int], byteorder: str) -> None:
    events, pages = sim_pages(byteorder, 1 << 28)
    formats = sorted({e.fmt for e in events}, key=lambda f: f.id)
    subset = [f for i, f in enumerate(formats) if i in chosen]
    got = check(table(subset, byteorder), pages, byteorder=byteorder)
    assert len(got.events) == sum(e.fmt in subset for e in events)
    assert got.state.skipped == len(events) - len(got.events)


# ---- hand-built pages ---------------------------------------------------------------------------------------
def dyn(vals_loc: int, rel_loc: int) -> bytes:
    fixed = struct.pack("<HBBiII", 12, 0, 0, 3, vals_loc, rel_loc) + struct.pack("<QQ", 1, 2) + b"\x05\0\0\0"
    return fixed + struct.pack("<3I", 7, 8, 9) + b"hi\0\0"


def long_word(size: int, word: Optional[int] = None) -> bytes:
    """A long record's header for a payload of `size` bytes (or a length word that says `word`)."""
    return struct.pack("<II", 1 << 5, size + 4 if word is None else word)


def tail(text: bytes) -> bytes:
    return struct.pack("<HBBiQ", 14, 0, 0, 5, 0xFFFF) + text


OTHER = struct.pack("<HBBiII", 99, 0, 0, 1, 0, 0)  # same length as `small`, an id nobody decodes
HAND = {
    "deltas": make_page(1000, rec(small(7, -1, 2), 5) + rec(small(8, 3, 4), 10)),
    "time extend": make_page(1000, rec(small(1, 0, 0), 1) + extend((5 << 27) + 123) + rec(small(1, 0, 1), 2)),
    "absolute": make_page(1000, rec(small(1, 0, 0), 1) + absolute(987654321987) + rec(small(1, 0, 1), 4)),
    "absolute back": make_page(10**9, rec(small(1, 0, 0), 1) + absolute(5) + rec(small(1, 0, 1), 4)),
    "absolute msb": make_page(0xF8 << 56, rec(small(1, 0, 0), 1) + absolute(5) + rec(small(1, 0, 1), 4)),
    "absolute msb carry": make_page((0xF8 << 56) + (1 << 40), absolute(5) + rec(small(1, 0, 1), 4)),
    "page ts past 2**63": make_page((1 << 64) - 3, rec(small(1, 0, 0), 2) + extend(1 << 58) + rec(small(1, 1, 1), 1)),
    "crossing 2**63": make_page(
        (1 << 63) - 3, rec(small(1, 0, 0), 2) + rec(small(1, 0, 1), 1) + extend(1 << 58) + rec(small(1, 1, 1), 1)
    ),
    "padding": make_page(
        0,
        rec(small(1, 1, 1), 1)
        + struct.pack("<II", 29 | (7 << 5), 20)
        + b"\xee" * 16
        + rec(small(1, 2, 2), 1)
        + struct.pack("<I", 29)
        + b"\xff" * 40,
    ),
    "padding cut": make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<I", 29 | (3 << 5))),
    "null padding cut": make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<I", 29)),
    "extend cut": make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<I", 30)),
    "long": make_page(0, rec(struct.pack("<HBBi", 11, 0, 0, 9) + b"x" * 150 + b"\0" * 50, 3) + rec(small(2, 5, 6), 1)),
    "long too short for its format": make_page(
        0, long_word(24) + struct.pack("<HBBiQQ", 11, 0, 0, 9, 0, 0) + rec(small(2, 5, 6), 1)
    ),
    "long unknown too short": make_page(0, long_word(6) + struct.pack("<HBBH", 99, 0, 0, 9) + rec(small(2, 5, 6), 1)),
    "long unknown": make_page(0, long_word(16) + OTHER + rec(small(2, 5, 6), 1)),
    "long length word under 4": make_page(0, long_word(0, word=2) + rec(small(2, 5, 6), 1)),
    "long length word 0": make_page(0, long_word(0, word=0) + rec(small(2, 5, 6), 1)),
    "long length word huge": make_page(0, long_word(0, word=(1 << 32) - 1) + rec(small(2, 5, 6), 1)),
    "long past the commit": make_page(0, rec(small(2, 5, 6), 1) + long_word(4000) + OTHER),
    "long cut": make_page(0, rec(small(2, 5, 6), 1) + struct.pack("<I", 1 << 5)),
    "data_loc": make_page(0, rec(dyn((12 << 16) | 36, (3 << 16) | 32), 1)),
    "data_loc beyond the record": make_page(0, rec(dyn((12 << 16) | 44, (3 << 16) | 32), 1) + rec(small(1, 1, 1), 1)),
    "rel_loc beyond the record": make_page(0, rec(dyn((12 << 16) | 36, (6 << 16) | 32), 1) + rec(small(1, 1, 1), 1)),
    "rel_loc at the end": make_page(0, rec(dyn((12 << 16) | 36, (0 << 16) | 36), 1)),
    "tail": make_page(0, rec(tail(b"hello\n\0"), 1) + rec(tail(b""), 1)),
    "tail too short": make_page(0, rec(struct.pack("<HBBi", 14, 0, 0, 5), 1) + rec(small(1, 1, 1), 1)),
    "missed stored": make_page(50, rec(small(1, 0, 0), 1), MISSED_EVENTS | MISSED_STORED, missed=1234),
    "missed not stored": make_page(50, rec(small(1, 0, 0), 1), MISSED_EVENTS),
    "missed without room": make_page(50, rec(small(1, 0, 0), 1) * 204, MISSED_EVENTS | MISSED_STORED)[:4096],
    "unknown ids": make_page(0, rec(OTHER, 1) + rec(small(1, 4, 4), 1)),
    "record past the commit": make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<I", (1 << 5) | 20) + small(1, 2, 2)),
    "unknown past the commit": make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<I", (1 << 5) | 20) + OTHER),
    "short record too short for its format": make_page(
        0, rec(struct.pack("<HBBi", 10, 0, 0, 5), 1) + rec(small(1, 1, 1), 1)
    ),
    "bulk runs": make_page(
        10,
        b"".join(rec(small(i, -i, i * 3), i % 7) for i in range(200))
        + extend(1 << 28)
        + b"".join(rec(small(i, i, i), 1) for i in range(30)),
    ),
    "runs of unknowns": make_page(
        5,
        b"".join(rec(OTHER, 3) for _ in range(150))
        + rec(small(1, 1, 1), 1)
        + b"".join(rec(OTHER, 1) for _ in range(40)),
    ),
    "valid": _valid_page(),
    "empty": make_page(7, b""),
    "short page": b"\x01\x02",
    "header only": b"\0" * 16,
    "zeros": b"\0" * 4096,
}


def with_commit(pg: bytes, commit: int) -> bytes:
    return pg[:8] + struct.pack("<Q", commit) + pg[16:]


HAND["commit beyond the page"] = with_commit(make_page(0, rec(small(1, 1, 1), 1)), 9000)
HAND["commit beyond, missed"] = with_commit(HAND["commit beyond the page"], 9000 | MISSED_EVENTS | MISSED_STORED)
HAND["commit at the end, missed"] = with_commit(HAND["zeros"], 4080 | MISSED_EVENTS | MISSED_STORED)
HAND["extend word cut"] = make_page(0, rec(small(1, 1, 1), 1) + struct.pack("<IH", 30, 0))  # 6 bytes left

# why each hand-built page is malformed, the reasons in the order the walk meets them (npu_trace.ftrace.framing)
REASONS = {
    "absolute msb": ["ts_overflow", "ts_overflow"],
    "absolute msb carry": ["ts_overflow"],
    "commit at the end, missed": ["bad_length"],  # the zeros after the commit read as a long record of length 0
    "commit beyond the page": ["commit_past_page", "bad_length"],
    "commit beyond, missed": ["commit_past_page", "bad_length"],
    "crossing 2**63": ["ts_overflow", "ts_overflow"],
    "data_loc beyond the record": ["dynamic_outside"],
    "extend word cut": ["cut_header"],
    "long length word 0": ["bad_length"],
    "long length word huge": ["record_past_commit"],
    "long length word under 4": ["bad_length"],
    "long past the commit": ["record_past_commit"],
    "long too short for its format": ["short_record"],
    "long unknown too short": ["bad_length"],
    "page ts past 2**63": ["ts_overflow", "ts_overflow"],
    "record past the commit": ["record_past_commit"],
    "rel_loc beyond the record": ["dynamic_outside"],
    "short page": ["short_page"],
    "short record too short for its format": ["short_record"],
    "tail too short": ["short_record"],
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_built_pages(name: str) -> None:
    check(table(), [HAND[name]])
    check(table([SMALL]), [HAND[name]])


@pytest.mark.parametrize("name", sorted(HAND))
def test_a_malformed_page_says_why(name: str) -> None:
    """Each malformed page or record is a loss of kind "malformed:<reason>", the reason framing.py names; the
    C walker, the Python one and the reference say the same (check)."""
    got = check(table(), [HAND[name]])
    reasons = [loss.kind.split(":", 1)[1] for _, loss in got.losses if loss.kind != "page_missed"]
    assert reasons == REASONS.get(name, [])
    assert got.state.malformed == len(reasons)


def test_the_walkers_name_the_reasons_framing_names() -> None:
    """The C walker's reason codes are framing.MALFORMED, in order; the hand-built pages show every one."""
    from npu_trace.ftrace import _walk
    from npu_trace.ftrace.framing import MALFORMED

    assert _walk.REASONS == MALFORMED
    assert ("page_missed", *(f"malformed:{r}" for r in MALFORMED)) == W.LOSS_KINDS
    assert {r for reasons in REASONS.values() for r in reasons} == set(MALFORMED)


def test_hand_built_pages_in_one_batch_and_every_cut() -> None:
    pages = [HAND[name] for name in sorted(HAND)]
    got = check(table(), pages)
    assert {loss.kind for _, loss in got.losses} == set(W.LOSS_KINDS)
    assert got.state.backwards > 0 and got.state.skipped > 0 and got.state.malformed > 10
    for cut in (0, 7, 15, 16, 17, 20, 23, 100, 500):
        check(table(), [pg[:cut] for pg in pages])


def test_hand_built_cases_show_what_they_name() -> None:
    """A few of the cases, spelled out: the reference's judgement, which the walkers equal."""
    assert [e.values for e in check(table(), [HAND["data_loc"]]).events] == [([7, 8, 9], "hi", [1, 2], 5)]
    beyond = check(table(), [HAND["data_loc beyond the record"]])
    assert [loss.kind for _, loss in beyond.losses] == ["malformed:dynamic_outside"] and len(beyond.events) == 1
    assert check(table(), [HAND["long unknown too short"]]).state.malformed == 1
    big = check(table(), [HAND["page ts past 2**63"]])
    assert big.state.last_ts == (1 << 64) - 3 + 2 + (1 << 58) + 1  # exact in the state
    assert not big.events and [(loss.kind, loss.ts_ns) for _, loss in big.losses] == [
        ("malformed:ts_overflow", (1 << 63) - 1)] * 2  # fmt: skip
    crossing = check(table(), [HAND["crossing 2**63"]])  # the records up to 2**63 - 1 stay, the rest do not
    assert [e.ts_ns for e in crossing.events] == [(1 << 63) - 1] and len(crossing.losses) == 2
    assert [loss.lost for _, loss in check(table(), [HAND["missed stored"]]).losses] == [1234]


@pytest.mark.parametrize("name", sorted(HAND))
def test_a_page_as_a_recording_keeps_it_walks_as_the_whole_page(name: str) -> None:
    """A recording keeps each page up to the last byte its readers read (framing.used_length: the commit, and the
    stored missed count): the walk of what it keeps is the walk of the whole page, malformed or not."""
    whole = HAND[name]
    if len(whole) >= HEADER.data_offset:  # leftover bytes after the commit, as the ring buffer leaves them
        whole = whole.ljust(4096, b"\xee")
    kept = PageCut(HEADER, "little")(whole)
    assert check(table(), [kept]) == check(table(), [whole])
    if name in ("valid", "deltas", "missed stored", "missed not stored", "empty"):
        assert len(kept) < len(whole)


@pytest.mark.parametrize("commit_size", [4, 8])
def test_a_32_bit_page_header(commit_size: int) -> None:
    header = PageHeader(0, 8, 8, commit_size, 8 + commit_size, 4096 - 8 - commit_size)
    body = rec(small(1, 2, 3), 4) + rec(small(2, 3, 4), 5)
    head = struct.pack("<Q", 99) + (len(body) | MISSED_EVENTS | MISSED_STORED).to_bytes(commit_size, "little")
    pg = head + body + (77).to_bytes(commit_size, "little") + b"\0" * 100
    got = check(table(), [pg], header)
    assert [x.lost for _, x in got.losses] == [77] and len(got.events) == 2
    kept = PageCut(header, "little")(pg)
    assert len(kept) == len(head + body) + commit_size and check(table(), [kept], header) == got


# ---- fuzzing --------------------------------------------------------------------------------------------------
def word(tl: int, delta: int) -> bytes:
    return struct.pack("<I", (delta << 5) | tl)


DELTAS = st.one_of(st.integers(0, 1000), st.integers(0, (1 << 27) - 1))
LOCS = st.builds(lambda n, off: n << 16 | off, st.integers(0, 20), st.integers(0, 60))  # in and out of the record
RECORDS = st.one_of(  # records of the formats decoded, most of them well formed
    st.builds(
        lambda pid, a, b, d: rec(small(pid, a, b), d), st.integers(0, 9), st.integers(-5, 5), st.integers(0, 5), DELTAS
    ),
    st.builds(lambda v, r, d: rec(dyn(v, r), d), LOCS, LOCS, DELTAS),
    st.builds(lambda text, d: rec(tail(text), d), st.binary(max_size=140), DELTAS),
    st.builds(
        lambda text, d: rec(struct.pack("<HBBi", 11, 0, 0, 9) + text.ljust(200, b"\0"), d),
        st.binary(max_size=200),
        DELTAS,
    ),
    st.builds(lambda d: rec(OTHER, d), DELTAS),
)
ATOMS = st.one_of(
    RECORDS,
    RECORDS,
    RECORDS,
    st.builds(  # a long record whose length word may lie
        lambda d, b: word(0, d) + b,
        DELTAS,
        st.integers(0, 300)
        .flatmap(lambda n: st.sampled_from([n, n + 4, 2, 0, 1 << 31]))
        .map(lambda n: struct.pack("<I", n)),
    ),
    st.builds(  # any type_len with any id: a record whose length does not fit its format
        lambda tl, d, t, body: word(tl, d) + struct.pack("<H", t) + body,
        st.integers(1, 28),
        DELTAS,
        st.sampled_from([10, 11, 12, 14, 99]),
        st.binary(max_size=120),
    ),
    st.builds(
        lambda t, pid, body: rec(struct.pack("<HBBi", t, 0, 0, pid) + body, 1),
        st.sampled_from([10, 11, 12, 14]),
        st.integers(0, 9),
        st.binary(max_size=260),
    ),
    st.builds(extend, st.integers(0, (1 << 59) - 1)),
    st.builds(absolute, st.integers(0, (1 << 59) - 1)),
    st.builds(lambda d, n: word(29, d) + struct.pack("<I", n), st.integers(0, 3), st.integers(0, 64)),
    st.binary(min_size=1, max_size=12),
)
PAGE_TS = st.one_of(st.integers(0, 1 << 40), st.integers(0, (1 << 64) - 1), st.just((0xF8 << 56) | 12345))


@st.composite
def grammar_pages(draw: Any) -> bytes:
    body = b"".join(draw(st.lists(ATOMS, max_size=40)))
    flags = draw(st.sampled_from([0, MISSED_EVENTS, MISSED_EVENTS | MISSED_STORED]))
    exact = st.just(len(body))
    commit = draw(st.one_of(exact, exact, exact, st.integers(0, 5000), st.integers(0, (1 << 64) - 1)))
    data = struct.pack("<QQ", draw(PAGE_TS), (commit & ~(3 << 30)) | flags) + body
    return data + draw(st.binary(max_size=16)) + b"\0" * draw(st.integers(0, 200))


def as_big_endian(pg: bytes) -> bytes:
    """The same words in the other byte order (u32 words, the page header as u64): not every record swaps as
    the kernel would write it, but every read must still agree between the walkers and the reference."""
    head = b"".join(pg[i : i + 8][::-1] for i in range(0, min(len(pg), 16), 8))
    return head + b"".join(pg[i : i + 4][::-1] for i in range(16, len(pg), 4))


@settings(max_examples=500, deadline=None)
@given(st.lists(grammar_pages(), min_size=1, max_size=4), st.sets(st.sampled_from([10, 11, 12, 14])),
       st.booleans())  # fmt: skip
def test_fuzz_pages_from_a_grammar(pages: List[bytes], ids: Set[int], big: bool) -> None:
    order = "big" if big else "little"
    if big:
        pages = [as_big_endian(pg) for pg in pages]
    got = check(table([f for f in ALL if f.id in ids], order), pages, byteorder=order)
    kept = [PageCut(HEADER, order)(pg) for pg in pages]  # as a recording keeps them: the same walk
    assert check(table([f for f in ALL if f.id in ids], order), kept, byteorder=order) == got


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=4200), min_size=1, max_size=3))
def test_fuzz_random_pages(pages: List[bytes]) -> None:
    check(table(), pages)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 7)), min_size=1, max_size=8),
       st.integers(0, 4096), st.sampled_from(sorted(HAND)))  # fmt: skip
def test_fuzz_bit_flips_and_cuts(flips: List[Tuple[int, int]], cut: int, name: str) -> None:
    pg = bytearray(HAND[name].ljust(4096, b"\0"))
    for offset, bit in flips:
        pg[offset] ^= 1 << bit
    check(table(), [bytes(pg), bytes(pg[:cut])])


# ---- gather -----------------------------------------------------------------------------------------------------
def test_gather_gives_the_fixed_part_for_a_structured_view() -> None:
    events, pages = sim_pages("little")
    decoders = table([*SIM.values()])
    buf, index = pack(pages)
    walk = W.walk(buf, index, HEADER, 0, W.WalkState(), W.wants(decoders))
    fmt = next(f for f in SIM.values() if f.name == "ascend_halMemAlloc_ret")
    rows = walk.offset[walk.etype == fmt.id]
    dtype = np.dtype(
        {
            "names": ["pid", *fmt.field_names],
            "offsets": [4] + [f.offset for f in fmt.fields],
            "formats": ["<i4"] + [f"<{'i' if f.signed else 'u'}{f.size}" for f in fmt.fields],
        }
    )
    raw = W.gather_c(buf, rows, dtype.itemsize)
    assert raw == W.gather_py(buf, rows, dtype.itemsize) and len(raw) == len(rows) * dtype.itemsize
    view = np.frombuffer(raw, dtype)
    want = [(e.pid, *e.values) for e in events if e.fmt == fmt]
    assert len(want) > 100 and [tuple(int(v) for v in row) for row in view.tolist()] == want


@pytest.mark.parametrize("gather", [W.gather_c, W.gather_py])
def test_gather_bounds(gather: Callable[..., bytes]) -> None:
    buf = bytes(range(100))
    assert gather(buf, np.array([0, 96, 50], np.int64), 4) == buf[0:4] + buf[96:100] + buf[50:54]
    assert gather(buf, np.array([], np.int64), 8) == b"" and gather(buf, [3, 99], 0) == b""
    for offsets, size in (([97], 4), ([-1], 4), ([0, 100], 1), ([0], -1), ([1 << 62], 8)):
        with pytest.raises(ValueError):
            gather(buf, np.array(offsets, np.int64), size)


# ---- arguments ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", IMPLEMENTATIONS)
def test_arguments_are_checked(fn: Walker) -> None:
    buf, index = pack([HAND["valid"]])
    state = W.WalkState()
    for pages in ([(0, len(buf) + 1)], [(-1, 10)], [(len(buf), 1)], [(5, -1)]):
        with pytest.raises(ValueError):
            fn(buf, pages, HEADER, 0, state, None)
    for wanted in ({70000: W.Want(8)}, {10: W.Want(-1)}, {10: W.Want(8, ((4, -1),))}):
        with pytest.raises(ValueError):
            fn(buf, index, HEADER, 0, state, wanted)
    with pytest.raises(ValueError):
        fn(buf, index, PageHeader(0, 8, 12, 8, 16, 4080), 0, state, None)
    assert state == W.WalkState()
    assert len(fn(buf, [], HEADER, 0, state, None).ts) == 0 and state == W.WalkState()


def test_wanted_none_returns_every_record() -> None:
    pages = [HAND["valid"], HAND["unknown ids"], HAND["long unknown"]]
    buf, index = pack(pages)
    walks = [fn(buf, index, HEADER, 0, W.WalkState(), None) for fn in IMPLEMENTATIONS]
    same_walks(*walks)
    assert walks[0].etype.tolist().count(99) == 2 and len(walks[0].ts) == 26


def test_the_c_walker_refuses_what_it_cannot_trust() -> None:
    """The extension checks its own arguments (walk.py checks them first; a direct caller may not)."""
    from npu_trace.ftrace import _walk

    pages = np.array([[0, 4096]], np.int64)
    good = W._table(None)
    pg = HAND["valid"]
    assert _walk.walk(pg, pages, (0, 8, 16), 0, 0, good, False)[5][3] == 1
    bad_calls = [
        (pg, np.array([0], np.int64), (0, 8, 16), good),  # pages: not pairs
        (pg, np.array([[1, 4096]], np.int64), (0, 8, 16), good),  # a page past the buffer
        (pg, pages, (0, 5, 16), good),  # commit size
        (pg, pages, (4, 8, 16), good),  # header fields past the data
        (pg, pages, (0, 8, 16), good[:1000]),  # a short table
    ]
    for args in bad_calls:
        with pytest.raises(ValueError):
            _walk.walk(args[0], args[1], args[2], 0, 0, args[3], False)
    lying = bytearray(W._table(((10, W.Want(16, ((8, 0),))),)))
    (where,) = struct.unpack_from("=i", lying, 4 * (W.NTYPES + 10))
    struct.pack_into("=i", lying, 4 * where, 1000)  # id 10's list of dynamic fields runs past the table
    with pytest.raises(ValueError):
        _walk.walk(pg, pages, (0, 8, 16), 0, 0, bytes(lying), False)


def test_a_table_with_dynamic_fields_matches_the_decoders() -> None:
    want = W.wants(table())
    assert want[12] == W.Want(33, ((8, 0), (12, 16)))  # vals (__data_loc), rel (__rel_loc: from its end)
    assert want[10] == W.Want(16) and want[14] == W.Want(16)


def test_state_carries_across_calls_like_a_page_decoder() -> None:
    """Two calls, the second page older than the first one's last record: `backwards`, as PageDecoder."""
    first, second = make_page(10**6, rec(small(1, 0, 0), 1)), make_page(5, rec(small(1, 0, 0), 1))
    got = check(table(), [first, second])
    assert got.state.backwards == 1
    for fn in IMPLEMENTATIONS:
        state = W.WalkState()
        for pg in (first, second):
            buf, index = pack([pg])
            fn(buf, index, HEADER, 0, state, W.wants(table()))
        assert state == got.state


def run_order(pages: List[bytes], order: Optional[str]) -> List[Tuple[int, ...]]:
    buf, index = pack(pages)
    walk = W.walk(buf, index, HEADER, 0, W.WalkState(), None, **({"byteorder": order} if order else {}))
    return list(zip(*(col.tolist() for col in walk[:4])))


def test_byteorder_defaults_to_the_hosts() -> None:
    pages = [HAND["valid"] if sys.byteorder == "little" else as_big_endian(HAND["valid"])]
    assert run_order(pages, None) == run_order(pages, sys.byteorder) and len(run_order(pages, None)) == 22


def test_a_locator_outside_the_record_is_malformed() -> None:
    """A `Want` made by hand may name a locator past the record's end: malformed, never read from the next one."""
    buf, index = pack([make_page(0, rec(small(1, 0, 0), 1) + rec(small(1, 0, 0), 1))])
    for where, found in ((12, 2), (13, 0), (16, 0)):
        walks = [fn(buf, index, HEADER, 0, W.WalkState(), {10: W.Want(8, ((where, 0),))}) for fn in IMPLEMENTATIONS]
        same_walks(*walks)
        assert len(walks[0].ts) == found and len(walks[0].losses) == 2 - found


@settings(max_examples=100, deadline=None)
@given(bufs=st.lists(st.binary(min_size=0, max_size=64), min_size=1, max_size=4), data=st.data(),
       size=st.integers(0, 9))  # fmt: skip
def test_gather_rows_takes_each_row_from_its_buffer(bufs: List[bytes], data: Any, size: int) -> None:
    rows = data.draw(st.lists(st.tuples(st.integers(-1, len(bufs)), st.integers(-2, 70)), max_size=20))
    which = np.array([b for b, _ in rows], dtype=np.int32)
    offsets = np.array([o for _, o in rows], dtype=np.int64)
    ok = all(0 <= b < len(bufs) and 0 <= o <= len(bufs[b]) - size for b, o in rows)
    for fn in (W.gather_rows_c, W.gather_rows_py):
        if ok:
            assert fn(bufs, which, offsets, size) == b"".join(bufs[b][o : o + size] for b, o in rows)
        else:
            with pytest.raises(ValueError):
                fn(bufs, which, offsets, size)
