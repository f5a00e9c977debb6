"""The reference export: every row drawn one by one through the mapping, every Perfetto packet a protobuf message.

`ReferenceExporter` draws each block (`ReferenceDrawer`, in the export's drawing process as the production
drawer is) as the export drew it before its columnar drawing: each drawn row made an event (`NormBlock.event`)
and given to `TimelineMapper.event`, then each task the latency detector paired, each completion it did not
pair, each change of live memory, one call each; its writer is the `Emitter` itself (nothing is kept to be put
in order: the calls come in order). The host's context (when the recording holds it) is drawn by the
production code after each block, as the export draws it: tests/test_hostctx.py
holds it against the recording's own records. `ProtoPerfettoWriter` builds every packet
as a `perfetto_trace_pb2.TracePacket` through the package's `TraceProtoBuilder`. tests/test_export.py holds
the production export (columns, the wire format by hand) equal to these, byte for byte.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Dict, Mapping, Sequence

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from npu_trace.export.drawer import Changes, Drawer, Tasks, Window
from npu_trace.export.drawing import Rows, drawn_rows
from npu_trace.export.perfetto import (
    _BEGIN,
    _COUNTER,
    _END,
    _I64,
    _INSTANT,
    _NEEDS_STATE,
    CLOCKS,
    FLUSH_PACKETS,
    SEQUENCE,
    _text,
    clock_packet,
    describe,
    set_value,
    start_packet,
)
from npu_trace.export.run import Exporter, Request, export
from npu_trace.export.track_map import TimelineMapper
from npu_trace.export.tracks import Track, Value, tally
from npu_trace.pipeline.vnormalize import KIND_CODE, NormBlock

_COMPLETE = KIND_CODE["complete"]


class ReferenceDrawer(Drawer):
    """The drawing, each block one row at a time (see the module docstring)."""

    def _mapper(self, window: Window) -> TimelineMapper:
        mapper = TimelineMapper(self.emitter, self.comms, window.lo, window.hi, window.devices, window.info)
        self.emitter.tracks = mapper.by_uuid
        return mapper

    def block(self, nb: NormBlock, rows: Rows, tasks: Tasks, changes: Changes, names: Dict[int, str]) -> None:
        """`rows` (the production drawing's) is not read: each row's place is found here again."""
        mapper = self.mapper
        assert mapper is not None
        self.comms.names = names
        for r in drawn_rows(nb).tolist():
            mapper.event(nb.event(r))
        matched = np.zeros(len(nb), dtype=bool)
        if tasks is not None:
            rows, submitted = tasks
            matched[rows] = True
            for r, s in zip(rows.tolist(), submitted.tolist()):
                mapper.task(nb.event(r), s)
        for r in np.flatnonzero((nb.kind == _COMPLETE) & ~matched).tolist():
            mapper.unmatched_complete(nb.event(r))
        mapper.memory(*(c.tolist() for c in changes))
        self._draw_context(nb.block)


class ReferenceExporter(Exporter):
    """The export, each block drawn one row at a time (see the module docstring)."""

    drawer = ReferenceDrawer


def reference_export(request: Request) -> Dict[str, Any]:
    return export(request, ReferenceExporter, ProtoPerfettoWriter)


class ProtoPerfettoWriter:
    """The reference: every packet a `perfetto_trace_pb2.TracePacket` made through the package's
    `TraceProtoBuilder`, serialized a few thousand at a time (PerfettoWriter writes the same bytes)."""

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
            clock_packet(self._packet(), info)
        start_packet(self._packet(), clock)

    def track(self, track: Track) -> None:
        describe(self._packet().track_descriptor, track)
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

    def put(self, data: Any) -> None:
        """Packets made elsewhere (the host's context), after those built so far."""
        self._flush()
        self.out.write(data)
        self.counts["bytes"] += len(data)

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
