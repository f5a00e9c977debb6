"""A run of a block's pieces (npu_trace.export.pieces) as Perfetto packets, written at once.

The packets are those `PerfettoWriter` writes for each piece one by one (a slice: its begin, with its debug
annotations, interned names and flows, then its end; an instant; a counter), byte for byte: the names and
argument names new in the run are interned in the writer's own tables on the first piece that uses them, as
`PerfettoWriter._named` does, then each piece is laid out by the template of its kind and argument layout
(`npu_trace.export.wire`), its values read from columns.
"""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np

from npu_trace.export import perfetto as pf
from npu_trace.export.pieces import (
    CONST,
    COUNTER,
    END,
    FLOW_IN,
    FLOW_OUT,
    NAME,
    SLICE,
    SPARE,
    STR,
    TRACK,
    TS,
    VALS,
    Pieces,
    PiecesWriter,
    first_of,
)
from npu_trace.export.wire import Template

# the columns the templates read: the pieces' own, their first spare column the interned data of each
_TS, _END, _NAME, _TRACK, _FLOW_OUT, _FLOW_IN, _VALS = TS, END, NAME, TRACK, FLOW_OUT, FLOW_IN, VALS
_INTERNED_AT = SPARE
# the tables: by name code, by track code (twice), by text code, the run's interned data
_NAME_FIELDS, _TRACK_FIELDS, _END_EVENTS, _TEXTS, _INTERNED_DATA = range(5)
INTERNED_TABLE = (64, 64)  # the first size of the table of (name, layout) seen interned (grown when needed)


