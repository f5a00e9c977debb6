"""A BPF ring buffer (BPF_MAP_TYPE_RINGBUF) read straight from its memory mapping: no callback per record.

bcc's `ring_buffer_consume()` calls a ctypes callback per record (about 3 us each here); this module maps the
map's fd itself and decodes every committed record between the consumer and producer positions in bulk.
No bcc here: `RingBufReader.open(fd, size)` needs only the map's fd and its data size (max_entries).

Kernel layout (kernel/bpf/ringbuf.c), offsets in the map's fd:
  page 0             consumer page, read-write: `unsigned long consumer_pos` at offset 0 (user space writes it)
  page 1             producer page, read-only: `unsigned long producer_pos` at offset 0 (the kernel writes it)
  pages 2 ..         the data area (max_entries bytes, a power-of-two number of pages), mapped twice in a row,
                     so a record that wraps at the end of the area reads contiguously from the second copy
Positions are byte counters that only grow; a record is at data offset `pos & (size - 1)`. Each record starts
with an 8-byte header `u32 len; u32 pg_off`: BUSY_BIT (1 << 31) while the producer still writes it,
DISCARD_BIT (1 << 30) when it was discarded, the low 30 bits the payload length; records are 8-byte aligned.
`producer_pos` advances at reserve time, before the record is written, so records between the two positions
may still be busy: reading stops at the first busy one (records after it wait for the next read, in order).
After reading, the reader stores the new `consumer_pos` (8 bytes, native order) so the kernel can reuse the
space; until then the kernel never overwrites what lies between the positions.

Memory ordering. The kernel clears BUSY with a store-release after writing the record, and publishes
`producer_pos` with a store-release after writing the (busy) header; a consumer must read both with
load-acquire and must finish reading a record before it stores `consumer_pos`. Positions are read and written
here through a native 'Q' memoryview: one aligned 8-byte load or store, never torn.
  * x86-64 (TSO): loads are not reordered with other loads, nor stores with earlier loads, so plain loads and
    stores in program order (producer_pos, then a header, then its payload; all loads, then the consumer_pos
    store) already have acquire/release semantics. One pass decodes everything.
  * aarch64 and other weakly ordered CPUs: plain loads may be satisfied out of order, and the payload of a
    record could be read before its header says it is committed. There the reader (`weak_order=True`, the
    default off x86) reads producer_pos, fences, walks the headers to find the committed end, fences, decodes
    only that committed span, fences, then stores consumer_pos. The fence is a release followed by an acquire
    of a private `threading.Lock` (CPython's locks are built on atomics with release/acquire semantics, and on
    ARMv8 a store-release followed by a load-acquire is ordered): a full barrier without C code.
Little-endian 64-bit hosts only (record layout as in `layout`; positions are 8-byte unsigned longs).
"""

from __future__ import annotations

import contextlib
import mmap
import platform
import struct
import threading
from functools import lru_cache
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from npu_trace.bpf import layout
from npu_trace.bpf.records import RunSpec

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
LEN_MASK = DISCARD_BIT - 1
HDR_SIZE = 8
MAP_TYPE_RINGBUF = 27  # enum bpf_map_type BPF_MAP_TYPE_RINGBUF
BULK_MIN_RUN = 8  # records: shorter runs go through the per-record loop
MAX_CHUNK = 4096  # records per bulk unpack (structs are cached per power-of-two chunk)
STEP_BYTES = 1 << 20  # bytes decoded between two stores of consumer_pos (a backlog is freed as it is read)
TSO_MACHINES = frozenset({"x86_64", "amd64", "AMD64"})
_WORD = struct.Struct("<I")
_TYPE_AT = HDR_SIZE + layout.TYPE_OFFSET  # the event type of a record, from the start of its ring header


class RingBufError(Exception):
    """The ring buffer cannot be mapped or read (not a ring buffer map, positions that make no sense)."""


class Consumed(NamedTuple):
    pos: int  # the new consumer position
    records: int  # committed records read (decoded, or counted malformed by the decoder)
    discarded: int  # records the BPF program discarded (skipped)
    busy: bool  # stopped at a record still being written


def stride_of(word: int) -> int:
    """Bytes a record takes in the ring (header + payload, rounded up to 8) from its header's len word."""
    return ((word & LEN_MASK) + HDR_SIZE + 7) & ~7


@lru_cache(maxsize=256)
def _run_struct(codes: str, size: int, stride: int, count: int) -> struct.Struct:
    """`count` records back to back: the len word, pg_off skipped, the record, padding up to the stride."""
    pad = stride - HDR_SIZE - size
    return struct.Struct("<" + f"I4x{codes}{pad}x" * count)


