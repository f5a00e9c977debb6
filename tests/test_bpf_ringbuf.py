"""Offline: the direct BPF ring buffer reader (npu_trace.bpf.ringbuf) on hand-built ring buffers: committed,
busy and discarded records, wrap-around at the end of the data area (the kernel maps it twice: the helper
writes both copies), runs decoded in bulk against the same records decoded one by one, mixed types and
lengths, malformed records, and the consumer position written back."""

from __future__ import annotations

import struct
from typing import Any, List, Optional, Tuple

import pytest

from npu_trace.bpf import layout, ringbuf
from npu_trace.bpf.records import Decoder, RunSpec
from npu_trace.bpf.ringbuf import (
    BULK_MIN_RUN,
    BUSY_BIT,
    DISCARD_BIT,
    Consumed,
    RawRecords,
    RingBufError,
    RingBufReader,
    committed_end,
    consume,
)
from npu_trace.events import Loss, TraceEvent


def bench(ts: int, seq: int, tid: int = 101, cpu: int = 1) -> bytes:
    return layout.BENCH.pack(ts, 100, tid, layout.NPU_EV_BENCH, cpu, 0, seq)


def hal(ts: int, op: int, args: Tuple[int, ...] = (), dev: int = 0, ret: int = 0) -> bytes:
    padded = (*args, *(0,) * (layout.NPU_HAL_ARGS - len(args)))
    return layout.HAL_CALL.pack(ts + 10, 100, 101, layout.NPU_EV_HAL_CALL, 0, 0, ts, 10, *padded, dev, ret, op, 0, 0)


def irq(ts: int, name: bytes = b"virtio0-req.0") -> bytes:
    return layout.IRQ.pack(ts + 5, 0, 0, layout.NPU_EV_IRQ, 1, 0, ts, 5, 36, 1, name)


def tp(ts: int, tp_id: int, values: Tuple[int, ...], present: int, signed: int = 0, text: bytes = b"") -> bytes:
    return layout.TP_EVENT.pack(ts, 7, 8, layout.NPU_EV_TRACEPOINT, 0, 0, *values, tp_id, 0, present, signed, 0, text)


class Ring:
    """A ring buffer's data area as user space sees it: `size` bytes mapped twice (both copies written)."""

    def __init__(self, size: int = 4096, start: int = 0) -> None:
        self.size, self.mask = size, size - 1
        self.data = bytearray(2 * size)
        self.cons = self.prod = start  # positions: byte counters that only grow
        self.at: List[int] = []  # position of every record put

    def write(self, pos: int, blob: bytes) -> None:
        for i, b in enumerate(blob):
            off = (pos + i) & self.mask
            self.data[off] = self.data[off + self.size] = b

    def put(self, payload: bytes, busy: bool = False, discard: bool = False) -> int:
        word = len(payload) | (BUSY_BIT if busy else 0) | (DISCARD_BIT if discard else 0)
        pos = self.prod
        self.write(pos, struct.pack("<II", word, 0) + payload)
        self.prod += (len(payload) + 8 + 7) & ~7
        assert self.prod - self.cons <= self.size, "test ring overfilled"
        self.at.append(pos)
        return pos

    def commit(self, pos: int) -> None:
        """Clear the busy bit of the record at `pos`."""
        word = struct.unpack_from("<I", self.data, pos & self.mask)[0]
        self.write(pos, struct.pack("<I", word & ~BUSY_BIT))

    def consume(self, decoder: Any = None) -> Tuple[List[Any], Consumed]:
        out: List[Any] = []
        got = consume(self.data, self.mask, self.cons, self.prod, decoder or Decoder(), out)
        self.cons = got.pos
        return out, got


class ScalarDecoder(Decoder):
    """Decodes every record on its own (no runs): the reference for the bulk path."""

    def run_spec(self, ev_type: int) -> Optional[RunSpec]:
        return None


class CountingDecoder(Decoder):
    def __init__(self) -> None:
        super().__init__()
        self.singles = 0

    def decode(self, data: Any, offset: int = 0, size: Optional[int] = None) -> Optional[TraceEvent]:
        self.singles += 1
        return super().decode(data, offset, size)


