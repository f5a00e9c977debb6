"""A timeline as Chrome's JSON Trace Event Format (`.json`): what chrome://tracing, Perfetto and most viewers open.

The format has processes and threads where Perfetto has a tree of tracks: each top-level group (a device, the
tracer) is a process (`pid` 1, 2, ... in the order they come, named and ordered by metadata events), each
track under it a thread (its name prefixed by the sub-groups it sits in: "interrupts: cq_update_irq (130)"),
and each counter a counter series of its process. Slices are complete events (`X`, written at their end with
their duration: begin/end pairs come properly nested, see `npu_trace.export.tracks`), instants `i` (thread
scope), counters `C`, flows `s`/`f` (bound to the enclosing slices: the submitting call and the task). Times
are microseconds with three decimals: the nanoseconds, exact.

Streamed: `{"displayTimeUnit": "ns", "otherData": {...}, "traceEvents": [` then one event per line, closed by
`close()`; memory holds only the slices begun and not yet ended (a handful) and the track table.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Dict, List, Mapping, Sequence, TextIO, Tuple

from npu_trace.export.output import Output
from npu_trace.export.tracks import COUNTER, GROUP, Track, Value, tally

FLOW_MASK = (1 << 53) - 1  # flow ids as JSON numbers every viewer reads exactly
FLUSH_CHARS = 1 << 20
_Open = Tuple[int, str, Mapping[str, Any], Sequence[int], Sequence[int]]


def micros(ts_ns: int) -> str:
    """Nanoseconds as the format's microseconds, exactly ("1000000.123")."""
    sign, ts_ns = ("-", -ts_ns) if ts_ns < 0 else ("", ts_ns)
    return f"{sign}{ts_ns // 1000}.{ts_ns % 1000:03d}"


# json.dumps(value, separators=(",", ":"), default=str, allow_nan=False), its encoder made once (json.dumps
# makes one per call when given options: the same text)
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False).encode
NAMES_KEPT = 1 << 12  # the JSON text of names seen (event and track names repeat)


def _dumps(value: Any) -> str:
    """Compact JSON, ASCII only (json escapes the rest); what JSON has no form for (NaN, odd keys) as text."""
    if value.__class__ is int:
        return int.__repr__(value)  # what json writes for an int
    try:
        return _ENCODE(value)
    except (ValueError, TypeError):
        return _ENCODE(_plain(value))


_NAMES: Dict[str, str] = {}


