"""A normalized block drawn as a timeline at once: the columnar twin of `TimelineMapper`'s one-by-one drawing.

`BlockDrawing.draw(nb, tasks, changes)` draws what the exporter would draw by calling the mapper for each of
the block's rows, then each task the latency detector paired, each completion it could not pair, each change
of live memory (npu_trace.export.run), and gives the writer the same calls in the same order:
- the hot kinds are drawn as columns (`npu_trace.export.pieces`): calls paired with their entry (slices on their
  device's lanes), interrupt handlers (entry -> exit, per line), submits and allocations (instants), tasks
  (slices on their stream's lanes, a flow from their submit), live memory (counters), their arguments made as
  the normalizer and the mapper make them (`npu_trace.export.rowargs`);
- everything else (the rare kinds, rows whose values cannot be columns, a line whose entries and exits do not
  alternate, a device's first memory change in the window) goes through the mapper one by one, its calls kept
  with the row's key (`Capture`);
- both are written in key order (`flush`): each row's calls where drawing the rows one by one makes them.

The columnar parts keep the mapper's state as the mapper does: lanes (`LanePacker.place_many`), the handlers
entered and not exited, the interrupt names, live memory, counts. A block is worked through in key order, cut
at each thing drawn one by one, so that each sees the state the rows before it left. The window opens (the
mapper's `_open`) where drawing one by one opens it; its calls go before everything else of the block
(`FRONT`), where they land when drawing one by one (nothing is shown before them).
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import numpy as np

from npu_trace.export.emit import Call, Capture, Emitter
from npu_trace.export.part_calls import Allocs, Calls, Submits, Tasks
from npu_trace.export.part_irqs import Irqs
from npu_trace.export.part_memory import Memory
from npu_trace.export.pieces import INT as INT_ARG
from npu_trace.export.pieces import (
    STR,
    SUBKEYS,
    Layouts,
    Names,
    Pieces,
    Strings,
    factorize,
)
from npu_trace.export.rowargs import ArgSet, drop, layouts, put, width_of
from npu_trace.export.rows import Room
from npu_trace.export.track_map import _HIDDEN_ARGS, TimelineMapper
from npu_trace.pipeline.vnormalize import KIND_CODE, NormBlock, kind_in

FRONT = -SUBKEYS  # the key of the window's opening: before every row of the block
_CALL_CODES = [KIND_CODE[k] for k in ("call", "submit", "free")]  # a timeout's slice comes with an instant: alone
_IRQ, _SUBMIT, _ALLOC, _COMPLETE = KIND_CODE["irq"], KIND_CODE["submit"], KIND_CODE["alloc"], KIND_CODE["complete"]
_LOST = KIND_CODE["lost"]
_CALLS = [KIND_CODE["call"], KIND_CODE["free"]]  # shown only with a latency


def _domains() -> np.ndarray:
    """By kind code: the parts whose state a row of that kind drawn one by one shares (a call's lanes, and a
    submit's stream: the mapper's _call and _submit; an interrupt line's handlers and lanes)."""
    out: np.ndarray = np.empty(len(KIND_CODE), dtype=object)
    for kind, code in KIND_CODE.items():
        calls = kind in ("call", "submit", "free", "timeout")
        out[code] = ("irq",) if kind == "irq" else ("calls", "streams") if calls else ()
    return out


_DOMAINS = _domains()
_MIN = -(1 << 63)


class Parts(NamedTuple):
    """A block's parts drawn as columns (npu_trace.export.parts), in the order they are worked through."""

    irqs: Irqs
    calls: Calls
    submits: Submits
    allocs: Allocs
    tasks: Tasks
    memory: Memory


class Drawn:
    """What the writers read beside the pieces: the tracks (the Emitter), names, text values, layouts."""

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self.names = Names()
        self.strings = Strings()
        self.layouts = Layouts()


class BlockDrawing:
    """See the module docstring. `render(pieces, lo, hi)` writes pieces [lo, hi) (the writer's `pieces`)."""

    def __init__(self, mapper: TimelineMapper, capture: Capture, drawn: Drawn,
                 render: Callable[[Pieces, int, int], None]) -> None:  # fmt: skip
        self.m = mapper
        self.cap = capture
        self.d = drawn
        self.render = render
        self.room = Room()  # the memory each block's pieces are laid in (npu_trace.export.rows)

    # ---- the block ------------------------------------------------------------------------------------
    def draw(self, nb: NormBlock, rows: Rows, tasks: Optional[Tuple[np.ndarray, np.ndarray]],
             changes: Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
             after: Optional[Callable[[Pieces, int], None]] = None) -> None:  # fmt: skip
        """The block's `rows.drawn` (the rows the mapper's `event` draws, in order), then `tasks` (the
        completions the latency detector paired and their submits' times), the completions it did not pair
        (`rows.unmatched`), then the memory detector's `changes`; `after(pieces, base)` adds what follows them
        all, keyed from `base` (the host's context: npu_trace.export.hostctx)."""
        task_rows, submitted = tasks if tasks is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        unmatched = rows.unmatched
        base = (len(nb), len(nb) + len(task_rows), len(nb) + len(task_rows) + len(unmatched))
        pieces = Pieces()
        self.cap.keeping = True
        wanted = self._wanted_rows(nb, rows.drawn)
        shown = rows.drawn[wanted]
        parts = self._parts(nb, shown, task_rows, submitted, changes, base, pieces)
        running = np.maximum(rows.before, self.m.last_ts)[wanted]
        self._work(parts, self._one_by_one(nb, shown, running, parts, task_rows, submitted, unmatched, base))
        if after is not None:
            after(pieces, base[2] + len(changes[0]))
        self.m.last_ts = max(self.m.last_ts, rows.last_ts)
        self.cap.keeping = False
        flush(pieces.done(self.room), self.cap.take(), self.cap, self.render)

    def _work(self, parts: Parts, one_by_one: List[Tuple[int, Tuple[str, ...], Callable[[], None]]]) -> None:
        """Everything in key order: before each thing drawn one by one, what the parts sharing its state draw
        keyed before it; then the rest of the parts."""
        for key, domains, call in one_by_one:
            for part in parts:
                if part.domain in domains:
                    part.run(key)
            self._open_before(parts, key)
            self.cap.at(key)
            call()
        for part in parts:
            part.run(None)

    def _open_before(self, parts: Parts, key: int) -> None:
        """The window opens before a thing drawn one by one when a part shows something keyed before it (the
        parts that share no state with it are drawn later: only the opening, and the loss it shows, depend
        on where they stand)."""
        if not self.m.opened:
            shown = [ts for ts in (part.first_shown(key) for part in parts) if ts is not None]
            if shown:
                self.open_at(shown[0])

    def _parts(self, nb: NormBlock, wanted: np.ndarray, task_rows: np.ndarray, submitted: np.ndarray,
               changes: Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], base: Tuple[int, int, int],
               pieces: Pieces) -> Parts:  # fmt: skip
        self._first_seen(nb, wanted)
        kinds = nb.kind[wanted]
        return Parts(
            Irqs(self, nb, wanted[kinds == _IRQ], pieces),
            Calls(self, nb, wanted[kind_in(kinds, _CALL_CODES)], pieces),
            Submits(self, nb, wanted[kinds == _SUBMIT], pieces),
            Allocs(self, nb, wanted[kinds == _ALLOC], pieces),
            Tasks(self, nb, task_rows, submitted, base[0], pieces),
            Memory(self, changes, base[2], pieces),
        )

    def _one_by_one(self, nb: NormBlock, rows: np.ndarray, running: np.ndarray, parts: Parts,
                    task_rows: np.ndarray, submitted: np.ndarray, unmatched: np.ndarray,
                    base: Tuple[int, int, int]) -> List[Tuple[int, Tuple[str, ...], Callable[[], None]]]:  # fmt: skip
        """(key, the parts whose state it shares, what draws it) of everything drawn one by one, in key order
        (`rows`: the drawn rows the mapper does not leave out, `running` the mapper's last_ts before each)."""
        taken: np.ndarray = np.zeros(len(nb), dtype=bool)
        for part in parts[:4]:
            taken[part.rows] = True
        m = self.m
        out: List[Tuple[int, Tuple[str, ...], Callable[[], None]]] = []
        alone = np.flatnonzero(~taken[rows])
        domains = _DOMAINS[nb.kind[rows[alone]]]
        for i, r, d in zip(alone.tolist(), rows[alone].tolist(), domains.tolist()):
            out.append((r * SUBKEYS, d, _event_call(m, nb, r, int(running[i]))))
        for i in parts.tasks.alone.tolist():
            out.append(((base[0] + i) * SUBKEYS, ("streams",), _task_call(m, nb, int(task_rows[i]), int(submitted[i]))))
        for i, r in enumerate(unmatched.tolist()):
            out.append(((base[1] + i) * SUBKEYS, ("streams",), _unmatched_call(m, nb, r)))
        out += parts.memory.alone_calls()
        out.sort(key=lambda item: item[0])
        return out

    # ---- what the mapper's event() does first ----------------------------------------------------------
    def _wanted_rows(self, nb: NormBlock, rows: np.ndarray) -> np.ndarray:
        """Which rows the mapper draws at all (its device filter)."""
        devices = self.m.devices
        if devices is None:
            return np.ones(len(rows), dtype=bool)
        dev = nb.dev[rows]
        wanted = np.isin(dev, sorted(devices)) & (dev >= 0)
        kinds = nb.kind[rows]
        return wanted | ((dev < 0) & ((kinds == _LOST) | (kinds == KIND_CODE["marker"])))

    def _first_seen(self, nb: NormBlock, rows: np.ndarray) -> None:
        dev = nb.dev[rows]
        has = dev >= 0
        if not has.any():
            return
        placed = np.flatnonzero(has)
        _, first = factorize([dev[placed]])
        first = placed[np.sort(first)]  # each device's first row (the few read: not every row's stamp)
        for d, t in zip(dev[first].tolist(), nb.block.ts[rows[first]].tolist()):
            self.m.first_seen.setdefault(d, t)

    # ---- shared by the parts ------------------------------------------------------------------------------
    def open_at(self, ts: int) -> None:
        """Something is shown: the window opens first (see the module docstring) unless it has."""
        if not self.m.opened:
            self.cap.at(FRONT)
            self.m._open(ts)

    def plain(self, nb: NormBlock, rows: np.ndarray, sets: List[ArgSet]) -> List[ArgSet]:
        """_plain_args of each row: its arguments without the hidden ones, who ran it (pid, comm, cpu)."""
        sets = drop(sets, _HIDDEN_ARGS)
        pid = nb.block.pid[rows].astype(np.int64)
        has_pid = pid >= 0
        sets = put(sets, "pid", INT_ARG, pid, has_pid)
        sets = put(sets, "comm", STR, self.comm_codes(pid), has_pid)
        cpu = nb.block.cpu[rows].astype(np.int64)
        return put(sets, "cpu", INT_ARG, cpu, cpu >= 0)

    def comm_codes(self, pids: np.ndarray) -> np.ndarray:
        if not len(pids):
            return np.zeros(0, np.int64)
        groups, first = factorize([pids])
        comm_of, strings = self.m.comm_of, self.d.strings  # the names as they are now: a process may be renamed
        codes = [strings.code(comm_of(p)) for p in pids[first].tolist()]
        return np.array(codes, dtype=np.int64)[groups]

    def op_names(self, nb: NormBlock, rows: np.ndarray, prefix: str = "") -> np.ndarray:
        """The name code of each row's operation (`prefix` before it)."""
        ops = nb.op[rows].astype(np.int64)
        groups, first = factorize([ops])
        names = self.d.names
        codes = [names.code(prefix + nb.norm.ops[o]) for o in ops[first].tolist()]
        return np.array(codes, dtype=np.int64)[groups]

    def layout(self, sets: List[ArgSet], n: int) -> Tuple[np.ndarray, np.ndarray]:
        return layouts(sets, n, width_of(sets), self.d.layouts)

    def track_code(self, track: Any) -> int:
        return self.d.emitter.code(track)


