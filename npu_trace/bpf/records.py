"""BPF records -> `TraceEvent`s. Pure: no bcc here.

`Decoder.decode(data, offset=0, size=None)` decodes one record (bytes as bcc's callbacks hand them over, or a
record inside a larger buffer such as the mapped ring buffer) and returns a TraceEvent, or None for a record it
cannot read (counted in `malformed`); `Decoder.losses()` turns that count into `Loss` items once.

Runs of records of one type are decoded in bulk by `npu_trace.bpf.ringbuf`: `Decoder.run_spec(type)` gives the
record's struct codes and a builder that turns the columns of one big `unpack_from` over the run into
TraceEvents with C-level passes (zip, map) instead of one Python call per record. A builder may fail (and
then the run is decoded record by record) only before it returns: what it returns is consumed lazily.

Tracepoint events (struct tp_event) name their tracepoint by id; `Decoder(tracepoints)` knows the specs of the
ones its source attaches (default: the Ascend driver's five): the event gets the values the spec names (None
for one whose `present` bit is clear, negative for a signed one) and the record's string. A record of an id it
does not know is malformed.
"""

from __future__ import annotations

import struct
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from npu_trace.bpf import formats, layout
from npu_trace.bpf.tracepoints import ROLES, TRS_SPECS, TpSpec
from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace.format import EventFormat

_new = tuple.__new__
ROLE_INDEX = {role: i for i, role in enumerate(ROLES)}  # NPU_TPV_*


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _hal_arg_readers() -> Tuple[Tuple[EventFormat, int, Tuple[bool, ...], Tuple[int, ...]], ...]:
    """Per op: (format, number of args after the device, which of them are s32, which of them are the task ids
    a call marked NPU_HAL_NO_TASK_IDS leaves empty)."""
    out = []
    for fmt in formats.HAL_FORMATS:
        params = formats.HAL_FIELDS[fmt.name][1:]
        ids = tuple(i for i, (name, _) in enumerate(params) if name in formats.TASK_ID_FIELDS)
        out.append((fmt, len(params), tuple(ptype == "s32" for _, ptype in params),
                    ids if fmt.name in formats.TASK_ID_OPS else ()))  # fmt: skip
    return tuple(out)


# (columns, run) -> events: column k holds value k of each of the `run` records (the fields the RunSpec keeps)
RunBuilder = Callable[[Sequence[Sequence[Any]], int], Iterable[TraceEvent]]


class RunSpec(NamedTuple):
    """How to decode a run of records of one type with one unpack: the struct codes of the record (no
    byte-order prefix; the fields the builder does not need are pad bytes, never turned into ints), its size,
    the number of values one record unpacks to, which of them is the event type, and the builder."""

    codes: str
    size: int
    values: int
    type_col: int
    build: RunBuilder


def run_spec(name: str, keep: Tuple[str, ...], build: RunBuilder) -> RunSpec:
    """The RunSpec of struct `name` of `layout` unpacking only the fields in `keep` (in layout order)."""
    codes: List[str] = []
    values, type_col = 0, -1
    for field, code in layout.FIELDS[name]:
        size = struct.calcsize("<" + code)
        if field not in keep:
            codes.append(f"{size}x")
            continue
        if field == "hdr.type":
            type_col = values
        codes.append(code)
        values += len(struct.unpack("<" + code, bytes(size)))
    if type_col < 0:
        raise ValueError(f"a run of {name} must keep hdr.type")
    return RunSpec("".join(codes), layout.compile_struct(name).size, values, type_col, build)


_HAL_ARGS_COL = 8  # columns of an unpacked hal_call_event: header (6), entry_ts_ns, latency_ns, args...
_HAL_ARGS_END = _HAL_ARGS_COL + layout.NPU_HAL_ARGS
_TP_COL = 6 + layout.NPU_TP_VALUES  # columns of an unpacked tp_event: header (6), values, tp, slot, present...


def _tp_value(col: int, v: Tuple[Any, ...], present: int, signed: int) -> Any:
    bit = 1 << (col - 6)
    if not present & bit:
        return None
    x = v[col]
    return x - (1 << 64) if signed & bit and x >= 1 << 63 else x


