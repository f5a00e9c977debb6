"""A timeline as a Perfetto trace (`.pftrace`): Perfetto's track-event packets, in Perfetto's own schema.

A Perfetto trace is a protobuf `Trace`: its packets are field 1, one after another, so a file is the packets
each framed as that field, written as they come (memory stays bounded: `FLUSH_PACKETS` packets, the
interning tables). `PerfettoWriter` writes the hot packets (track events: slice begins and ends, instants,
counters, their interned names and debug annotations of plain values) in the wire format by hand, field by
field in field-number order as protobuf's own serializer writes them, and builds the rare ones (the clock,
the sequence's first packet, the track descriptors, annotations of nested values) as `perfetto_trace_pb2`
messages (the schema the `perfetto` package ships): the bytes are the same as the tests' reference writer's,
which builds every packet as a message through the package's `TraceProtoBuilder` (tests/export_reference.py;
tests/test_export.py holds them equal, byte for byte). A block's hot packets come at once from columns
(`pieces`: npu_trace.export.perfetto_pieces), the same bytes again.

The file: a clock snapshot first (the recording's trace clock as Perfetto's builtin clock, with its
CLOCK_REALTIME anchor when the clock is CLOCK_MONOTONIC, so the UI can show wall time), then one packet
sequence whose first packet clears its incremental state and sets every packet's clock
(TracePacketDefaults), then the track descriptors and events. Event and argument names are interned (sent
once, then by id); timestamps are absolute nanoseconds. Events need not be in time order: Perfetto's trace
processor sorts a file's packets by timestamp (ties keep their file order), which `npu_trace.export.track_map`
relies on.
"""

from __future__ import annotations

import math
import struct
from typing import Any, BinaryIO, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from npu_trace.export.output import Output
from npu_trace.export.tracks import COUNTER, GROUP, Track, Value, tally

SEQUENCE = 1  # the trusted_packet_sequence_id of every packet
FLUSH_PACKETS = 4096  # packets built before they are written
MAX_DEPTH = 8  # nested arguments deeper than this are written as text
SEEN_VALUES = 1 << 14  # annotations of int and str values kept for the next event that has the same (pid, ret...)
SEEN_BYTES = 64  # ... when they are this short at most (a long text is seldom seen again: memory stays bounded)
# the recording header's trace clock (tracefs trace_clock names) -> Perfetto's builtin clock
CLOCKS = {"mono": pb.BUILTIN_CLOCK_MONOTONIC, "mono_raw": pb.BUILTIN_CLOCK_MONOTONIC_RAW,
          "boot": pb.BUILTIN_CLOCK_BOOTTIME}  # fmt: skip
_UNITS = {"bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES, "count": pb.CounterDescriptor.UNIT_COUNT}
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN, _END = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
_INSTANT, _COUNTER = pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER
_I64 = (-(1 << 63), 1 << 63)


# ---- the packets both writers build as messages ------------------------------------------------------------
def clock_packet(packet: pb.TracePacket, info: Mapping[str, Any]) -> Optional[int]:
    """The clock snapshot of the recording's trace clock (the packet left unset when it has none Perfetto
    knows: returns None). With the host's context (`info["host_context"]`: ftrace packets, whose stamps the
    trace processor reads as CLOCK_BOOTTIME), a CLOCK_MONOTONIC recording's snapshot says CLOCK_BOOTTIME is the
    same clock (its stamps are the recording's trace clock: npu_trace.export.hostctx)."""
    clock = CLOCKS.get(str(info.get("clock")))
    if clock is not None:
        snapshot = packet.clock_snapshot
        mono, real = info.get("mono_ns"), info.get("realtime_ns")
        anchored = _is_stamp(mono) and _is_stamp(real)
        if clock == pb.BUILTIN_CLOCK_MONOTONIC and anchored:
            snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_MONOTONIC, timestamp=mono)
            snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=real)
        if clock == pb.BUILTIN_CLOCK_MONOTONIC and info.get("host_context"):
            if not anchored:
                snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_MONOTONIC, timestamp=0)
            snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=mono if anchored else 0)
        snapshot.primary_trace_clock = clock
    return clock


def start_packet(packet: pb.TracePacket, clock: Optional[int]) -> None:
    """The sequence's first packet: its incremental state cleared, every packet's clock."""
    packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    packet.first_packet_on_sequence = True
    packet.previous_packet_dropped = 1
    if clock is not None:
        packet.trace_packet_defaults.timestamp_clock_id = clock