def scalar(payloads: List[bytes]) -> List[Any]:
    dec = ScalarDecoder()
    return [dec.decode(p) for p in payloads]


# ---- committed, busy, discarded ----------------------------------------------------------------------------
def test_committed_records_decoded_in_order() -> None:
    ring = Ring()
    payloads = [bench(1000 + i, i) for i in range(3)]
    for p in payloads:
        ring.put(p)
    out, got = ring.consume()
    assert out == scalar(payloads)
    assert out[0].fields() == {"seq": 0} and (out[0].ts_ns, out[0].cpu, out[0].pid) == (1000, 1, 101)
    assert got == Consumed(ring.prod, 3, 0, False)
    assert ring.consume() == ([], Consumed(ring.prod, 0, 0, False))  # nothing new


def test_busy_record_stops_the_read_until_committed() -> None:
    ring = Ring()
    ring.put(bench(1, 1))
    busy = ring.put(bench(2, 2), busy=True)
    ring.put(bench(3, 3))  # committed, but after a busy one: must wait, in order
    out, got = ring.consume()
    assert [e.values for e in out] == [(1,)] and got == Consumed(busy, 1, 0, True)
    out, got = ring.consume()
    assert out == [] and got == Consumed(busy, 0, 0, True)
    ring.commit(busy)
    out, got = ring.consume()
    assert [e.values for e in out] == [(2,), (3,)] and got == Consumed(ring.prod, 2, 0, False)


def test_discarded_records_are_skipped_and_counted() -> None:
    ring = Ring()
    ring.put(bench(1, 1))
    ring.put(hal(2, 0), discard=True)
    ring.put(bench(3, 3))
    ring.put(b"\xff" * 20, discard=True)  # a discarded record's payload is never looked at
    out, got = ring.consume()
    assert [e.values for e in out] == [(1,), (3,)] and got == Consumed(ring.prod, 2, 2, False)


def test_busy_and_discarded_inside_a_run() -> None:
    ring = Ring(8192)
    payloads = [bench(i, i) for i in range(120)]
    for i, p in enumerate(payloads):
        ring.put(p, discard=i in (30, 31, 77), busy=i == 100)
    busy = ring.at[100]
    dec = CountingDecoder()
    out, got = ring.consume(dec)
    kept = [p for i, p in enumerate(payloads[:100]) if i not in (30, 31, 77)]
    assert out == scalar(kept) and got == Consumed(busy, 97, 3, True)
    assert dec.singles < 20  # runs went through the bulk path
    ring.commit(busy)
    out, got = ring.consume(dec)
    assert out == scalar(payloads[100:]) and got == Consumed(ring.prod, 20, 0, False)


# ---- bulk runs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [BULK_MIN_RUN - 1, BULK_MIN_RUN, 9, 100, 1000])
def test_run_of_one_type_decoded_in_bulk_equals_one_by_one(count: int) -> None:
    ring = Ring(1 << 16)
    payloads = [bench(10_000 + 7 * i, i, tid=200 + i % 3, cpu=i % 2) for i in range(count)]
    for p in payloads:
        ring.put(p)
    dec = CountingDecoder()
    out, got = ring.consume(dec)
    assert out == scalar(payloads) and got == Consumed(ring.prod, count, 0, False)
    assert dec.singles == count if count < BULK_MIN_RUN else dec.singles < BULK_MIN_RUN


def test_more_than_one_chunk() -> None:
    ring = Ring(1 << 20)
    n = ringbuf.MAX_CHUNK * 2 + 123
    payloads = [bench(i, i) for i in range(n)]
    for p in payloads:
        ring.put(p)
    out, got = ring.consume()
    assert out == scalar(payloads) and got.records == n and got.pos == ring.prod


def test_hal_and_irq_runs() -> None:
    ring = Ring(1 << 16)
    hals = [hal(100 + i, i % 4, (i, 2, 0xFFFFFF9C), dev=i % 2, ret=-i) for i in range(40)]
    irqs = [irq(5000 + i, b"trs-mbox-0-%d" % i) for i in range(40)]
    for p in hals + irqs:
        ring.put(p)
    dec = CountingDecoder()
    out, got = ring.consume(dec)
    assert out == scalar(hals + irqs) and got.records == 80 and dec.singles < 10
    assert out[1].event == "bpf:halMemFree" and out[40].fields()["name"] == "trs-mbox-0-0"
    assert out[3].fields()["timeout_ms"] == -100  # s32 argument, as one by one


