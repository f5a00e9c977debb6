"""BPF records (bytes as the ring buffer hands them over) -> `TraceEvent`s. Pure: no bcc here.

`Decoder.decode(data)` returns a TraceEvent, or None for a record it cannot read (counted in `malformed`);
`Decoder.losses()` turns that count into `Loss` items once.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Dict, List, Optional, Tuple

from npu_trace.bpf import formats, layout
from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace.format import EventFormat

_new = tuple.__new__
_HAL_SIZE, _IRQ_SIZE, _BENCH_SIZE = layout.HAL_CALL.size, layout.IRQ.size, layout.BENCH.size


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _hal_arg_readers() -> Tuple[Tuple[EventFormat, int, Tuple[bool, ...]], ...]:
    """Per op: (format, number of args after the device, which of them are s32)."""
    out = []
    for fmt in formats.HAL_FORMATS:
        params = formats.FUNC_BY_NAME[fmt.name].params[1:]
        out.append((fmt, len(params), tuple(p.type == "s32" for p in params)))
    return tuple(out)


class Decoder:
    def __init__(self) -> None:
        self.malformed = 0
        self._reported = 0
        self._hal = _hal_arg_readers()
        self._by_type: Dict[int, Callable[[bytes], TraceEvent]] = {
            layout.NPU_EV_HAL_CALL: self._hal_call,
            layout.NPU_EV_IRQ: self._irq,
            layout.NPU_EV_BENCH: self._bench,
        }

    def decode(self, data: bytes) -> Optional[TraceEvent]:
        try:
            return self._by_type[layout.TYPE.unpack_from(data, layout.TYPE_OFFSET)[0]](data)
        except (KeyError, IndexError, struct.error):  # unknown type / op, short record
            self.malformed += 1
            return None

    def decode_all(self, records: List[bytes]) -> List[Any]:
        out: List[Any] = [ev for ev in map(self.decode, records) if ev is not None]
        out.extend(self.losses())
        return out

    def losses(self) -> List[Loss]:
        new = self.malformed - self._reported
        self._reported = self.malformed
        return [Loss("bpf", -1, "malformed", new)] if new else []

    def _hal_call(self, data: bytes) -> TraceEvent:
        ts, _pid, tid, _t, cpu, _f, entry, lat, a0, a1, a2, dev, ret, op, _p0, _p1 = layout.HAL_CALL.unpack_from(data)
        fmt, nargs, signed = self._hal[op]
        args = [_s32(v) if s else v for v, s in zip((a0, a1, a2)[:nargs], signed)]
        return _new(TraceEvent, (ts, cpu, tid, fmt, (dev, *args, ret, lat, entry)))

    def _irq(self, data: bytes) -> TraceEvent:
        ts, _pid, tid, _t, cpu, _f, entry, dur, irq, ret, name = layout.IRQ.unpack_from(data)
        text = name.split(b"\0", 1)[0].decode("utf-8", "replace")
        return _new(TraceEvent, (ts, cpu, tid, formats.IRQ_FORMAT, (irq, text, ret, dur, entry)))

    def _bench(self, data: bytes) -> TraceEvent:
        ts, _pid, tid, _t, cpu, _f, seq = layout.BENCH.unpack_from(data)
        return _new(TraceEvent, (ts, cpu, tid, formats.BENCH_FORMAT, (seq,)))