# ---- the parts drawn as columns ---------------------------------------------------------------------------

class Rows(NamedTuple):
    """What the drawing of a block needs that no drawing state changes (`prepare`: the export makes it while
    the block's drawing is under way elsewhere, npu_trace.export.apart): the rows the mapper's `event` draws
    (`drawn`), before each the latest stamp of the drawn rows before it in the block (`before`, not of losses;
    _MIN for the first: the mapper's last_ts is taken into account when drawn), the latest stamp of them all
    (`last_ts`) and the completions the latency detector did not pair (`unmatched`: the mapper's
    unmatched_complete)."""

    drawn: np.ndarray
    before: np.ndarray
    last_ts: int
    unmatched: np.ndarray


def prepare(nb: NormBlock, task_rows: Optional[np.ndarray]) -> Rows:
    """The block's Rows (see Rows), `task_rows`: the completions the latency detector paired (None: none)."""
    drawn = drawn_rows(nb)
    ts = np.where(nb.kind[drawn] == _LOST, _MIN, nb.block.ts[drawn])
    before: np.ndarray = np.full(len(drawn), _MIN, dtype=np.int64)
    if len(drawn) > 1:
        before[1:] = np.maximum.accumulate(ts)[:-1]
    last_ts = int(ts.max()) if len(ts) else _MIN
    matched: np.ndarray = np.zeros(len(nb), dtype=bool)
    if task_rows is not None:
        matched[task_rows] = True
    return Rows(drawn, before, last_ts, np.flatnonzero((nb.kind == _COMPLETE) & ~matched))