def test_tracepoint_runs() -> None:
    """The driver's tracepoint events (ids NPU_TP_*) in bulk equal one by one: interleaved tracepoints, a value
    absent (None), a signed one, a tracepoint id the decoder does not know (malformed, the rest decoded)."""
    ring = Ring(1 << 16)
    sqe = layout.NPU_TP_TRS_CHAN_SQE
    cqe = layout.NPU_TP_TRS_CORE_LOGIC_CQE
    payloads = []
    for i in range(60):
        if i == 41:
            payloads.append(tp(i, 999, (0,) * 8, 0))
        elif i % 2:
            payloads.append(tp(i, sqe, (3, 0, 5, i, 7, 0, 0, 1), 0b10011111, 0, b"Task Send"))
        else:
            present = 0xFF if i != 10 else 0xFE
            payloads.append(tp(i, cqe, (3, 0, 5, i, 7, 4, (1 << 64) - 2, 2), present, 1 << 6, b"Logic Cq Enque"))
    for p in payloads:
        ring.put(p)
    dec = CountingDecoder()
    out, got = ring.consume(dec)
    assert got.records == 60 and dec.singles < 20 and out == scalar(payloads[:41] + payloads[42:])
    assert dec.losses() == [Loss("bpf", -1, "malformed", 1)]
    assert out[1].event == "bpf:trs_chan_sqe" and out[1].fields() == {
        "dev": 3, "ts": 0, "stream": 5, "task": 1, "sqid": 7, "sqe_type": 1, "str": "Task Send"
    }  # fmt: skip
    assert out[10].fields()["dev"] is None and out[12].fields()["errcode"] == -2


def test_unknown_op_in_a_run_is_malformed_and_the_rest_decoded() -> None:
    ring = Ring(1 << 16)
    payloads = [hal(i, 9 if i == 13 else i % 4) for i in range(50)]
    for p in payloads:
        ring.put(p)
    dec = Decoder()
    out, got = ring.consume(dec)
    assert got.records == 50 and len(out) == 49 and out == scalar(payloads[:13] + payloads[14:])
    assert dec.losses() == [Loss("bpf", -1, "malformed", 1)]


def test_mixed_types_and_lengths() -> None:
    ring = Ring(1 << 16)
    long_bench = bench(7, 7) + b"\x00" * 12  # a longer record of a known type: its prefix is the event
    payloads: List[bytes] = []
    for i in range(30):
        payloads += [bench(i, i), hal(i, i % 4), bench(i, i + 1), irq(i), long_bench]
    for p in payloads:
        ring.put(p)
    for i in range(20):  # then same type, alternating lengths
        payloads.append(long_bench if i % 2 else bench(i, i))
        ring.put(payloads[-1])
    out, got = ring.consume()
    assert out == scalar(payloads) and got == Consumed(ring.prod, len(payloads), 0, False)


def test_short_and_unknown_records_are_malformed() -> None:
    ring = Ring()
    ring.put(bench(1, 1)[:20])  # shorter than a bench_event
    ring.put(struct.pack("<QIIHHI", 1, 1, 1, 99, 0, 0))  # unknown type
    ring.put(b"\x01")
    ring.put(b"")  # an empty record
    ring.put(bench(2, 2))
    dec = Decoder()
    out, got = ring.consume(dec)
    assert [e.values for e in out] == [(2,)] and got.records == 5
    assert dec.losses() == [Loss("bpf", -1, "malformed", 4)]


# ---- wrap-around -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start", [4096 - 40 * 3, 4096 - 8, 5 * 4096 - 16, (1 << 40) + 4096 - 24])
def test_records_wrapping_at_the_end_of_the_data_area(start: int) -> None:
    ring = Ring(4096, start=start)
    payloads = [bench(i, i) for i in range(60)] + [hal(1, 2), irq(2)] + [bench(i, i) for i in range(5)]
    for p in payloads:
        ring.put(p)
    assert (ring.cons & ring.mask) + ring.prod - ring.cons > 4096  # the span runs past the end of the area
    out, got = ring.consume()
    assert out == scalar(payloads) and got == Consumed(ring.prod, len(payloads), 0, False)