def _run(data: Any, off: int, stride: int, word: int, etype: int, spec: RunSpec, count: int, out: List[Any]) -> int:
    """Decode up to `count` records from data offset `off` that share `word` (so: committed, not discarded, one
    length) and event type `etype`, with one unpack; the run is cut at the first record that differs. Returns
    the records decoded, 0 when the run is too short (or a record in it does not decode) for the caller's loop."""
    flat = _run_struct(spec.codes, spec.size, stride, count).unpack_from(data, off)
    width = spec.values + 1
    words = flat[0::width]
    run = count if words.count(word) == count else next(i for i, w in enumerate(words) if w != word)
    types = flat[1 + spec.type_col :: width][:run]
    if types.count(etype) != run:
        run = next(i for i, t in enumerate(types) if t != etype)
    if run < BULK_MIN_RUN:
        return 0
    cols = [flat[k::width] for k in range(1, width)]
    if run != count:
        cols = [c[:run] for c in cols]
    try:
        events = spec.build(cols, run)
    except (KeyError, IndexError, ValueError, struct.error):
        return 0  # e.g. an unknown HAL op: the per-record loop counts it malformed and decodes the rest
    out.extend(events)
    return run


def consume(
    data: Any, mask: int, cons: int, prod: int, decoder: Any, out: List[Any], limit: Optional[int] = None
) -> Consumed:
    """Decode the committed records between positions `cons` and `prod` into `out`. Pure: no kernel.

    data: the data area as the kernel maps it (2 * size bytes, the second half the same memory as the first; a
    test passes a buffer whose second half copies the first); mask: size - 1. decoder: `decode(data, offset,
    size)` -> event or None, and `run_spec(type)` -> RunSpec or None (runs of one type and length are decoded
    with one unpack). Stops at the first busy record; skips discarded ones. limit: read only the records that
    start less than `limit` bytes after `cons` (the reader hands the space back to the kernel step by step).
    """
    if not 0 <= prod - cons <= mask + 1:
        raise RingBufError(f"producer position {prod} and consumer position {cons} are {prod - cons} bytes apart "
                           f"in a {mask + 1}-byte ring buffer")  # fmt: skip
    word_at, type_at = _WORD.unpack_from, layout.TYPE.unpack_from
    decode, spec_of, append = decoder.decode, decoder.run_spec, out.append
    pos, records, discarded = cons, 0, 0
    stop = prod if limit is None else min(prod, cons + limit)
    while stop - pos > 0 and prod - pos >= HDR_SIZE:
        off = pos & mask
        word = word_at(data, off)[0]
        if word & BUSY_BIT:
            return Consumed(pos, records, discarded, True)
        length = word & LEN_MASK
        stride = (length + HDR_SIZE + 7) & ~7
        if stride > prod - pos:
            raise RingBufError(f"record of {length} bytes at position {pos} runs past the producer ({prod})")
        if word & DISCARD_BIT:
            discarded += 1
            pos += stride
            continue
        # records of this stride that fit before prod (the double mapping: no wrap) and start before stop
        left = min((prod - pos) // stride, -((pos - stop) // stride))
        if left >= BULK_MIN_RUN and length >= _TYPE_AT - HDR_SIZE + 2:
            etype = type_at(data, off + _TYPE_AT)[0]
            spec = spec_of(etype)
            if (
                spec is not None
                and length >= spec.size
                and word_at(data, off + stride)[0] == word == word_at(data, off + 2 * stride)[0]
                and type_at(data, off + stride + _TYPE_AT)[0] == etype == type_at(data, off + 2 * stride + _TYPE_AT)[0]
            ):
                chunk = 1 << (min(left, MAX_CHUNK).bit_length() - 1)
                n = _run(data, off, stride, word, etype, spec, chunk, out)
                if n:
                    records += n
                    pos += n * stride
                    continue
        ev = decode(data, off + HDR_SIZE, length)
        if ev is not None:
            append(ev)
        records += 1
        pos += stride
    return Consumed(pos, records, discarded, False)


def committed_end(data: Any, mask: int, cons: int, prod: int, limit: Optional[int] = None) -> int:
    """The position of the first busy record between `cons` and `prod` (or `prod`; or of the first record
    starting `limit` bytes or more after `cons`): a headers-only walk, the first pass of a read on weakly
    ordered CPUs."""
    word_at, pos = _WORD.unpack_from, cons
    stop = prod if limit is None else min(prod, cons + limit)
    while stop - pos > 0 and prod - pos >= HDR_SIZE:
        word = word_at(data, pos & mask)[0]
        if word & BUSY_BIT:
            break
        stride = stride_of(word)
        if stride > prod - pos:
            raise RingBufError(f"record of {word & LEN_MASK} bytes at position {pos} runs past the producer ({prod})")
        pos += stride
    return pos


class RawRecords:
    """A decoder that keeps every record's bytes undecoded (for `consume`; never bulk)."""

    def decode(self, data: Any, offset: int, size: int) -> bytes:
        return bytes(data[offset : offset + size])

    def run_spec(self, ev_type: int) -> Optional[RunSpec]:
        return None


class Fence:
    """A full memory barrier from Python: release, then acquire, a private lock (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def __call__(self) -> None:
        self._lock.release()
        self._lock.acquire()


def map_info(fd: int) -> Dict[str, str]:
    """Fields of /proc/self/fdinfo/<fd> (map_type, max_entries, ... for a BPF map); {} when unreadable."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except OSError:
        return {}


class RingBufReader:
    """The consumer of one BPF ring buffer. `consumer`: a writable buffer holding consumer_pos at offset 0;
    `producer`: a buffer holding producer_pos at offset 0; `data`: the data area mapped twice (2 * size bytes).
    `open(fd, size)` maps them from a ring buffer map's fd; tests pass plain buffers."""

    def __init__(
        self,
        consumer: Any,
        producer: Any,
        data: Any,
        size: int,
        weak_order: Optional[bool] = None,
        maps: Sequence[mmap.mmap] = (),
    ) -> None:
        if size <= 0 or size & (size - 1):
            raise RingBufError(f"ring buffer size {size} is not a power of two")
        if struct.calcsize("P") != 8:
            raise RingBufError("direct ring buffer reading needs a 64-bit host (8-byte positions)")
        self.size, self.mask = size, size - 1
        self.step = STEP_BYTES  # bytes decoded between two stores of consumer_pos
        self.weak_order = platform.machine() not in TSO_MACHINES if weak_order is None else weak_order
        self._fence = Fence()
        self._maps = tuple(maps)
        self._views: List[memoryview] = []
        self._cons = self._view(consumer, 8).cast("Q")
        self._prod = self._view(producer, 8).cast("Q")
        self._data = self._view(data, 2 * size)
        self._views += [self._cons, self._prod]
        if self._cons.readonly:
            raise RingBufError("the consumer page is not writable")

    def _view(self, buf: Any, size: int) -> memoryview:
        base = memoryview(buf)
        if base.nbytes < size:
            raise RingBufError(f"buffer of {base.nbytes} bytes, need {size}")
        view = base.cast("B")[:size]
        self._views += [base, view]
        return view

    @classmethod
    def open(cls, fd: int, size: int) -> RingBufReader:
        """Map the ring buffer map `fd` whose data area is `size` bytes (its max_entries)."""
        info = map_info(fd)
        if "map_type" in info and int(info["map_type"]) != MAP_TYPE_RINGBUF:
            raise RingBufError(f"fd {fd} is a BPF map of type {info['map_type'].strip()}, not a ring buffer")
        if "max_entries" in info and int(info["max_entries"]) != size:
            raise RingBufError(f"ring buffer fd {fd} has {info['max_entries'].strip()} bytes, not {size}")
        page = mmap.PAGESIZE
        try:
            cons = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        except (OSError, ValueError) as exc:
            raise RingBufError(f"cannot map the consumer page of ring buffer fd {fd}: {exc}") from None
        try:
            ro = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        except (OSError, ValueError) as exc:
            cons.close()
            raise RingBufError(f"cannot map the data area of ring buffer fd {fd}: {exc}") from None
        view = memoryview(ro)
        try:
            return cls(cons, view[:page], view[page:], size, maps=(cons, ro))
        except BaseException:
            view.release()
            for m in (cons, ro):
                with contextlib.suppress(BufferError):  # a view in the traceback: the collector unmaps it
                    m.close()
            raise

    def positions(self) -> Tuple[int, int]:
        """(consumer_pos, producer_pos)."""
        return self._cons[0], self._prod[0]

    def read(self, decoder: Any, out: List[Any], max_bytes: Optional[int] = None) -> Consumed:
        """Decode the records committed when the read starts into `out` (see `consume`), handing the space
        back to the kernel every `step` bytes (a long backlog frees the ring while it is decoded). max_bytes:
        only the records that start within that many bytes (small batches stay in the CPU caches; `pending()`
        says what is left)."""
        start, prod = self._cons[0], self._prod[0]
        if prod == start:
            return Consumed(start, 0, 0, False)
        stop = prod if max_bytes is None else min(prod, start + max_bytes)
        end = prod
        if self.weak_order:
            self._fence()  # producer_pos (acquire) before the headers
            end = committed_end(self._data, self.mask, start, prod, stop - start)
            self._fence()  # the headers (acquire) before the payloads
        busy = end != prod and end < stop  # the walk stopped at a busy record, not at the budget
        cons, records, discarded = start, 0, 0
        while stop - cons > 0:
            got = consume(self._data, self.mask, cons, end, decoder, out, min(self.step, stop - cons))
            records += got.records
            discarded += got.discarded
            busy = busy or got.busy
            if got.pos == cons:
                break
            if self.weak_order:
                self._fence()  # every load of the span before the store that frees it (release)
            self._cons[0] = cons = got.pos
            if got.busy or cons == end:
                break
        return Consumed(cons, records, discarded, busy)

    def pending(self) -> int:
        """Bytes between the consumer and producer positions (records not read yet, some maybe busy)."""
        return self._prod[0] - self._cons[0]

    def close(self) -> None:
        """Unmap (idempotent). A view still exported elsewhere leaves its mapping to the garbage collector."""
        while self._views:
            with contextlib.suppress(BufferError):
                self._views.pop().release()
        for m in self._maps:
            with contextlib.suppress(BufferError):
                m.close()
        self._maps = ()
