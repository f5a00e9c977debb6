"""A run of a block's pieces (npu_trace.export.pieces) as Chrome JSON lines, written at once.

The lines are those `ChromeJsonWriter` writes for each piece one by one (a slice: its `X` event, then the
flows it starts and ends; an instant: its `i` event, then the flow it starts; a counter: its `C` event),
character for character: each piece laid out by the template of its kind and argument layout
(`npu_trace.export.wire`), its numbers written from columns, its names and texts from tables of their JSON.
"""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np

from npu_trace.export import chrome_json as cj
from npu_trace.export.pieces import (
    CONST,
    COUNTER,
    END,
    FLOW_IN,
    FLOW_OUT,
    NAME,
    SLICE,
    STR,
    TRACK,
    TS,
    VALS,
    Pieces,
    PiecesWriter,
)
from npu_trace.export.wire import Template

# the columns the templates read: the pieces' own (a slice's duration: its end less its begin; a flow id as JSON
# shows it: its low FLOW_BITS bits)
_TS, _END, _NAME, _TRACK, _FLOW_OUT, _FLOW_IN, _VALS = TS, END, NAME, TRACK, FLOW_OUT, FLOW_IN, VALS
FLOW_BITS = cj.FLOW_MASK.bit_length()  # the mask: the bits below this many
# the tables: by name code, by track code ("pid", "tid"; a counter's name; its "pid"), by text code
_NAMES, _AT, _COUNTER_NAMES, _PIDS, _TEXTS = range(5)


class ChromeJsonPieces(PiecesWriter):
    """Writes runs of pieces through a ChromeJsonWriter (its track table, counts and buffer)."""

    def __init__(self, writer: cj.ChromeJsonWriter) -> None:
        super().__init__(writer)
        self.w: cj.ChromeJsonWriter = writer
        self.names: List[bytes] = []
        self.at: List[bytes] = []
        self.counter_names: List[bytes] = []
        self.pids: List[bytes] = []
        self.texts: List[bytes] = []
        self._undescribed: List[int] = []  # track codes whose entries wait for the track's description
        self._made: Tuple[Any, ...] = ((), ())  # the tables as tuples, and their sizes then (see _tables)

    # ---- a run: its templates and columns; the tables as they stand when each part of it is written ---------
    def _prepare(self, p: Pieces, lo: int, hi: int, drawn: Any) -> Tuple[np.ndarray, np.ndarray]:
        assert not self.w.first, "pieces follow the tracks' metadata"
        self._grow(drawn)
        return self._templates(p, lo, hi, drawn), p.rows[lo:hi]

    def _tables(self, drawn: Any) -> Tuple[Any, ...]:
        """The tables, the tracks described since the last part of the run in them (their pid and tid)."""
        self._grow(drawn)
        sizes = (len(self.names), len(self.at), len(self._undescribed), len(self.texts))
        if self._made[1] != sizes:  # an entry is only added, or set once its track is described
            tables = tuple(self.names), tuple(self.at), tuple(self.counter_names), tuple(self.pids), tuple(self.texts)
            self._made = (tables, sizes)
        return self._made[0]

    def _grow(self, drawn: Any) -> None:
        for name in drawn.names.items[len(self.names) :]:
            self.names.append(cj._name(name).encode())
        where, emitter = self.w.where, drawn.emitter
        new = len(emitter.by_code) - len(self.at)
        self.at += [b""] * new
        self.counter_names += [b""] * new
        self.pids += [b""] * new
        self._undescribed += range(len(self.at) - new, len(self.at))
        for code in self._undescribed:  # the tables' entries once the track is described (its pid and tid)
            if emitter.described[code]:
                pid, tid, shown = where[emitter.by_code[code].uuid]
                self.at[code] = f'"pid":{pid},"tid":{tid}'.encode()
                self.counter_names[code] = cj._name(shown).encode()
                self.pids[code] = f'"pid":{pid}'.encode()
        self._undescribed = [code for code in self._undescribed if not emitter.described[code]]
        for text in drawn.strings.items[len(self.texts) :]:
            self.texts.append(cj._dumps(text).encode())

    def _make(self, what: int, layout: Any) -> List[int]:
        t = Template(self.consts)
        if what == COUNTER:
            t.const(b',\n{"ph":"C","name":').table(_TRACK, _COUNTER_NAMES).const(b',"ts":').micros(_TS).const(b",")
            t.table(_TRACK, _PIDS).const(b',"args":{"value":').dec(_VALS).const(b"}}")
            return t.done()
        if what == SLICE:
            t.const(b',\n{"ph":"X","name":').table(_NAME, _NAMES).const(b',"ts":').micros(_TS).const(b",")
            t.table(_TRACK, _AT).const(b',"dur":').span(_END, _TS).const(b',"args":')
        else:
            t.const(b',\n{"ph":"i","s":"t","name":').table(_NAME, _NAMES).const(b',"ts":').micros(_TS)
            t.const(b",").table(_TRACK, _AT).const(b',"args":')
        self._args(t, layout)
        t.const(b"}")
        flow = "submit" if what == SLICE else "trigger"
        self._flow(t, _FLOW_OUT, f'{{"ph":"s","name":"{flow}","cat":"flow","id":')
        if what == SLICE:
            self._flow(t, _FLOW_IN, '{"ph":"f","bp":"e","name":"submit","cat":"flow","id":')
        return t.done()

    @staticmethod
    def _flow(t: Template, col: int, head: str) -> None:
        mark = t.unless_zero(col)
        t.const(b",\n" + head.encode()).low(col, FLOW_BITS).const(b',"ts":').micros(_TS).const(b",").table(_TRACK, _AT)
        t.const(b"}").until(mark)

    @staticmethod
    def _args(t: Template, layout: Any) -> None:
        """`_dumps(args)`: {"key":value,...}."""
        t.const(b"{")
        for i, (key, kind, x) in enumerate(layout):
            t.const((b"," if i else b"") + cj._dumps(key).encode() + b":")
            if kind == CONST:
                t.const(cj._dumps(x).encode())
            elif kind == STR:
                t.table(_VALS + x, _TEXTS)
            else:
                t.dec(_VALS + x)
        t.const(b"}")