class _TpReader(NamedTuple):
    """How to decode the tp_events of one tracepoint spec."""

    fmt: EventFormat
    cols: Tuple[int, ...]  # the column of each of its values in the unpacked record, in field order
    pick: Callable[[Tuple[Any, ...]], Tuple[Any, ...]]  # those columns as a tuple
    mask: int  # their `present` bits
    text: bool  # the record's string follows the values

    @classmethod
    def of(cls, spec: TpSpec) -> _TpReader:
        cols = tuple(6 + ROLE_INDEX[v.role] for v in spec.ordered())
        pick = itemgetter(*cols) if len(cols) > 1 else lambda v: tuple(v[c] for c in cols)
        mask = sum(1 << (c - 6) for c in cols)
        return cls(formats.tp_format(spec), cols, pick, mask, bool(spec.text))


class Decoder:
    def __init__(self, tracepoints: Optional[Iterable[TpSpec]] = None) -> None:
        self.malformed = 0
        self._reported = 0
        self._hal = _hal_arg_readers()
        self._tps: Dict[int, _TpReader] = {
            spec.tp_id: _TpReader.of(spec) for spec in (TRS_SPECS.values() if tracepoints is None else tracepoints)
        }
        self._by_type: Dict[int, Tuple[struct.Struct, Callable[[Tuple[Any, ...]], TraceEvent]]] = {
            layout.NPU_EV_HAL_CALL: (layout.HAL_CALL, self._hal_call),
            layout.NPU_EV_IRQ: (layout.IRQ, self._irq),
            layout.NPU_EV_BENCH: (layout.BENCH, self._bench),
            layout.NPU_EV_TRACEPOINT: (layout.TP_EVENT, self._tp),
        }
        hdr = ("hdr.ts_ns", "hdr.tid", "hdr.type", "hdr.cpu")  # not pid (the tid is the event's pid) nor flags
        tp_fields = tuple(f for f, _ in layout.FIELDS["tp_event"])  # all: a run's rows are records as `_tp` takes them
        self._runs: Dict[int, RunSpec] = {
            layout.NPU_EV_HAL_CALL: run_spec(
                "hal_call_event",
                (*hdr, "hdr.flags", "entry_ts_ns", "latency_ns", "args", "dev", "ret", "op"),
                self._hal_run,
            ),
            layout.NPU_EV_IRQ: run_spec(
                "irq_event", (*hdr, "entry_ts_ns", "duration_ns", "irq", "ret", "name"), self._irq_run
            ),
            layout.NPU_EV_BENCH: run_spec("bench_event", (*hdr, "seq"), self._bench_run),
            layout.NPU_EV_TRACEPOINT: run_spec("tp_event", tp_fields, self._tp_run),
        }

    def decode(self, data: Any, offset: int = 0, size: Optional[int] = None) -> Optional[TraceEvent]:
        """The record at `offset` of `data` (any buffer); `size`: its length when `data` holds more than it."""
        try:
            st, build = self._by_type[layout.TYPE.unpack_from(data, offset + layout.TYPE_OFFSET)[0]]
            if size is not None and size < st.size:
                raise struct.error("short record")
            return build(st.unpack_from(data, offset))
        except (KeyError, IndexError, struct.error):  # unknown type / op, short record
            self.malformed += 1
            return None

    def decode_all(self, records: List[bytes]) -> List[Any]:
        out: List[Any] = [ev for ev in map(self.decode, records) if ev is not None]
        out.extend(self.losses())
        return out

    def run_spec(self, ev_type: int) -> Optional[RunSpec]:
        """Bulk decoding of records of this type (None: decode them one by one)."""
        return self._runs.get(ev_type)

    def losses(self) -> List[Loss]:
        new = self.malformed - self._reported
        self._reported = self.malformed
        return [Loss("bpf", -1, "malformed", new)] if new else []

    # ---- one record ---------------------------------------------------------------------------------------
    def _hal_values(self, op: int, args: Sequence[int], dev: int, ret: int, lat: int, entry: int, flags: int) -> Any:
        fmt, nargs, signed, ids = self._hal[op]
        values: List[Any] = [_s32(v) if s else v for v, s in zip(args[:nargs], signed)]
        if flags & layout.NPU_HAL_NO_TASK_IDS:
            for i in ids:  # the chip's task layout is unknown: these were not read
                values[i] = None
        return fmt, (dev, *values, ret, lat, entry)

    def _hal_call(self, v: Tuple[Any, ...]) -> TraceEvent:
        ts, _pid, tid, _t, cpu, flags, entry, lat = v[:_HAL_ARGS_COL]
        dev, ret, op = v[_HAL_ARGS_END : _HAL_ARGS_END + 3]
        fmt, values = self._hal_values(op, v[_HAL_ARGS_COL:_HAL_ARGS_END], dev, ret, lat, entry, flags)
        return _new(TraceEvent, (ts, cpu, tid, fmt, values))

    def _irq(self, v: Tuple[Any, ...]) -> TraceEvent:
        ts, _pid, tid, _t, cpu, _f, entry, dur, irq, ret, name = v
        return _new(TraceEvent, (ts, cpu, tid, formats.IRQ_FORMAT, (irq, _cstr(name), ret, dur, entry)))

    def _bench(self, v: Tuple[Any, ...]) -> TraceEvent:
        ts, _pid, tid, _t, cpu, _f, seq = v
        return _new(TraceEvent, (ts, cpu, tid, formats.BENCH_FORMAT, (seq,)))

    def _tp(self, v: Tuple[Any, ...]) -> TraceEvent:
        r = self._tps[v[_TP_COL]]
        present, signed = v[_TP_COL + 2], v[_TP_COL + 3]
        if present & r.mask == r.mask and not signed & r.mask:  # the usual case: every value there, unsigned
            values = r.pick(v)
        else:
            values = tuple(map(_tp_value, r.cols, repeat(v), repeat(present), repeat(signed)))
        if r.text:
            values = (*values, _cstr(v[-1]))
        return _new(TraceEvent, (v[0], v[4], v[2], r.fmt, values))

    # ---- runs: the columns of the fields each RunSpec keeps --------------------------------------------------
    def _bench_run(self, cols: Sequence[Sequence[Any]], run: int) -> Iterable[TraceEvent]:
        ts, tid, _type, cpu, seq = cols
        return map(_new, repeat(TraceEvent, run), zip(ts, cpu, tid, repeat(formats.BENCH_FORMAT, run), zip(seq)))

    def _irq_run(self, cols: Sequence[Sequence[Any]], run: int) -> Iterable[TraceEvent]:
        ts, tid, _type, cpu, entry, dur, irq, ret, name = cols
        rows = zip(ts, cpu, tid, repeat(formats.IRQ_FORMAT, run), zip(irq, map(_cstr, name), ret, dur, entry))
        return map(_new, repeat(TraceEvent, run), rows)

    def _tp_run(self, cols: Sequence[Sequence[Any]], run: int) -> Iterable[TraceEvent]:
        """Eager where it can fail: a tracepoint id this decoder was not given raises here."""
        unknown = set(cols[_TP_COL]) - self._tps.keys()
        if unknown:
            raise KeyError(f"tracepoint ids {sorted(unknown)}")
        return map(self._tp, zip(*cols))

    def _hal_run(self, cols: Sequence[Sequence[Any]], run: int) -> Iterable[TraceEvent]:
        """Eager where it can fail (an unknown op raises here, before anything is returned)."""
        ts, tid, _type, cpu, flags, entry, lat = cols[:7]
        dev, ret, op = cols[7 + layout.NPU_HAL_ARGS :]
        args = zip(*cols[7 : 7 + layout.NPU_HAL_ARGS])
        fmts, values = zip(*map(self._hal_values, op, args, dev, ret, lat, entry, flags))
        return map(_new, repeat(TraceEvent, run), zip(ts, cpu, tid, fmts, values))