def describe(desc: pb.TrackDescriptor, track: Track) -> None:
    desc.uuid, desc.name, desc.sibling_order_rank = track.uuid, _text(track.name), track.rank
    if track.parent:
        desc.parent_uuid = track.parent
    if track.kind == GROUP:
        desc.child_ordering = pb.TrackDescriptor.EXPLICIT
    elif track.kind == COUNTER:
        unit = _UNITS.get(track.unit)
        if unit is not None:
            desc.counter.unit = unit
        elif track.unit:
            desc.counter.unit_name = track.unit
        else:
            desc.counter.SetInParent()


# ---- the wire format of the hot packets ---------------------------------------------------------------------
_SMALL = [bytes((i,)) for i in range(128)]
_LOW14 = [bytes((i & 0x7F | 0x80, i >> 7 | 0x80)) for i in range(1 << 14)]  # two groups, more to follow
_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack


def varint(value: int) -> bytes:
    """An unsigned varint (protobuf's base-128, least significant group first): 14 bits at a time from a
    table, the last one or two groups by hand."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"Value out of range: {value}")  # as protobuf says it of an unsigned field
        return _SMALL[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    return _LOW14[value & 0x3FFF] + varint(value >> 14)


def stamp(ts: int) -> bytes:
    """TracePacket.timestamp (8): a trace-clock stamp, 28 bits of it from the table at once."""
    if ts >= 0x10000000:
        return _TS + _LOW14[ts & 0x3FFF] + _LOW14[ts >> 14 & 0x3FFF] + varint(ts >> 28)
    return _TS + varint(ts)


def signed(value: int) -> bytes:
    """An int64 as protobuf writes it (a negative one as its 64-bit two's complement: ten bytes)."""
    return varint(value if value >= 0 else value + (1 << 64))


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def framed(field: int, payload: bytes) -> bytes:
    """A length-delimited field (a message, a string)."""
    return tag(field, 2) + varint(len(payload)) + payload


_VARINT, _I64BITS = 0, 1
_PACKET = tag(1, 2)  # Trace.packet
_TS = tag(8, _VARINT)  # TracePacket.timestamp (stamp)
_SEQ = tag(10, _VARINT) + varint(SEQUENCE)  # TracePacket.trusted_packet_sequence_id
_EVENT = tag(11, 2)  # TracePacket.track_event
_INTERNED = tag(12, 2)  # TracePacket.interned_data
_FLAGS = tag(13, _VARINT) + varint(_NEEDS_STATE)  # TracePacket.sequence_flags
_ANNOTATION = tag(4, 2)  # TrackEvent.debug_annotations
_TYPE = {kind: tag(9, _VARINT) + varint(kind) for kind in (_BEGIN, _END, _INSTANT, _COUNTER)}  # TrackEvent.type
_NAME_IID = tag(10, _VARINT)  # TrackEvent.name_iid
_TRACK = tag(11, _VARINT)  # TrackEvent.track_uuid
_INT_COUNTER = tag(30, _VARINT)  # TrackEvent.counter_value
_DOUBLE_COUNTER = tag(44, _I64BITS)  # TrackEvent.double_counter_value
_FLOW = tag(47, _I64BITS)  # TrackEvent.flow_ids (fixed64, not packed)
_TERMINATING = tag(48, _I64BITS)  # TrackEvent.terminating_flow_ids
_EVENT_NAME, _KEY_NAME = 2, 3  # InternedData.event_names, .debug_annotation_names: {iid = 1, name = 2}
_KEY_IID = tag(1, _VARINT)  # DebugAnnotation.name_iid
_BOOL = {True: tag(2, _VARINT) + b"\x01", False: tag(2, _VARINT) + b"\x00"}  # DebugAnnotation.bool_value
_UINT, _INT = tag(3, _VARINT), tag(4, _VARINT)  # DebugAnnotation.uint_value, .int_value
_DOUBLE_VALUE, _STRING = tag(5, _I64BITS), tag(6, 2)  # DebugAnnotation.double_value, .string_value
_NAN = _STRING + varint(3) + b"nan"


def value_bytes(value: Any) -> bytes:
    """A DebugAnnotation's value fields as `set_value` makes them (ints, strings, bools and floats by hand,
    the rest through the message)."""
    cls = value.__class__
    if cls is int:
        if _I64[0] <= value < _I64[1]:
            return _INT + signed(value)
        if 0 <= value < (1 << 64):
            return _UINT + varint(value)
    elif cls is str:
        data = (value if value.isascii() else _text(value)).encode()
        return _STRING + varint(len(data)) + data
    elif cls is bool:
        return _BOOL[value]
    elif cls is float:
        return _NAN if math.isnan(value) else _DOUBLE_VALUE + _DOUBLE(value)
    annotation = pb.DebugAnnotation()
    set_value(annotation, value)
    return annotation.SerializeToString()  # name_iid (field 1) unset: what follows it in the annotation


def _interned(field: int, iid: int, name: str) -> bytes:
    data = _text(name).encode()
    return framed(field, _KEY_IID + varint(iid) + tag(2, 2) + varint(len(data)) + data)


class PerfettoWriter:
    """Writes a timeline to a binary file as it comes (see the module docstring), the track events in the
    wire format by hand."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.parts: List[bytes] = []  # framed packets, not yet written
        self.counts = tally()
        self.names: Dict[str, bytes] = {}  # event name -> its name_iid field
        self.keys: Dict[str, bytes] = {}  # argument name -> its DebugAnnotation.name_iid field
        self.uuids: Dict[int, bytes] = {}  # track uuid -> its track_uuid field
        self.ends: Dict[int, bytes] = {}  # track uuid -> a slice end's track_event field
        self.seen: Dict[Tuple[Any, Any], Tuple[type, bytes]] = {}  # (argument, int or str value) -> annotation
        self._columns: Any = None  # what writes pieces, made when first needed
        self.output = Output(out.write, self.counts, out)

    # ---- the file's start and the tracks: messages ---------------------------------------------------------
    def header(self, info: Mapping[str, Any]) -> None:
        packet = self._message()
        clock = clock_packet(packet, info)
        if clock is not None:
            self._add_message(packet)
        start = self._message()
        start_packet(start, clock)
        self._add_message(start)

    def track(self, track: Track) -> None:
        packet = self._message()
        describe(packet.track_descriptor, track)
        self._add_message(packet)
        self.uuids[track.uuid] = _TRACK + varint(track.uuid)
        self.counts["tracks"] += 1

    # ---- events: by hand ---------------------------------------------------------------------------------
    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        annotations, name_iid, interned = self._named(name, args)
        event = annotations + _TYPE[_BEGIN] + name_iid + self.uuids[track.uuid]
        if flow_out:
            event += b"".join(_FLOW + _FIXED64(f) for f in flow_out)
        if flow_in:
            event += b"".join(_TERMINATING + _FIXED64(f) for f in flow_in)
        self._add(ts, _EVENT + varint(len(event)) + event, interned)
        self.counts["slices"] += 1
        self.counts["flows"] += len(flow_in)

    def end(self, track: Track, ts: int) -> None:
        event = self.ends.get(track.uuid)
        if event is None:
            body = _TYPE[_END] + self.uuids[track.uuid]
            event = self.ends[track.uuid] = _EVENT + varint(len(body)) + body
        packet = stamp(ts) + _SEQ + event + _FLAGS
        self.parts.append(_PACKET + varint(len(packet)) + packet)
        if len(self.parts) >= FLUSH_PACKETS:
            self._flush()

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        annotations, name_iid, interned = self._named(name, args)
        event = annotations + _TYPE[_INSTANT] + name_iid + self.uuids[track.uuid]
        if flow_out:
            event += b"".join(_FLOW + _FIXED64(f) for f in flow_out)
        self._add(ts, _EVENT + varint(len(event)) + event, interned)
        self.counts["instants"] += 1

    def counter(self, track: Track, ts: int, value: Value) -> None:
        if isinstance(value, int) and _I64[0] <= value < _I64[1]:
            event = _TYPE[_COUNTER] + self.uuids[track.uuid] + _INT_COUNTER + signed(int(value))
        else:
            event = _TYPE[_COUNTER] + self.uuids[track.uuid] + _DOUBLE_COUNTER + _DOUBLE(float(value))
        self._add(ts, _EVENT + varint(len(event)) + event, b"")
        self.counts["counters"] += 1

    def close(self) -> Dict[str, int]:
        self._flush()
        self.output.close()
        self.out.flush()
        return dict(self.counts)

    # ---- a block's pieces at once ----------------------------------------------------------------------
    def pieces(self, p: Any, lo: int, hi: int, drawn: Any) -> None:
        """Pieces [lo, hi) of a block (npu_trace.export.pieces): the packets the calls above write for each,
        written at once (npu_trace.export.perfetto_pieces)."""
        if self._columns is None:
            from npu_trace.export.perfetto_pieces import PerfettoPieces

            self._columns = PerfettoPieces(self)
        self._columns.write(p, lo, hi, drawn)

    def put(self, data: Any) -> None:
        """Packets made elsewhere (whole, framed), after those built so far."""
        self._flush()
        self.output.write(data)

    def assembled(self, run: Callable[[Any, int], int]) -> None:
        """Packets `run` lays out in a buffer (npu_trace.export.output), after those built so far."""
        self._flush()
        self.output.assembled(run)

    # ---- packets -----------------------------------------------------------------------------------------
    def _add(self, ts: int, event: bytes, interned: bytes) -> None:
        """A track event's packet: timestamp (8), sequence id (10), track_event (11), interned_data (12),
        sequence_flags (13), in field order."""
        packet = stamp(ts) + _SEQ + event + interned + _FLAGS
        self.parts.append(_PACKET + varint(len(packet)) + packet)
        if len(self.parts) >= FLUSH_PACKETS:
            self._flush()

    @staticmethod
    def _message() -> pb.TracePacket:
        packet = pb.TracePacket()
        packet.trusted_packet_sequence_id = SEQUENCE
        return packet

    def _add_message(self, packet: pb.TracePacket) -> None:
        self.parts.append(framed(1, packet.SerializeToString()))
        if len(self.parts) >= FLUSH_PACKETS:
            self._flush()

    def _flush(self) -> None:
        """Write the packets built so far."""
        if self.parts:
            data = b"".join(self.parts)
            self.parts = []
            self.output.write(data)

    def _named(self, name: str, args: Mapping[str, Any]) -> Tuple[bytes, bytes, bytes]:
        """(the debug annotations, the name_iid field, the interned data of names new here)."""
        new: List[bytes] = []
        name_iid = self.names.get(name)
        if name_iid is None:
            iid = len(self.names) + 1  # iid 0 is not valid
            name_iid = self.names[name] = _NAME_IID + varint(iid)
            new.append(_interned(_EVENT_NAME, iid, name))
        parts = []
        new_keys: List[bytes] = []
        keys, seen = self.keys, self.seen
        for key, value in args.items():
            cls = value.__class__
            plain = key.__class__ is str and (cls is int or cls is str)
            if plain:  # the same argument with the same value: its annotation again
                got = seen.get((key, value))
                if got is not None and got[0] is cls:
                    parts.append(got[1])
                    continue
            key = key if key.__class__ is str else str(key)
            kid = keys.get(key)
            if kid is None:
                iid = len(keys) + 1
                kid = keys[key] = _KEY_IID + varint(iid)
                new_keys.append(_interned(_KEY_NAME, iid, key))
            annotation = kid + value_bytes(value)
            annotation = _ANNOTATION + varint(len(annotation)) + annotation
            parts.append(annotation)
            if plain and len(annotation) <= SEEN_BYTES:
                if len(seen) >= SEEN_VALUES:
                    seen.clear()
                seen[(key, value)] = (cls, annotation)
        if new or new_keys:  # InternedData: event_names (2) before debug_annotation_names (3)
            data = b"".join(new + new_keys)
            return b"".join(parts), name_iid, _INTERNED + varint(len(data)) + data
        return b"".join(parts), name_iid, b""


def set_value(a: pb.DebugAnnotation, value: Any, depth: int = 0) -> None:
    """A DebugAnnotation's value for a JSON-like value (nested dicts and lists as such)."""
    if isinstance(value, bool):
        a.bool_value = value
    elif isinstance(value, int):
        if _I64[0] <= value < _I64[1]:
            a.int_value = value
        elif 0 <= value < (1 << 64):
            a.uint_value = value
        else:
            a.string_value = str(value)
    elif isinstance(value, float):
        if math.isnan(value):
            a.string_value = "nan"
        else:
            a.double_value = value
    elif isinstance(value, str):
        a.string_value = _text(value)
    elif depth < MAX_DEPTH and isinstance(value, Mapping) and value:
        for k, v in value.items():
            set_value(a.dict_entries.add(name=_text(str(k))), v, depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)) and value:
        for v in value:
            set_value(a.array_values.add(), v, depth + 1)
    elif isinstance(value, (bytes, bytearray)):
        a.string_value = bytes(value).hex()
    else:
        a.string_value = _empty(value)


def _empty(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return _text(str(value))


def _text(text: str) -> str:
    """Protobuf strings are UTF-8: text that is not (surrogates from undecodable bytes) is escaped."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_stamp(value: Optional[Any]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