def drawn_rows(nb: NormBlock) -> np.ndarray:
    """The rows the mapper draws as events: not the formats without a rule (counted only), not completions
    (drawn as the tasks the latency detector paired), not the calls and frees without a latency (entries,
    drawn at their return, and returns without one); as TimelineMapper.event would skip them."""
    keep = ~nb.counted_only & (nb.kind != _COMPLETE)
    is_call = keep & kind_in(nb.kind, _CALLS)
    if nb.latency_is_pairing(is_call):  # the common case: the calls with one are the paired returns
        return np.flatnonzero(keep & (~is_call | nb.paired))
    calls = np.flatnonzero(is_call)
    got = nb.int_args(calls, "latency_ns")
    if got is not None:
        keep[calls[~got[1]]] = False
    return np.flatnonzero(keep)


# ---- what is drawn one by one ---------------------------------------------------------------------------
def _event_call(m: TimelineMapper, nb: NormBlock, r: int, last_ts: int) -> Callable[[], None]:
    def call() -> None:
        m.last_ts = max(m.last_ts, last_ts)
        m.event(nb.event(r))

    return call


def _task_call(m: TimelineMapper, nb: NormBlock, r: int, submitted: int) -> Callable[[], None]:
    return lambda: m.task(nb.event(r), submitted)


def _unmatched_call(m: TimelineMapper, nb: NormBlock, r: int) -> Callable[[], None]:
    return lambda: m.unmatched_complete(nb.event(r))


# ---- into the writer, in key order -------------------------------------------------------------------------
def flush(pieces: Pieces, calls: List[Call], capture: Capture, render: Callable[[Pieces, int, int], None]) -> None:
    """The block's pieces and the calls kept, in key order, to the writer."""
    calls = sorted(calls, key=lambda c: c[0])
    at = 0
    for call in calls:
        cut = int(np.searchsorted(pieces.key, call[0]))
        if cut > at:
            render(pieces, at, cut)
            at = cut
        capture.replay([call])
    if len(pieces) > at:
        render(pieces, at, len(pieces))
