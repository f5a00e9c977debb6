"""A timeline as a Perfetto trace (`.pftrace`): Perfetto's track-event packets, built with the `perfetto` package.

The packets are `perfetto_trace_pb2` messages (Perfetto's own schema, shipped by the `perfetto` package) made
through its `TraceProtoBuilder` and written a few thousand at a time: a Perfetto trace is a sequence of
`Trace.packet` fields, so serialized `Trace` messages concatenate into one trace and memory stays bounded
(`FLUSH_PACKETS` packets, the interning tables).

The file: a clock snapshot first (the recording's trace clock as Perfetto's builtin clock, with its
CLOCK_REALTIME anchor when the clock is CLOCK_MONOTONIC, so the UI can show wall time), then one packet
sequence whose first packet clears its incremental state and sets every packet's clock
(TracePacketDefaults), then the track descriptors and events. Event and argument names are interned (sent
once, then by id); timestamps are absolute nanoseconds. Events need not be in time order: Perfetto's trace
processor sorts a file's packets by timestamp (ties keep their file order), which `npu_trace.sinks.timeline`
relies on.
"""

from __future__ import annotations

import math
from typing import Any, BinaryIO, Dict, Mapping, Optional, Sequence

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from npu_trace.sinks.tracks import COUNTER, GROUP, Track, Value, tally

SEQUENCE = 1  # the trusted_packet_sequence_id of every packet
FLUSH_PACKETS = 4096  # packets built before they are written
MAX_DEPTH = 8  # nested arguments deeper than this are written as text
# the recording header's trace clock (tracefs trace_clock names) -> Perfetto's builtin clock
CLOCKS = {"mono": pb.BUILTIN_CLOCK_MONOTONIC, "mono_raw": pb.BUILTIN_CLOCK_MONOTONIC_RAW,
          "boot": pb.BUILTIN_CLOCK_BOOTTIME}  # fmt: skip
_UNITS = {"bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES, "count": pb.CounterDescriptor.UNIT_COUNT}
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN, _END = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
_INSTANT, _COUNTER = pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER
_I64 = (-(1 << 63), 1 << 63)


class PerfettoWriter:
    """Writes a timeline to a binary file as it comes (see the module docstring)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.builder = TraceProtoBuilder()
        self.packets = 0  # built, not yet written
        self.counts = tally()
        self.names: Dict[str, int] = {}  # event name -> iid
        self.keys: Dict[str, int] = {}  # argument name -> iid

    # ---- the file's start --------------------------------------------------------------------------------
    def header(self, info: Mapping[str, Any]) -> None:
        clock = CLOCKS.get(str(info.get("clock")))
        if clock is not None:
            snapshot = self._packet().clock_snapshot
            mono, real = info.get("mono_ns"), info.get("realtime_ns")
            if clock == pb.BUILTIN_CLOCK_MONOTONIC and _is_stamp(mono) and _is_stamp(real):
                snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_MONOTONIC, timestamp=mono)
                snapshot.clocks.add(clock_id=pb.BUILTIN_CLOCK_REALTIME, timestamp=real)
            snapshot.primary_trace_clock = clock
        start = self._packet()
        start.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        start.first_packet_on_sequence = True
        start.previous_packet_dropped = 1
        if clock is not None:
            start.trace_packet_defaults.timestamp_clock_id = clock

    def track(self, track: Track) -> None:
        desc = self._packet().track_descriptor
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
        self.counts["tracks"] += 1

    # ---- events ------------------------------------------------------------------------------------------
    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        packet = self._event(ts, track, _BEGIN)
        self._named(packet, name, args)
        if flow_out:
            packet.track_event.flow_ids.extend(flow_out)
        if flow_in:
            packet.track_event.terminating_flow_ids.extend(flow_in)
        self.counts["slices"] += 1
        self.counts["flows"] += len(flow_in)

    def end(self, track: Track, ts: int) -> None:
        self._event(ts, track, _END)

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        packet = self._event(ts, track, _INSTANT)
        self._named(packet, name, args)
        if flow_out:
            packet.track_event.flow_ids.extend(flow_out)
        self.counts["instants"] += 1

    def counter(self, track: Track, ts: int, value: Value) -> None:
        event = self._event(ts, track, _COUNTER).track_event
        if isinstance(value, int) and _I64[0] <= value < _I64[1]:
            event.counter_value = value
        else:
            event.double_counter_value = float(value)
        self.counts["counters"] += 1

    def close(self) -> Dict[str, int]:
        self._flush()
        self.out.flush()
        return dict(self.counts)

    # ---- packets -----------------------------------------------------------------------------------------
    def _packet(self) -> pb.TracePacket:
        """A new packet of the sequence (those built before are written first when there are enough: a
        packet is written only once filled)."""
        if self.packets >= FLUSH_PACKETS:
            self._flush()
        packet = self.builder.add_packet()
        packet.trusted_packet_sequence_id = SEQUENCE
        self.packets += 1
        return packet

    def _event(self, ts: int, track: Track, kind: int) -> pb.TracePacket:
        packet = self._packet()
        packet.timestamp = ts
        packet.sequence_flags = _NEEDS_STATE
        event = packet.track_event
        event.type = kind
        event.track_uuid = track.uuid
        return packet

    def _flush(self) -> None:
        """Write the packets built so far."""
        if not self.packets:
            return
        data = self.builder.serialize()
        self.out.write(data)
        self.counts["bytes"] += len(data)
        self.builder, self.packets = TraceProtoBuilder(), 0

    def _named(self, packet: pb.TracePacket, name: str, args: Mapping[str, Any]) -> None:
        """The event's name and arguments, their names interned on this packet when new."""
        event = packet.track_event
        iid = self.names.get(name)
        if iid is None:
            iid = self.names[name] = len(self.names) + 1  # iid 0 is not valid
            packet.interned_data.event_names.add(iid=iid, name=_text(name))
        event.name_iid = iid
        for key, value in args.items():
            key = key if key.__class__ is str else str(key)
            kid = self.keys.get(key)
            if kid is None:
                kid = self.keys[key] = len(self.keys) + 1
                packet.interned_data.debug_annotation_names.add(iid=kid, name=_text(key))
            annotation = event.debug_annotations.add()
            annotation.name_iid = kid
            set_value(annotation, value)


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
