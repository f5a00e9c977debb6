"""What an export sends its drawing's process (npu_trace.export.apart): messages pickled, columns in shared memory.

A message (a call's name and its arguments) is pickled with protocol 5, except:
- the objects both processes hold since the fork (`Shared`: the block normalizer, the formats' column plans,
  formats and positional plans, all made before it) go as their number: the receiver reads its own copies;
- the data of numpy arrays (a block's columns, its tables' records: pickle's out-of-band buffers, those of
  `INLINE` bytes or more) and the buffers the records lie in (the block's decoded chunks) are copied into a
  slot of shared memory (`Slots`: memfd files mapped by both processes, a slot grown when a message needs
  more) and received as views into it; a chunk that a later message may name too (`Sender(later=...)`: the
  timeline still holds rows in it) as a copy, which the receiver keeps while messages name it, the others
  read where they lie, as memoryviews, let go with their message (npu_trace.ftrace.columns.Table reads a
  record of one from a copy of the record: the decoders take bytes);
- the rest, the pickle's own bytes (a few kB a block), go through a pipe, framed by their length.
A slot is written only once the receiver has freed it (`Sender(take=...)`), and the receiver frees it once
nothing it drew reads it (`Receiver.release` raises BufferError if something does: the drawing keeps no view
of a block's columns past the block); with n slots, at most n blocks' columns are in shared memory.
Measured on a 1 M-event recording (14 blocks of 64 Ki rows, ~200 MB of columns in all, 2 vCPU): this way the
sending cost the analysis ~0.05 s; all through a pipe (the same buffers, written a MiB at a time) ~0.13 s.
The chunks read in place (2 M events: 85 MiB of chunks, 53 MiB of them named by one message only): the
drawing's receiving 22-25 -> 16-18 ms of CPU.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import struct
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

INLINE = 4096  # buffers shorter than this stay in the pickle
SLOT_BYTES = 16 << 20  # a slot's first size (a block of 64 Ki rows needs ~14 MB)
_ALIGN = 64
_LENGTH = struct.Struct("<Q")
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Python >= 3.10 names it; without it, pages come at first touch
_ALONE = "alone"  # a record buffer's kind: read in place (else False: bytes, True: bytearray, each a copy)
Span = Tuple[int, int]


class Shared:
    """Objects both processes hold since the fork, numbered in the same order on both sides."""

    def __init__(self, objects: Sequence[Any]) -> None:
        self.objects = list(objects)
        self.number = {id(o): i for i, o in enumerate(self.objects)}


class Slots:
    """Areas of shared memory (memfd files made before the fork, each mapped where it is used)."""

    def __init__(self, count: int = 2, size: int = SLOT_BYTES) -> None:
        """OSError where they cannot be made (a file-size limit below a slot's size: EFBIG), none left open."""
        self.fds: List[int] = []
        self.maps: List[Optional[mmap.mmap]] = [None] * count
        try:
            for i in range(count):
                self.fds.append(os.memfd_create(f"npu-trace-export-{i}", os.MFD_CLOEXEC))
                os.ftruncate(self.fds[-1], size)
        except OSError:
            self.close()
            raise

    def put(self, slot: int, parts: Sequence[memoryview]) -> List[Span]:
        """Copy the parts into the slot (grown to hold them): where each lies. The sender's mapping of a slot
        is made with its pages mapped at once (`mapped`'s populate): its first copy into them took a fault a
        page (2 M events: ~4 k faults of the ~27 k the export's analysing process takes)."""
        spans, at = [], 0
        for part in parts:
            spans.append((at, at + part.nbytes))
            at = (at + part.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        area = self.mapped(slot, at, grow=True, populate=True)
        with memoryview(area) as view:
            for (lo, hi), part in zip(spans, parts):
                view[lo:hi] = part
        return spans

    def mapped(self, slot: int, size: int, grow: bool = False, populate: bool = False) -> mmap.mmap:
        """The slot's mapping, at least `size` bytes (the file grown first by the side that writes it);
        `populate`: its pages made and mapped at once (see `populate`)."""
        fd, area = self.fds[slot], self.maps[slot]
        if grow and os.fstat(fd).st_size < size:
            os.ftruncate(fd, size + size // 4)
        if area is None or len(area) < size:
            if area is not None:
                area.close()  # nothing holds a view into it: the slot was freed
            flags = mmap.MAP_SHARED | (_POPULATE if populate else 0)
            area = self.maps[slot] = mmap.mmap(fd, os.fstat(fd).st_size, flags=flags)
        return area

    def populate(self) -> None:
        """Every slot mapped, its pages made (zeroed) and mapped at once: the receiver does this while it waits
        for the first message, so that neither side pays a fault per page at its first touch of them (1 M
        events: ~7 k pages, ~20 ms of the sender's analysis, which the receiver waits for)."""
        for slot in range(len(self.fds)):
            self.mapped(slot, 1, populate=True)

    def unused(self, slot: int) -> None:
        """Raise BufferError if anything still reads the slot (a view into it, an array over it): the mapping
        cannot be resized then (resized to its own size: a check that costs a microsecond)."""
        area = self.maps[slot]
        if area is not None:
            try:
                area.resize(len(area))
            except BufferError:
                raise BufferError(f"the drawing still reads slot {slot} of shared memory after its block") from None

    def close(self) -> None:
        for area in self.maps:
            if area is not None:
                area.close()
        for fd in self.fds:
            os.close(fd)
        self.maps, self.fds = [], []


class Records:
    """The record buffers (a block's decoded chunks) the receiver holds: those the last message that named any
    named, each by a number, but those it read in place (`sent(alone)`); a chunk that a block shares with the
    one before is sent once."""

    def __init__(self) -> None:
        self.kept: Dict[int, Tuple[Any, int]] = {}  # id -> (the buffer, its number): held while the receiver does
        self.used: Dict[int, Tuple[Any, int]] = {}  # those the message being pickled names
        self.new: List[Any] = []  # of them, those the receiver lacks, in the order of their numbers in `numbers`
        self.numbers: List[int] = []
        self._next = 0

    def number(self, obj: Any) -> int:
        got = self.used.get(id(obj)) or self.kept.get(id(obj))
        if got is None or got[0] is not obj:
            got = (obj, self._next)
            self._next += 1
            self.new.append(obj)
            self.numbers.append(got[1])
        self.used[id(obj)] = got
        return got[1]

    def sent(self, alone: Sequence[int] = ()) -> List[int]:
        """The message is pickled: the numbers it names (the receiver keeps those only, but `alone`: those it
        reads in place, let go with the message), or [] (none: it keeps what it held)."""
        named = [n for _, n in self.used.values()]
        if named:
            self.kept = {key: got for key, got in self.used.items() if got[1] not in alone}
        self.used, self.new, self.numbers = {}, [], []
        return named


class _Pickler(pickle.Pickler):
    def __init__(self, out: io.BytesIO, shared: Shared, records: Records, oob: List[pickle.PickleBuffer]) -> None:
        super().__init__(out, protocol=5, buffer_callback=_out_of_band(oob))  # no cycle: freed once dumped
        self.shared, self.records = shared, records

    def reducer_override(self, obj: Any) -> Any:
        """A C-contiguous array of numbers (a block's columns, a table's records) as its buffer, its type and
        its shape: the type of numbers by its name, a table's record type as itself (a plan's, so shared: sent
        as its number). numpy's own reduction pickles a type as an object of many parts, a record type as one
        of many parts per field. The rest as pickle does it."""
        if obj.__class__ is not np.ndarray or obj.dtype.hasobject or not obj.flags.c_contiguous:
            return NotImplemented
        dtype = obj.dtype
        return _array, (pickle.PickleBuffer(obj.data), dtype if dtype.names is not None else dtype.str, obj.shape)

    def persistent_id(self, obj: Any) -> Any:
        number = self.shared.number.get(id(obj))
        if number is not None and self.shared.objects[number] is obj:
            return ("s", number)
        if (obj.__class__ is bytes or obj.__class__ is bytearray) and len(obj) >= INLINE:
            return ("r", self.records.number(obj))
        return None


def _array(buf: Any, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
    """An array pickled by _Pickler.reducer_override, over its buffer (as numpy's own reduction makes it)."""
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _out_of_band(oob: List[pickle.PickleBuffer]) -> Callable[[pickle.PickleBuffer], bool]:
    def buffer(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < INLINE:
            return True  # in the pickle
        oob.append(buf)
        return False

    return buffer


class _Unpickler(pickle.Unpickler):
    def __init__(self, body: bytes, shared: Shared, records: Dict[int, Any], buffers: List[memoryview]) -> None:
        super().__init__(io.BytesIO(body), buffers=buffers)
        self.shared, self.records = shared, records

    def persistent_load(self, pid: Any) -> Any:
        kind, number = pid
        return self.shared.objects[number] if kind == "s" else self.records[number]


class Sender:
    """Sends messages down `fd`; `take()` gives a slot the receiver has freed (it waits for one); `later(chunk)`:
    whether a later message may name a record buffer (else the receiver reads it in place, if it is bytes)."""

    def __init__(self, fd: int, slots: Slots, shared: Shared, take: Callable[[], int],
                 later: Callable[[Any], bool] = lambda chunk: True) -> None:  # fmt: skip
        self.fd, self.slots, self.shared, self.take, self.later = fd, slots, shared, take, later
        self.records = Records()

    def send(self, message: Any) -> Optional[int]:
        """Send a message; the slot its data went to (None: it had none)."""
        records = self.records
        oob: List[pickle.PickleBuffer] = []
        body = io.BytesIO()
        _Pickler(body, self.shared, records, oob).dump(message)
        new, numbers = records.new, records.numbers
        slot, spans = None, []
        if new or oob:
            slot = self.take()
            spans = self.slots.put(slot, [memoryview(r) for r in new] + [b.raw() for b in oob])
        kinds = [(n, _ALONE if r.__class__ is bytes and not self.later(r) else r.__class__ is bytearray)
                 for n, r in zip(numbers, new)]  # fmt: skip
        named = records.sent([n for n, kind in kinds if kind == _ALONE])
        frame = pickle.dumps((slot, spans, kinds, named, body.getvalue()), protocol=5)
        write_all(self.fd, _LENGTH.pack(len(frame)) + frame)
        return slot


class Held:
    """A received message's views into its slot (`alone`: the numbers of the record buffers among them),
    released once the message is done with."""

    def __init__(self, slot: Optional[int], views: List[memoryview], alone: Sequence[int] = ()) -> None:
        self.slot, self.views, self.alone = slot, views, alone


class Receiver:
    """Receives what a Sender sends (`receive`: None once the sender closed its end)."""

    def __init__(self, fd: int, slots: Slots, shared: Shared) -> None:
        self.fd, self.slots, self.shared = fd, slots, shared
        self.records: Dict[int, Any] = {}  # the record buffers held (see Records)

    def receive(self) -> Optional[Tuple[Any, Held]]:
        frame = read_frame(self.fd)
        if frame is None:
            return None
        slot, spans, kinds, named, body = pickle.loads(frame)
        views: List[memoryview] = []
        if slot is not None:
            area = memoryview(self.slots.mapped(slot, spans[-1][1]))
            views = [area[lo:hi] for lo, hi in spans]
            area.release()
        records = self.records
        for (number, kind), view in zip(kinds, views):
            records[number] = view if kind == _ALONE else bytearray(view) if kind else bytes(view)
        if named:
            self.records = {n: records[n] for n in named}
        message = _Unpickler(body, self.shared, records, views[len(kinds) :]).load()
        return message, Held(slot, views, [number for number, kind in kinds if kind == _ALONE])

    def release(self, held: Held) -> None:
        """The message is done with: its views into the slot let go, the record buffers read in place with them
        (BufferError: something still reads it)."""
        for number in held.alone:
            self.records.pop(number, None)
        for view in held.views:
            view.release()
        if held.slot is not None:
            self.slots.unused(held.slot)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view) :]


def read_frame(fd: int) -> Optional[bytes]:
    """One length-framed message (None: the other end closed between messages)."""
    head = _read(fd, _LENGTH.size)
    if head is None:
        return None
    (size,) = _LENGTH.unpack(head)
    body = _read(fd, size)
    if body is None:
        raise EOFError("the other end closed mid-message")
    return body


def _read(fd: int, size: int) -> Optional[bytes]:
    got = bytearray()
    while len(got) < size:
        chunk = os.read(fd, size - len(got))
        if not chunk:
            return None
        got += chunk
    return bytes(got)


def send_frame(fd: int, message: Any) -> None:
    """A small message, pickled whole (the drawing's answers: a slot freed, the counts, an error)."""
    frame = pickle.dumps(message, protocol=5)
    write_all(fd, _LENGTH.pack(len(frame)) + frame)
