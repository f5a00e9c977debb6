"""The host's context in an export: each CPU's scheduler and interrupt events (npu_trace.ftrace.context).

A recording traced with --host-context holds sched_switch, sched_waking, irq_handler_entry/exit and
softirq_entry/exit. The export shows them beside the NPU's tracks, from the blocks' columns:
- Perfetto (`PerfettoContext`): as Perfetto's own ftrace packets, as its traced writes them: one
  `FtraceEventBundle` per CPU and block, `ftrace_events { cpu, event { timestamp, pid, sched_switch {...} } }`,
  each event's fields named as the kernel's (prev_comm, prev_state, ...), so that the UI shows per-CPU tracks,
  thread states and interrupts from them. Their stamps are the recording's trace clock: for a CLOCK_MONOTONIC
  recording the clock snapshot says CLOCK_BOOTTIME is the same clock (the trace processor reads ftrace stamps
  as CLOCK_BOOTTIME unless told otherwise), for a mono_raw one the bundle says so (`ftrace_clock`).
- Chrome JSON (`ChromeContext`): as slices on CPU tracks under a "CPUs" group: the thread each CPU ran, from
  switch to switch ("comm (pid)", with the state it left in), its hard and soft interrupts (entry -> exit),
  and each wakeup as an instant on the waking CPU's track.
Only what lies in the export's window is drawn (a CPU's running thread crossing its edges is cut there).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.export.pieces import INSTANT, INT, SLICE, STR, SUBKEYS, Pieces, Strings, factorize, split
from npu_trace.export.rowargs import decodable, field_column
from npu_trace.export.tracks import GROUP, SLICES, Track
from npu_trace.export.wire import Consts, Template, assemble, program
from npu_trace.ftrace.context import (
    HOST_CONTEXT,
    IRQ_ENTRY,
    IRQ_EXIT,
    SCHED_SWITCH,
    SCHED_WAKING,
    SOFTIRQ_ENTRY,
    SOFTIRQ_EXIT,
    softirq_name,
    task_state,
)
from npu_trace.pipeline.blocks import Block
from npu_trace.pipeline.order import stable_order

SEQUENCE = 2  # the ftrace bundles' packet sequence (the track events' is 1)
_MIN = -(1 << 63)


def context_names(formats: Sequence[str]) -> List[str]:
    """The host context events among a recording's formats ("system:name")."""
    return [name for name in HOST_CONTEXT if name in formats]


class Rows:
    """A block's rows of one context event inside the window: stamps, CPUs, pids, and the format's fields as
    columns (integers, or codes of texts in `strings`)."""

    def __init__(self, block: Block, etype: int, lo: int, hi: int, strings: Strings) -> None:
        table = block.tables[etype]
        rows = _rows_of(block, etype)
        self.name = table.plan.fmt.full_name
        refs = block.ref[rows]
        keep: np.ndarray = np.ones(len(rows), dtype=bool)
        self.fields: Dict[str, Tuple[int, np.ndarray]] = {}
        for field in table.plan.fmt.fields if decodable(table, refs) else ():
            got = field_column(table, refs, field, strings)
            if got is not None:
                self.fields[field.name] = got[0]
                if got[1] is not None:
                    keep &= ~got[1]
        ts = block.ts[rows]
        self.inside = (ts >= lo) & (ts < hi)
        self.rows, self.ts, self.cpu, self.pid = rows, ts, block.cpu[rows].astype(np.int64), block.pid[rows]
        self.usable = keep

    def __len__(self) -> int:
        return len(self.rows)

    def int(self, name: str) -> np.ndarray:
        got = self.fields.get(name)
        return got[1] if got is not None and got[0] == INT else np.zeros(len(self.rows), np.int64)

    def text(self, name: str) -> Optional[np.ndarray]:
        got = self.fields.get(name)
        return got[1] if got is not None and got[0] == STR else None


def _rows_of(block: Block, etype: int) -> np.ndarray:
    if block.groups is not None:
        for e, rows in block.groups:
            if e == etype:
                return rows
        return np.zeros(0, np.int64)
    return np.flatnonzero(block.etype == etype)


def context_rows(block: Block, lo: int, hi: int, strings: Strings) -> Dict[str, Rows]:
    out = {}
    for etype, table in block.tables.items():
        if table.plan.fmt.full_name in HOST_CONTEXT and len(table):
            got = Rows(block, etype, lo, hi, strings)
            out[got.name] = got
    return out