class PerfettoPieces(PiecesWriter):
    """Writes runs of pieces through a PerfettoWriter (its interning tables, counts and buffer)."""

    def __init__(self, writer: pf.PerfettoWriter) -> None:
        super().__init__(writer)
        self.w: pf.PerfettoWriter = writer
        self.name_fields: List[bytes] = []  # by name code: its name_iid field once interned
        self.track_fields: List[bytes] = []
        self.end_events: List[bytes] = []
        self.texts: List[bytes] = []
        self._unnamed: List[int] = []  # name codes not interned when their field was made
        self._interned: np.ndarray = np.zeros(INTERNED_TABLE, dtype=bool)  # (name code + 1, layout + 1) seen interned
        self._run_tables: Tuple[Any, ...] = ()

    # ---- a run: its templates, columns and tables (the tracks' fields do not wait for their description) ----
    def _prepare(self, p: Pieces, lo: int, hi: int, drawn: Any) -> Tuple[np.ndarray, np.ndarray]:
        if int(p.ts[lo:hi].min()) < 0 or int(p.end[lo:hi].min()) < 0:
            raise ValueError("Value out of range: a negative timestamp")  # as protobuf says it
        self._grow(drawn)
        interned = self._intern(p, lo, hi, drawn)
        which = self._templates(p, lo, hi, drawn)
        cols = p.rows[lo:hi]
        cols[:, _INTERNED_AT] = interned[0]
        self._run_tables = (tuple(self.name_fields), tuple(self.track_fields), tuple(self.end_events),
                            tuple(self.texts), tuple(interned[1]))  # fmt: skip
        return which, cols

    def _tables(self, drawn: Any) -> Tuple[Any, ...]:
        return self._run_tables

    def _grow(self, drawn: Any) -> None:
        """The tables by code, for the codes made since the last run."""
        for track in drawn.emitter.by_code[len(self.track_fields) :]:
            field = pf._TRACK + pf.varint(track.uuid)
            self.track_fields.append(field)
            body = pf._TYPE[pf._END] + field
            self.end_events.append(pf._EVENT + pf.varint(len(body)) + body)
        for text in drawn.strings.items[len(self.texts) :]:
            self.texts.append(pf.value_bytes(text))
        names, fields = drawn.names.items, self.w.names
        self._unnamed += range(len(self.name_fields), len(names))
        self.name_fields += [b""] * (len(names) - len(self.name_fields))
        if self._unnamed:  # interned since (by a piece, or by a call drawn one by one)
            for code in self._unnamed:
                self.name_fields[code] = fields.get(names[code], b"")
            self._unnamed = [code for code in self._unnamed if not self.name_fields[code]]

    def _intern(self, p: Pieces, lo: int, hi: int, drawn: Any) -> Tuple[np.ndarray, List[bytes]]:
        """The interned data of each piece (-1: none), as PerfettoWriter._named makes it: the names and argument
        names not interned yet, on the first piece that uses each (none when every piece's name and layout
        were seen interned: `_interned`)."""
        at: np.ndarray = np.full(hi - lo, -1, dtype=np.int64)
        data: List[bytes] = []
        names: np.ndarray = p.name[lo:hi] + 1
        layouts: np.ndarray = p.layout[lo:hi] + 1
        if self._all_interned(names, layouts, p.what[lo:hi]):
            return at, data
        named = np.flatnonzero(p.what[lo:hi] != COUNTER)
        combo = p.name[lo:hi][named] * (len(drawn.layouts.items) + 1) + p.layout[lo:hi][named]
        for pos in named[first_of(combo)].tolist():
            new = self._new_names(int(p.name[lo + pos]), int(p.layout[lo + pos]), drawn)
            if new:
                at[pos] = len(data)
                data.append(pf._INTERNED + pf.varint(len(new)) + new)
        self._interned[names[named], layouts[named]] = True  # the writer's tables only grow: interned for good
        return at, data

    def _all_interned(self, names: np.ndarray, layouts: np.ndarray, what: np.ndarray) -> bool:
        """Every piece but the counters of a (name, layout) whose names were all interned (by name code + 1 and
        layout + 1: `_interned`, grown to hold them)."""
        if not len(names):
            return True
        need = (int(names.max()) + 1, int(layouts.max()) + 1)
        have = self._interned.shape
        if need[0] > have[0] or need[1] > have[1]:
            grown: np.ndarray = np.zeros((max(need[0], 2 * have[0]), max(need[1], 2 * have[1])), dtype=bool)
            grown[: have[0], : have[1]] = self._interned
            self._interned = grown
        flat = names * self._interned.shape[1]  # a lookup in the flat table: 2-d indexing took 3x as long
        flat += layouts
        return bool((self._interned.ravel().take(flat) | (what == COUNTER)).all())

    def _new_names(self, name_code: int, layout: int, drawn: Any) -> bytes:
        w, new = self.w, []
        name = drawn.names.items[name_code]
        if name not in w.names:
            iid = len(w.names) + 1
            w.names[name] = pf._NAME_IID + pf.varint(iid)
            self.name_fields[name_code] = w.names[name]
            new.append(pf._interned(pf._EVENT_NAME, iid, name))
        for key, _, _ in drawn.layouts.items[layout] if layout >= 0 else ():
            if key not in w.keys:
                iid = len(w.keys) + 1
                w.keys[key] = pf._KEY_IID + pf.varint(iid)
                new.append(pf._interned(pf._KEY_NAME, iid, key))
        return b"".join(new)

    def _make(self, what: int, layout: Any) -> List[int]:
        t = Template(self.consts).const(pf._PACKET).begin().const(pf._TS).varint(_TS).const(pf._SEQ + pf._EVENT)
        t.begin()
        if what == COUNTER:
            t.const(pf._TYPE[pf._COUNTER]).table(_TRACK, _TRACK_FIELDS).const(pf._INT_COUNTER).varint(_VALS)
            return t.end().const(pf._FLAGS).end().done()
        self._annotations(t, layout)
        t.const(pf._TYPE[pf._BEGIN if what == SLICE else pf._INSTANT])
        t.table(_NAME, _NAME_FIELDS).table(_TRACK, _TRACK_FIELDS)
        mark = t.unless_zero(_FLOW_OUT)
        t.const(pf._FLOW).fixed64(_FLOW_OUT).until(mark)
        if what == SLICE:
            mark = t.unless_zero(_FLOW_IN)
            t.const(pf._TERMINATING).fixed64(_FLOW_IN).until(mark)
        t.end().table(_INTERNED_AT, _INTERNED_DATA).const(pf._FLAGS).end()
        if what == SLICE:
            t.const(pf._PACKET).begin().const(pf._TS).varint(_END).const(pf._SEQ).table(_TRACK, _END_EVENTS)
            t.const(pf._FLAGS).end()
        return t.done()

    def _annotations(self, t: Template, layout: Any) -> None:
        for key, kind, x in layout:
            kid = self.w.keys[key]
            if kind == CONST:
                body = kid + pf.value_bytes(x)
                t.const(pf._ANNOTATION + pf.varint(len(body)) + body)
            elif kind == STR:
                t.const(pf._ANNOTATION).begin().const(kid).table(_VALS + x, _TEXTS).end()
            else:
                t.framed(pf._ANNOTATION, kid + pf._INT, _VALS + x)