def test_payload_split_by_the_end_of_the_area() -> None:
    ring = Ring(4096, start=4096 - 16)
    record = hal(5, 0, (0x1000, 0, 0))  # 8 bytes of header + 8 of payload before the end, the rest after
    ring.put(record)
    out, got = ring.consume()
    assert out == scalar([record]) and got.pos == 4096 - 16 + 8 + len(record) == 4096 - 16 + 8 + layout.HAL_CALL.size


def test_ring_filled_to_the_last_byte() -> None:
    ring = Ring(4096, start=3 * 4096 + 512)
    for i in range(4096 // 40):
        ring.put(bench(i, i))
    ring.put(b"\x00" * (4096 - ring.prod + ring.cons - 8), discard=True)  # exactly fills it
    assert ring.prod - ring.cons == 4096
    out, got = ring.consume()
    assert len(out) == 4096 // 40 and got == Consumed(ring.prod, 4096 // 40, 1, False)


# ---- inconsistent positions --------------------------------------------------------------------------------
def test_inconsistent_positions() -> None:
    ring = Ring()
    ring.put(bench(1, 1))
    with pytest.raises(RingBufError, match="apart"):
        consume(ring.data, ring.mask, ring.cons, ring.cons + 8192, Decoder(), [])
    with pytest.raises(RingBufError, match="apart"):
        consume(ring.data, ring.mask, 100, 50, Decoder(), [])
    with pytest.raises(RingBufError, match="runs past the producer"):
        consume(ring.data, ring.mask, 0, 16, Decoder(), [])
    with pytest.raises(RingBufError, match="runs past the producer"):
        committed_end(ring.data, ring.mask, 0, 16)
    assert consume(ring.data, ring.mask, 0, 4, Decoder(), []) == Consumed(0, 0, 0, False)  # < a header


@pytest.mark.parametrize("limit", [1, 40, 41, 400, 4000])
def test_limit_reads_the_records_that_start_before_it(limit: int) -> None:
    ring = Ring(8192, start=8192 - 200)
    payloads = [bench(i, i) for i in range(150)]
    for p in payloads:
        ring.put(p)
    out: List[Any] = []
    got = consume(ring.data, ring.mask, ring.cons, ring.prod, Decoder(), out, limit)
    n = min(150, -(-limit // 40))
    assert out == scalar(payloads[:n]) and got == Consumed(ring.cons + 40 * n, n, 0, False)


def test_committed_end() -> None:
    ring = Ring()
    ring.put(bench(1, 1))
    ring.put(hal(2, 1), discard=True)
    busy = ring.put(bench(3, 3), busy=True)
    ring.put(bench(4, 4))
    assert committed_end(ring.data, ring.mask, ring.cons, ring.prod) == busy
    assert committed_end(ring.data, ring.mask, ring.cons, ring.prod, 1) == ring.at[1]
    assert committed_end(ring.data, ring.mask, ring.cons, ring.prod, 41) == ring.at[2]  # hal() starts at 40
    ring.commit(busy)
    assert committed_end(ring.data, ring.mask, ring.cons, ring.prod) == ring.prod


def test_raw_records() -> None:
    ring = Ring()
    payloads = [bench(i, i) for i in range(20)] + [b"abc"]
    for p in payloads:
        ring.put(p)
    out, got = ring.consume(RawRecords())
    assert out == payloads and got.records == 21


# ---- the reader: positions in the consumer and producer pages ----------------------------------------------
class Pages:
    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        self.consumer = bytearray(4096)
        self.producer = bytearray(4096)
        self.sync()

    def sync(self) -> None:
        struct.pack_into("<Q", self.consumer, 0, self.ring.cons)
        struct.pack_into("<Q", self.producer, 0, self.ring.prod)


@pytest.mark.parametrize("weak_order", [False, True])
def test_reader_writes_the_consumer_position_back(weak_order: bool) -> None:
    ring = Ring(4096, start=(1 << 33) + 4000)
    pages = Pages(ring)
    reader = RingBufReader(pages.consumer, pages.producer, ring.data, 4096, weak_order=weak_order)
    out: List[Any] = []
    assert reader.read(Decoder(), out) == Consumed(ring.cons, 0, 0, False) and out == []
    payloads = [bench(i, i) for i in range(50)]
    for p in payloads:
        ring.put(p)
    busy = ring.put(bench(99, 99), busy=True)
    ring.put(bench(100, 100))
    pages.sync()
    got = reader.read(Decoder(), out)
    assert got == Consumed(busy, 50, 0, True) and out == scalar(payloads)
    assert reader.positions() == (busy, ring.prod)
    assert pages.consumer[:8] == busy.to_bytes(8, "little")  # what the kernel reads back
    ring.commit(busy)
    out.clear()
    assert reader.read(Decoder(), out) == Consumed(ring.prod, 2, 0, False) and len(out) == 2
    assert struct.unpack_from("<Q", pages.consumer)[0] == ring.prod
    reader.close()
    reader.close()


def test_reader_hands_the_space_back_step_by_step() -> None:
    ring = Ring(1 << 16, start=(1 << 16) - 1000)
    pages = Pages(ring)
    reader = RingBufReader(pages.consumer, pages.producer, ring.data, 1 << 16, weak_order=False)
    reader.step = 1000
    stores: List[int] = []
    cons_view = reader._cons

    class Spy:  # records every store of consumer_pos
        def __getitem__(self, i: int) -> int:
            return cons_view[i]

        def __setitem__(self, i: int, v: int) -> None:
            stores.append(v)
            cons_view[i] = v

    reader._cons = Spy()  # type: ignore[assignment]
    payloads = [bench(i, i) for i in range(500)] + [hal(1, 1)] * 3 + [bench(i, i) for i in range(400)]
    for p in payloads:
        ring.put(p)
    pages.sync()
    out: List[Any] = []
    assert reader.read(Decoder(), out) == Consumed(ring.prod, len(payloads), 0, False)
    assert out == scalar(payloads) and stores[-1] == ring.prod and len(stores) > 30
    assert all(b - a <= 1000 + 80 for a, b in zip([ring.cons, *stores], stores))


@pytest.mark.parametrize("weak_order", [False, True])
def test_reader_max_bytes_leaves_the_rest_pending(weak_order: bool) -> None:
    ring = Ring(8192, start=8192 - 100)
    pages = Pages(ring)
    reader = RingBufReader(pages.consumer, pages.producer, ring.data, 8192, weak_order=weak_order)
    payloads = [bench(i, i) for i in range(100)]
    for p in payloads:
        ring.put(p)
    busy = ring.put(bench(0, 0), busy=True)
    pages.sync()
    assert reader.pending() == 101 * 40
    out: List[Any] = []
    assert reader.read(Decoder(), out, 1000) == Consumed(ring.cons + 1000, 25, 0, False)
    assert reader.pending() == 76 * 40
    assert reader.read(Decoder(), out, 1001) == Consumed(ring.cons + 2040, 26, 0, False)  # one starts at 1000
    assert reader.read(Decoder(), out, 1 << 20) == Consumed(busy, 49, 0, True)
    assert out == scalar(payloads) and reader.pending() == 40
    assert reader.read(Decoder(), out, 0) == Consumed(busy, 0, 0, False)


def test_reader_refuses_bad_buffers() -> None:
    with pytest.raises(RingBufError, match="power of two"):
        RingBufReader(bytearray(8), bytearray(8), bytearray(6000), 3000)
    with pytest.raises(RingBufError, match="need 8192"):
        RingBufReader(bytearray(8), bytearray(8), bytearray(4096), 4096)
    with pytest.raises(RingBufError, match="not writable"):
        RingBufReader(bytes(8), bytearray(8), bytearray(8192), 4096)


def test_open_refuses_a_map_that_is_not_a_ring_buffer(tmp_path: Any) -> None:
    path = tmp_path / "plain"
    path.write_bytes(b"\x00" * 4096)
    with open(path, "r+b") as f, pytest.raises(RingBufError, match="cannot map the data area"):
        RingBufReader.open(f.fileno(), 4096)  # a 4 KiB file has no room for the producer page + 2 x 4 KiB