# ---- Perfetto: the ftrace packets ------------------------------------------------------------------------
class PerfettoContext:
    """Each block's context events inside the window as FtraceEventBundles, one per CPU (see the module
    docstring): `bundles(block, lo, hi)` -> the framed packets; `counts`: events written by name."""

    def __init__(self, clock: Optional[str]) -> None:
        from npu_trace.export import perfetto as pf

        self.pf = pf
        self.strings = Strings()
        self.texts: List[bytes] = []
        self.consts = Consts()
        self.templates: Dict[str, Tuple[int, List[str]]] = {}  # event -> (template, its columns' fields)
        self.words: List[List[int]] = []
        self.clock_field = _tag(5, 0) + pf.varint(pf.pb.FTRACE_CLOCK_MONO_RAW) if clock == "mono_raw" else b""
        self.counts: Dict[str, int] = {}
        self.buffer = bytearray()

    def bundles(self, block: Block, lo: int, hi: int) -> bytes:
        found = context_rows(block, lo, hi, self.strings)
        parts = [self._table(rows) for rows in found.values() if (rows.inside & rows.usable).any()]
        if not parts:
            return b""
        ts = np.concatenate([p[0] for p in parts])
        cpu = np.concatenate([p[1] for p in parts])
        which = np.concatenate([p[2] for p in parts]).astype(np.int32)
        width = max(p[3].shape[1] for p in parts)
        cols: np.ndarray = np.zeros((len(ts), width), dtype=np.int64)
        at = 0
        for p in parts:
            cols[at : at + len(p[0]), : p[3].shape[1]] = p[3]
            at += len(p[0])
        order = np.lexsort((ts, cpu))  # by CPU, in time order (a stable order among equal stamps: their rows')
        return self._write(cpu[order], which[order], cols[order])

    def _table(self, rows: Rows) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(stamps, CPUs, template, columns: ts, pid, then the event's fields) of the rows to write."""
        template, names = self._template(rows)
        sel = np.flatnonzero(rows.inside & rows.usable)
        cols: np.ndarray = np.zeros((len(sel), 2 + len(names)), dtype=np.int64)
        cols[:, 0], cols[:, 1] = rows.ts[sel], rows.pid[sel]
        for j, name in enumerate(names):
            _, values = rows.fields[name]
            cols[:, 2 + j] = values[sel]
        self.counts[rows.name] = self.counts.get(rows.name, 0) + len(sel)
        return rows.ts[sel], rows.cpu[sel], np.full(len(sel), template), cols

    def _template(self, rows: Rows) -> Tuple[int, List[str]]:
        got = self.templates.get(rows.name)
        if got is None:
            got = self.templates[rows.name] = self._make(rows)
        return got

    def _make(self, rows: Rows) -> Tuple[int, List[str]]:
        """FtraceEvent { timestamp, pid, <event> { its fields the format has, by the kernel's names } }."""
        pf = self.pf
        from google.protobuf.descriptor import FieldDescriptor as F

        event_name = rows.name.split(":", 1)[1]
        outer = pf.pb.FtraceEvent.DESCRIPTOR.fields_by_name[event_name]
        t = Template(self.consts).const(_tag(2, 2)).begin().const(_tag(1, 0)).varint(0).const(_tag(2, 0)).varint(1)
        t.const(_tag(outer.number, 2)).begin()
        names: List[str] = []
        for field in sorted(outer.message_type.fields, key=lambda f: f.number):
            got = rows.fields.get(field.name)
            if got is None:
                continue
            if field.type == F.TYPE_STRING and got[0] == STR:
                t.const(_tag(field.number, 2)).table(2 + len(names), 0)
            elif field.type in (F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64) and got[0] == INT:
                t.const(_tag(field.number, 0)).varint(2 + len(names))
            else:
                continue
            names.append(field.name)
        self.words.append(t.end().end().done())
        return len(self.words) - 1, names

    def _write(self, cpu: np.ndarray, which: np.ndarray, cols: np.ndarray) -> bytes:
        pf = self.pf
        for text in self.strings.items[len(self.texts) :]:
            data = pf._text(text).encode()
            self.texts.append(pf.varint(len(data)) + data)
        prog, starts = program(self.words)
        groups, first = factorize([cpu])
        out = []
        for g, at in sorted(zip(cpu[first].tolist(), split(groups, len(first)))):
            size = assemble(prog, starts, which[at], cols[at], tuple(self.consts.items), (tuple(self.texts),),
                            self.buffer)  # fmt: skip
            bundle = _tag(1, 0) + pf.varint(g) + bytes(self.buffer[:size]) + self.clock_field
            packet = _tag(1, 2) + pf.varint(len(bundle)) + bundle + _tag(10, 0) + pf.varint(SEQUENCE)
            out.append(pf._PACKET + pf.varint(len(packet)) + packet)
        return b"".join(out)


def _tag(field: int, wire: int) -> bytes:
    from npu_trace.export.perfetto import varint

    return varint(field << 3 | wire)


# ---- Chrome JSON: CPU tracks ---------------------------------------------------------------------------------
class ChromeContext:
    """Each block's context events as slices and instants on CPU tracks (see the module docstring), added to
    the block's pieces through the mapping's tracks (`mapper`) and the drawing's registries (`drawn`)."""

    def __init__(self, mapper: Any, drawn: Any, open_at: Any) -> None:
        self.m, self.d = mapper, drawn
        self.open_at = open_at  # the window opens before what is shown first (BlockDrawing.open_at)
        self.running: Dict[int, Tuple[int, int, int, int]] = {}  # cpu -> (since, pid, comm code, prio)
        self.open_irqs: Dict[Tuple[int, str, int], int] = {}  # (cpu, kind, irq or vec) -> entry stamp
        self.irq_names: Dict[int, str] = {}
        self.counts: Dict[str, int] = {"running": 0, "irqs": 0, "softirqs": 0, "wakeups": 0}

    def draw(self, block: Block, pieces: Pieces, base: int) -> None:
        """The block's context, keyed from `base` (after everything else of the block), in time order."""
        found = context_rows(block, _MIN, (1 << 63) - 1, self.d.strings)
        made: List[Tuple[np.ndarray, Dict[str, Any]]] = []
        switch = found.get(SCHED_SWITCH)
        if switch is not None:
            made.append(self._switches(switch))
        for entry, exit_, kind, field in ((IRQ_ENTRY, IRQ_EXIT, "irq", "irq"),
                                          (SOFTIRQ_ENTRY, SOFTIRQ_EXIT, "softirq", "vec")):  # fmt: skip
            if entry in found and exit_ in found:
                made.append(self._handlers(found[entry], found[exit_], kind, field))
        if SCHED_WAKING in found:
            made.append(self._wakeups(found[SCHED_WAKING]))
        self._add(made, pieces, base)

    def finish(self, end: int, pieces: Pieces, base: int) -> None:
        """The threads still running at the export's end, drawn up to it."""
        made = []
        for cpu, (since, pid, comm, prio) in sorted(self.running.items()):
            if pid != 0:
                made.append(self._slices(np.array([since]), np.array([end]), np.array([cpu]), np.array([pid]),
                                         np.array([comm]), np.array([prio]), None))  # fmt: skip
        self.running.clear()
        self._add(made, pieces, base)

    # ---- each kind ------------------------------------------------------------------------------------------
    def _switches(self, rows: Rows) -> Tuple[np.ndarray, Dict[str, Any]]:
        """A slice per thread run: from the switch that put it on its CPU to the one that took it off."""
        order = np.lexsort((np.arange(len(rows)), rows.cpu))
        cpu, ts = rows.cpu[order], rows.ts[order]
        prev_state = rows.int("prev_state")[order]
        comm = rows.text("next_comm")
        comm = comm if comm is not None else np.full(len(rows), self.d.strings.code(""), np.int64)
        nxt = (rows.int("next_pid")[order], comm[order], rows.int("next_prio")[order])
        start: np.ndarray = np.empty(len(order), dtype=np.int64)
        who: List[np.ndarray] = [np.empty(len(order), dtype=np.int64) for _ in range(3)]
        first: np.ndarray = np.ones(len(order), dtype=bool)
        first[1:] = cpu[1:] != cpu[:-1]
        start[1:], start[first] = ts[:-1], _MIN
        for k in range(3):
            who[k][1:] = nxt[k][:-1]
        for i in np.flatnonzero(first).tolist():
            carried = self.running.get(int(cpu[i]), (_MIN, 0, 0, 0))
            start[i], who[0][i], who[1][i], who[2][i] = carried
        last = np.append(np.flatnonzero(first)[1:] - 1, len(order) - 1) if len(order) else np.zeros(0, np.int64)
        for i in last.tolist():
            self.running[int(cpu[i])] = (int(ts[i]), int(nxt[0][i]), int(nxt[1][i]), int(nxt[2][i]))
        keep = (start != _MIN) & (who[0] != 0)  # a thread seen start to end, not the idle task
        return self._slices(start[keep], ts[keep], cpu[keep], who[0][keep], who[1][keep], who[2][keep],
                            prev_state[keep])  # fmt: skip

    def _slices(self, begin: np.ndarray, end: np.ndarray, cpu: np.ndarray, pid: np.ndarray, comm: np.ndarray,
                prio: np.ndarray, state: Optional[np.ndarray]) -> Tuple[np.ndarray, Dict[str, Any]]:  # fmt: skip
        texts, names = self.d.strings.items, self.d.names
        named = per_distinct([comm, pid], lambda c, p: names.code(f"{texts[c]} ({p})"))
        vals = [pid, comm, prio]
        layout = [("pid", INT, 0), ("comm", STR, 1), ("prio", INT, 2)]
        if state is not None:
            vals.append(per_distinct([state], lambda s: self.d.strings.code(task_state(s))))
            layout.append(("state", STR, 3))
        self.counts["running"] += len(begin)
        return end, {"what": SLICE, "begin": begin, "end": end, "cpu": cpu, "track": "", "name": named,
                     "layout": tuple(layout), "vals": vals}  # fmt: skip

    def _handlers(self, entries: Rows, exits: Rows, kind: str,
                  field: str) -> Tuple[np.ndarray, Dict[str, Any]]:  # fmt: skip
        """Each entry with the next exit of the same line on its CPU: a slice on the CPU's irq (softirq) track
        (an entry open at a block's end is closed by the next block's first exit of its line)."""
        ts = np.concatenate([entries.ts, exits.ts])
        cpu = np.concatenate([entries.cpu, exits.cpu])
        line = np.concatenate([entries.int(field), exits.int(field)])
        is_entry = np.concatenate([np.ones(len(entries), bool), np.zeros(len(exits), bool)])
        order = np.lexsort((np.concatenate([entries.rows, exits.rows]), line, cpu))
        cpu, line, ts, is_entry = cpu[order], line[order], ts[order], is_entry[order]
        head: np.ndarray = np.ones(len(order), dtype=bool)
        head[1:] = (cpu[1:] != cpu[:-1]) | (line[1:] != line[:-1])
        closed = np.flatnonzero(is_entry[:-1] & ~is_entry[1:] & ~head[1:]) if len(order) > 1 else np.zeros(0, int)
        carried = self._carried(kind, cpu, line, ts, is_entry, head)
        begin = np.concatenate([ts[closed], carried[0]])
        end = np.concatenate([ts[closed + 1], carried[1]])
        cpus = np.concatenate([cpu[closed], carried[2]])
        lines = np.concatenate([line[closed], carried[3]])
        self.counts["irqs" if kind == "irq" else "softirqs"] += len(begin)
        names = self._line_names(kind, lines, entries)
        return end, {"what": SLICE, "begin": begin, "end": end, "cpu": cpus, "track": kind, "name": names,
                     "layout": ((field, INT, 0),), "vals": [lines]}  # fmt: skip

    def _carried(self, kind: str, cpu: np.ndarray, line: np.ndarray, ts: np.ndarray, is_entry: np.ndarray,
                 head: np.ndarray) -> Tuple[np.ndarray, ...]:  # fmt: skip
        """Handlers entered in an earlier block and exited by this block's first row of their line (an exit);
        then the entries this block leaves open (its last row of a line, an entry): one look per line."""
        starts = np.flatnonzero(head)
        ends = np.append(starts[1:], len(ts)) - 1
        out: List[Tuple[int, int, int, int]] = []
        for first, last in zip(starts.tolist(), ends.tolist()):
            key = (int(cpu[first]), kind, int(line[first]))
            if not is_entry[first] and key in self.open_irqs:
                out.append((self.open_irqs.pop(key), int(ts[first]), key[0], key[2]))
            if is_entry[last]:
                self.open_irqs[key] = int(ts[last])
        cols = list(zip(*out)) if out else [(), (), (), ()]
        return tuple(np.array(c, dtype=np.int64) for c in cols)

    def _line_names(self, kind: str, lines: np.ndarray, entries: Rows) -> np.ndarray:
        names = self.d.names
        if kind != "irq":
            return per_distinct([lines], lambda v: names.code(softirq_name(v)))
        texts = entries.text("name")
        if texts is not None:  # each line's first name, in time order (the kernel names a line once)
            irqs = entries.int("irq")
            _, first = factorize([irqs])
            for at in np.sort(first).tolist():
                self.irq_names.setdefault(int(irqs[at]), self.d.strings.items[int(texts[at])])
        return per_distinct([lines], lambda v: names.code(f"{self.irq_names.get(v, 'irq')} ({v})"))

    def _wakeups(self, rows: Rows) -> Tuple[np.ndarray, Dict[str, Any]]:
        comm = rows.text("comm")
        comm = comm if comm is not None else np.full(len(rows), self.d.strings.code(""), np.int64)
        texts = self.d.strings.items
        names = per_distinct([comm], lambda c: self.d.names.code(f"wakes {texts[c]}"))
        vals = [rows.int("pid"), comm, rows.int("prio"), rows.int("target_cpu")]
        layout = (("pid", INT, 0), ("comm", STR, 1), ("prio", INT, 2), ("target_cpu", INT, 3))
        self.counts["wakeups"] += len(rows)
        return rows.ts, {"what": INSTANT, "begin": rows.ts, "end": rows.ts, "cpu": rows.cpu, "track": "",
                         "name": names, "layout": layout, "vals": vals}  # fmt: skip

    # ---- into the pieces --------------------------------------------------------------------------------------
    def _add(self, made: List[Tuple[np.ndarray, Dict[str, Any]]], pieces: Pieces, base: int) -> None:
        """The things made, in the order of their stamps (a slice at its end), cut to the window."""
        lo, hi = self.m.lo, self.m.hi
        stamp = np.concatenate([m[0] for m in made]) if made else np.zeros(0, np.int64)
        order = stable_order(stamp)
        rank: np.ndarray = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        at = 0
        shown_first: Optional[int] = None
        for when, spec in made:
            n = len(when)
            keys: np.ndarray = (base + rank[at : at + n]) * SUBKEYS
            at += n
            begin, end = spec["begin"], spec["end"]
            shown = ~((end < lo) | (begin >= hi) | (end < begin))
            if not shown.any():
                continue
            b, e = np.maximum(begin, lo), np.minimum(end, hi)
            first = int(b[shown].min())
            shown_first = first if shown_first is None else min(shown_first, first)
            self._pieces(pieces, keys[shown], spec, shown, b[shown], e[shown])
        if shown_first is not None:
            self.open_at(shown_first)

    def _pieces(self, pieces: Pieces, keys: np.ndarray, spec: Dict[str, Any], shown: np.ndarray, b: np.ndarray,
                e: np.ndarray) -> None:  # fmt: skip
        cpu = spec["cpu"][shown]
        tracks = per_distinct([cpu], lambda c: self.d.emitter.code(self._track(c, spec["track"])))
        layout = self.d.layouts.code(spec["layout"])
        vals = [v[shown] for v in spec["vals"]]
        pieces.add(keys, spec["what"], tracks, b, spec["name"][shown], layout, vals, e)

    def _track(self, cpu: int, kind: str) -> Track:
        m = self.m
        group = m._track(("host",), "CPUs", GROUP, None, 1 << 20)
        name = f"CPU {cpu}" + (f" {kind}" if kind else "")
        rank = cpu * 4 + {"": 0, "irq": 1, "softirq": 2}[kind]
        return m._track(("host", cpu, kind), name, SLICES, group, rank)


def per_distinct(cols: List[np.ndarray], code: Any) -> np.ndarray:
    """code(*values) of each row's values, called once per distinct row."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    groups, first = factorize(cols)
    made = [code(*values) for values in zip(*(c[first].tolist() for c in cols))]
    return np.array(made, dtype=np.int64)[groups]