def _name(name: str) -> str:
    """_dumps of a name, kept."""
    text = _NAMES.get(name)
    if text is None:
        if len(_NAMES) >= NAMES_KEPT:
            _NAMES.clear()
        text = _NAMES[name] = _dumps(name)
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class ChromeJsonWriter:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.parts: List[str] = []
        self.size = 0
        self.first = True
        self.counts = tally()
        self.where: Dict[int, Tuple[int, int, str]] = {}  # track uuid -> (pid, tid, the name shown)
        self.pids: Dict[int, int] = {}  # top-level group uuid -> pid
        self.tids: Dict[int, int] = {}  # pid -> last tid given
        self.open: Dict[int, List[_Open]] = {}  # track uuid -> slices begun, not ended
        self._columns: Any = None  # what writes pieces, made when first needed
        self.output = Output(self._send, self.counts, out)

    def header(self, info: Mapping[str, Any]) -> None:
        other = {"clock": info.get("clock", "mono"), "clock_domain": "CLOCK_MONOTONIC",
                 **{k: v for k, v in info.items() if k != "clock"}}  # fmt: skip
        self._raw('{"displayTimeUnit":"ns","otherData":' + _dumps(other) + ',"traceEvents":[\n')

    def track(self, track: Track) -> None:
        self.counts["tracks"] += 1
        if not track.parent:
            pid = self.pids[track.uuid] = len(self.pids) + 1
            self.where[track.uuid] = (pid, 0, "")
            self._meta(pid, 0, "process_name", {"name": track.name})
            self._meta(pid, 0, "process_sort_index", {"sort_index": track.rank})
            return
        pid, _, prefix = self.where[track.parent]
        shown = f"{prefix}{track.name}"
        if track.kind == GROUP:
            self.where[track.uuid] = (pid, 0, f"{shown}: ")
            return
        if track.kind == COUNTER:
            self.where[track.uuid] = (pid, 0, shown)
            return
        tid = self.tids[pid] = self.tids.get(pid, 0) + 1
        self.where[track.uuid] = (pid, tid, shown)
        self._meta(pid, tid, "thread_name", {"name": shown})
        self._meta(pid, tid, "thread_sort_index", {"sort_index": tid})

    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        self.open.setdefault(track.uuid, []).append((ts, name, args, flow_out, flow_in))

    def end(self, track: Track, ts: int) -> None:
        begun, name, args, flow_out, flow_in = self.open[track.uuid].pop()
        pid, tid, _ = self.where[track.uuid]
        at = f'"ts":{micros(begun)},"pid":{pid},"tid":{tid}'
        self._event(f'{{"ph":"X","name":{_name(name)},{at},"dur":{micros(ts - begun)},"args":{_dumps(args)}}}')
        self.counts["slices"] += 1
        for fid in flow_out:
            self._event(f'{{"ph":"s","name":"submit","cat":"flow","id":{fid & FLOW_MASK},{at}}}')
        for fid in flow_in:
            self._event(f'{{"ph":"f","bp":"e","name":"submit","cat":"flow","id":{fid & FLOW_MASK},{at}}}')
            self.counts["flows"] += 1

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        pid, tid, _ = self.where[track.uuid]
        at = f'"ts":{micros(ts)},"pid":{pid},"tid":{tid}'
        self._event(f'{{"ph":"i","s":"t","name":{_name(name)},{at},"args":{_dumps(args)}}}')
        for fid in flow_out:  # bound to the instant (a slice of no duration where the flow leaves)
            self._event(f'{{"ph":"s","name":"trigger","cat":"flow","id":{fid & FLOW_MASK},{at}}}')
        self.counts["instants"] += 1

    def counter(self, track: Track, ts: int, value: Value) -> None:
        pid, _, shown = self.where[track.uuid]
        self._event(f'{{"ph":"C","name":{_name(shown)},"ts":{micros(ts)},"pid":{pid},"args":{{"value":{_dumps(value)}}}}}')
        self.counts["counters"] += 1

    def pieces(self, p: Any, lo: int, hi: int, drawn: Any) -> None:
        """Pieces [lo, hi) of a block (npu_trace.export.pieces): the lines the calls above write for each,
        written at once (npu_trace.export.chrome_json_pieces)."""
        if self._columns is None:
            from npu_trace.export.chrome_json_pieces import ChromeJsonPieces

            self._columns = ChromeJsonPieces(self)
        self._columns.write(p, lo, hi, drawn)

    def put(self, data: Any) -> None:
        """Lines made elsewhere (each with its separator; ASCII bytes or text), after those written so far."""
        self._flush()
        self.output.write(data)

    def assembled(self, run: Callable[[Any, int], int]) -> None:
        """Lines `run` lays out in a buffer (npu_trace.export.output), after those written so far."""
        self._flush()
        self.output.assembled(run)

    def close(self) -> Dict[str, int]:
        self._raw("\n]}\n")
        self._flush()
        self.output.close()
        self.out.flush()
        return dict(self.counts)

    def _send(self, data: Any) -> None:
        """Text, or ASCII bytes: to the text stream's binary buffer when it has one (no decoding and encoding
        again)."""
        raw = getattr(self.out, "buffer", None)
        if isinstance(data, str):
            self.out.write(data)
        elif raw is not None:
            self.out.flush()
            raw.write(data)
        else:
            self.out.write(bytes(data).decode("ascii"))

    # ---- text ----------------------------------------------------------------------------------------------
    def _meta(self, pid: int, tid: int, name: str, args: Mapping[str, Any]) -> None:
        self._event(f'{{"ph":"M","name":"{name}","pid":{pid},"tid":{tid},"args":{_dumps(args)}}}')

    def _event(self, text: str) -> None:
        self._raw(text if self.first else ",\n" + text)
        self.first = False

    def _raw(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= FLUSH_CHARS:
            self._flush()

    def _flush(self) -> None:
        if self.parts:
            text = "".join(self.parts)  # ASCII: json.dumps escapes everything else (its length: its bytes)
            self.parts, self.size = [], 0
            self.output.write(text)
