"""Normalization, a whole block at once: the one normalizer of the production path, over the rules and the call
pairing of `npu_trace.pipeline.normalize.Normalizer`.

For the formats whose rule has a positional plan (one rule naming plain fields: every simulator event, the IRQ
tracepoints), kind, op and device come from columns in a few array operations; the other formats (rules that
match on strings, take op from a field, markers) and the records that come as objects (BPF's) are shaped row
by row (`Normalizer.shape`). Call pairing runs once over the block's entries and returns in time order, on the
pairing's stacks (`CallPairing`: push, take, settle), so every pairing, eviction and counter is what pairing
the events one by one gives (tests/reference/normalize.py is that, and the tests hold the two equal). Nothing
builds an NpuEvent per row: `NormBlock.event(i)` makes the event of one row when a detector needs it as an
object, `NormBlock.int_arg` gives one integer argument for a set of rows.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from npu_trace.events import KINDS, Loss, NpuEvent, TraceEvent, lost_event
from npu_trace.pipeline.blocks import OBJECT, Block, objects_block
from npu_trace.pipeline.normalize import MAX_PENDING, Normalizer
from npu_trace.pipeline.order import previous_of, stable_order

KIND_CODE = {k: i for i, k in enumerate(KINDS)}
LOG, LOST = KIND_CODE["log"], KIND_CODE["lost"]
MISSING = object()  # an argument the event does not carry
I64_MAX = (1 << 63) - 1
_NO_PAIR, _ENTRY, _RETURN = 0, 1, 2
_ROLE = {"": _NO_PAIR, "entry": _ENTRY, "return": _RETURN}


class _Ref:
    """A pending entry's arguments, still in the block's columns (made a dict if it outlives the block)."""

    __slots__ = ("pos",)

    def __init__(self, pos: int) -> None:
        self.pos = pos


class _Group:
    """The plan of one format in one block: its rows and how their arguments are read."""

    __slots__ = ("arg_at", "const", "fields", "plan", "rows", "table")

    def __init__(self, rows: np.ndarray, table: Any, plan: Any) -> None:
        self.rows, self.table, self.plan = rows, table, plan
        self.fields = table.plan.fmt.fields if table is not None else ()
        self.arg_at: Dict[str, int] = dict(plan[3]) if plan is not None else {}
        self.const: Dict[str, Any] = dict(plan[4]) if plan is not None else {}

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickled as what it is made of (the rest follows from them: an export sends a block's groups to its
        drawing's process, the plans as references, npu_trace.export.ship)."""
        return _Group, (self.rows, self.table, self.plan)


class NormBlock:
    """A normalized block: per row `kind` (codes of KINDS), `op` (codes of `ops`), `dev` (-1: none), and for
    paired returns `paired`, `latency` and `entry_ts`; `counted_only` marks rows of formats without a rule
    (check counts them as "log" and builds nothing for them)."""

    def __init__(self, normalizer: BlockNormalizer, block: Block) -> None:
        n = len(block)
        self.block, self.norm = block, normalizer
        self.kind: np.ndarray = np.full(n, LOG, dtype=np.int8)
        self.op: np.ndarray = np.zeros(n, dtype=np.int32)
        self.dev: np.ndarray = np.full(n, -1, dtype=np.int64)
        self.counted_only: np.ndarray = np.zeros(n, dtype=bool)
        self.role: np.ndarray = np.zeros(n, dtype=np.int8)
        self.paired: np.ndarray = np.zeros(n, dtype=bool)
        self.latency: np.ndarray = np.zeros(n, dtype=np.int64)
        self.entry_ts: np.ndarray = np.zeros(n, dtype=np.int64)
        self.entry_pos: np.ndarray = np.full(n, -1, dtype=np.int64)  # a paired return's entry in this block, or -1
        self.entry_args: Dict[int, Dict[str, Any]] = {}  # a paired return whose entry came before the block
        self.shaped: Dict[int, NpuEvent] = {}  # rows shaped one by one (objects, formats without a plan)
        self.group_of: np.ndarray = np.full(n, -1, dtype=np.int32)  # row -> index in `groups`
        self.groups: List[_Group] = []
        self.placed: np.ndarray = np.zeros(n, dtype=bool)  # the device in `dev` was given by the scope (an IRQ's)

    def __len__(self) -> int:
        return len(self.kind)

    def select(self, rows: np.ndarray) -> NormBlock:
        """The normalized block of these rows (positions, ascending), as if only they had been normalized with
        the pairing the whole block had: a paired return whose entry is left out keeps the entry's args."""
        out = NormBlock.__new__(NormBlock)
        out.block, out.norm, out.groups = self.block.select(rows), self.norm, self.groups
        for name in ("kind", "op", "dev", "counted_only", "role", "paired", "latency", "entry_ts", "group_of",
                     "placed"):  # fmt: skip
            setattr(out, name, getattr(self, name)[rows])
        new_at: np.ndarray = np.full(len(self), -1, dtype=np.int64)
        new_at[rows] = np.arange(len(rows))
        out.shaped = {int(new_at[r]): ev for r, ev in self.shaped.items() if new_at[r] >= 0}
        out.entry_args = {int(new_at[r]): args for r, args in self.entry_args.items() if new_at[r] >= 0}
        entry = self.entry_pos[rows]
        out.entry_pos = np.where(entry >= 0, new_at[np.maximum(entry, 0)], -1)
        for k in np.flatnonzero((entry >= 0) & (out.entry_pos < 0)).tolist():  # the entry was left out
            out.entry_args[k] = self.event(int(entry[k])).args
        return out

    def place(self, rows: np.ndarray, devs: np.ndarray) -> None:
        """Give these rows (events without a device) these devices: the scope's (an NPU interrupt's device)."""
        self.dev[rows] = devs
        self.placed[rows] = True
        for r, dev in zip(rows.tolist(), devs.tolist()):
            if r in self.shaped:
                self.shaped[r] = self.shaped[r]._replace(dev=int(dev))

    # ---- the event of a row -------------------------------------------------------------------------------
    def event(self, i: int) -> NpuEvent:
        """Row i as an event (pairing applied)."""
        shaped = self.shaped.get(i)
        if shaped is not None:
            return shaped  # objects and rows shaped alone (their pairing was applied when it happened)
        if self.counted_only[i]:  # a format without a rule: its "log" event, for views
            return self.norm.normalizer.shape(self.block.item(i))[0]
        ev = self._planned_event(i)
        if self.paired[i]:
            return ev._replace(dev=self._entry_dev(i), args=self._merged_args(i, ev.args))
        if self.placed[i]:
            return ev._replace(dev=self._entry_dev(i))
        return ev

    def _planned_event(self, i: int) -> NpuEvent:
        group = self.groups[int(self.group_of[i])]
        block = self.block
        pid, values = group.table.row_values(int(block.ref[i]))
        trace = TraceEvent(int(block.ts[i]), int(block.cpu[i]), pid, group.table.plan.fmt, values)
        return self.norm.normalizer.planned_shape(trace, group.plan)

    def _entry_dev(self, i: int) -> Optional[int]:
        dev = int(self.dev[i])
        return None if dev < 0 else dev

    def _merged_args(self, i: int, ret_args: Dict[str, Any]) -> Dict[str, Any]:
        pos = int(self.entry_pos[i])
        entry = self.event(pos).args if pos >= 0 else self.entry_args[i]
        return {**entry, **ret_args, "latency_ns": int(self.latency[i]), "entry_ts_ns": int(self.entry_ts[i])}

    # ---- one argument of many rows ---------------------------------------------------------------------------
    def pairing_args(self, rows: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(latency_ns, entry_ts_ns, present) of rows whose only latency is the pairing's (planned formats that
        carry neither argument themselves): the common case of int_args for those two, at one gather each.
        None when some row is an object, shaped alone, or of a format that carries one of them."""
        groups = self.group_of[rows]
        if not len(rows):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool)
        if groups.min() < 0 or self.carrying_latency()[groups].any():
            return None
        return self.latency[rows], self.entry_ts[rows], self.paired[rows]

    def latency_is_pairing(self, mask: np.ndarray) -> bool:
        """pairing_args' case told over a mask of the block's rows (no gather): each row of a planned format,
        none of which carries latency_ns or entry_ts_ns itself."""
        if (mask & (self.group_of < 0)).any():
            return False
        carrying = self.carrying_latency()
        return not carrying.any() or not (mask & carrying[self.group_of]).any()

    def carrying_latency(self) -> np.ndarray:
        """Whether each group's format carries latency_ns or entry_ts_ns itself (BPF's measured calls), by
        group number, then False for -1 (no group)."""
        return np.array([*(any(name in g.arg_at or name in g.const for name in ("latency_ns", "entry_ts_ns"))
                           for g in self.groups), False], dtype=bool)  # fmt: skip

    def int_args(self, rows: np.ndarray, name: str) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """Argument `name` of each of `rows` as arrays (values, present), or None when one of them is not an
        integer (then `int_arg` says what it is)."""
        got = self.int_args_of(rows, (name,))
        return None if got is None else got[0]

    def int_args_of(self, rows: np.ndarray, names: Sequence[str]) -> Optional[List[Tuple[np.ndarray, np.ndarray]]]:
        """int_args of each of `names`, the rows split by their group once; None when one of them is None."""
        out: List[Tuple[np.ndarray, np.ndarray]] = [
            (np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=bool)) for _ in names
        ]
        if not len(rows):
            return out
        for g, sel in _split_by(self.group_of[rows]):
            members = rows[sel]
            for name, (values, present) in zip(names, out):
                got = self._group_args(g, members, name)
                if got is None:
                    return None
                values[sel], present[sel] = got
        return out

    def _group_args(self, g: int, rows: np.ndarray, name: str) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        if g < 0:  # objects and rows shaped alone: one by one
            each = [self.event(int(r)).args.get(name, MISSING) for r in rows.tolist()]
            if any(v is not MISSING and not _is_int64(v) for v in each):
                return None
            present = np.array([v is not MISSING for v in each], dtype=bool)
            return np.array([v if v is not MISSING else 0 for v in each], dtype=np.int64), present
        values, present = self._own_args(self.groups[g], rows, name)
        paired = self.paired[rows]
        if not paired.any() or values is None:
            return None if values is None else (values, present)
        if name in ("latency_ns", "entry_ts_ns"):  # added last by the pairing: they win
            col = self.latency if name == "latency_ns" else self.entry_ts
            values[paired], present[paired] = col[rows[paired]], True
            return values, present
        need = np.flatnonzero(paired & ~present)  # the return's own args win
        inside = need[self.entry_pos[rows[need]] >= 0]
        for k in need[self.entry_pos[rows[need]] < 0].tolist():
            v = self.entry_args[int(rows[k])].get(name, MISSING)
            if v is not MISSING:
                if not _is_int64(v):
                    return None
                values[k], present[k] = v, True
        if len(inside):
            got = self.int_args(self.entry_pos[rows[inside]], name)
            if got is None:
                return None
            values[inside], present[inside] = got
        return values, present

    def _own_args(self, group: _Group, rows: np.ndarray, name: str) -> Tuple[Optional[np.ndarray], np.ndarray]:
        n = len(rows)
        if name in group.const:
            v = group.const[name]
            if not _is_int64(v):
                return None, np.zeros(n, dtype=bool)
            return np.full(n, v, dtype=np.int64), np.ones(n, dtype=bool)
        at = group.arg_at.get(name)
        if at is None:
            return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        field = group.fields[at]
        if field.kind != "int" or field.name not in group.table.plan.fields:
            return None, np.zeros(n, dtype=bool)
        col = group.table.cols[field.name][self.block.ref[rows]]
        if col.dtype.kind == "u" and col.dtype.itemsize == 8 and len(col) and int(col.max()) >= 1 << 63:
            return None, np.zeros(n, dtype=bool)  # beyond int64: the lists say it
        return col.astype(np.int64), np.ones(n, dtype=bool)

    def int_arg(self, rows: np.ndarray, name: str) -> List[Any]:
        """Argument `name` of each of `rows` as the row's event's args has it (MISSING when absent)."""
        out: List[Any] = [MISSING] * len(rows)
        if not len(rows):
            return out
        at = {int(r): k for k, r in enumerate(rows.tolist())}
        for g, members in self._by_group(rows):
            values = self._group_arg(g, members, name)
            for r, v in zip(members.tolist(), values):
                out[at[r]] = v
        return out

    def _by_group(self, rows: np.ndarray) -> List[Tuple[int, np.ndarray]]:
        return [(g, rows[sel]) for g, sel in _split_by(self.group_of[rows])]

    def _group_arg(self, g: int, rows: np.ndarray, name: str) -> List[Any]:
        if g < 0:  # shaped rows
            return [self.event(int(r)).args.get(name, MISSING) for r in rows.tolist()]
        out = self._own_arg(self.groups[g], rows, name)
        paired = self.paired[rows]
        if not paired.any():
            return out
        if name in ("latency_ns", "entry_ts_ns"):  # added last by the pairing: they win
            col = self.latency if name == "latency_ns" else self.entry_ts
            for k in np.flatnonzero(paired).tolist():
                out[k] = int(col[rows[k]])
            return out
        need = [k for k in np.flatnonzero(paired).tolist() if out[k] is MISSING]  # the return's own args win
        inside = [k for k in need if self.entry_pos[rows[k]] >= 0]
        for k in need:
            if self.entry_pos[rows[k]] < 0:
                out[k] = self.entry_args[int(rows[k])].get(name, MISSING)
        if inside:
            for k, v in zip(inside, self.int_arg(self.entry_pos[rows[inside]], name)):
                out[k] = v
        return out

    def _own_arg(self, group: _Group, rows: np.ndarray, name: str) -> List[Any]:
        if name in group.const:
            return [group.const[name]] * len(rows)
        at = group.arg_at.get(name)
        if at is None:
            return [MISSING] * len(rows)
        field = group.fields[at]
        if field.name in group.table.plan.fields and group.table.plan.fmt.fields[at].kind == "int":
            values: List[Any] = group.table.cols[field.name][self.block.ref[rows]].tolist()
            return values
        return [self.event(int(r)).args.get(name, MISSING) for r in rows.tolist()]  # a string field: decoded


class BlockNormalizer:
    """Normalizes blocks with the rules, pairing state and counters of `normalizer` (shared with it)."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.normalizer = normalizer
        self.ops: List[str] = []
        self._op_code: Dict[str, int] = {}

    def op_code(self, op: str) -> int:
        code = self._op_code.get(op)
        if code is None:
            code = self._op_code[op] = len(self.ops)
            self.ops.append(op)
        return code

    def events(self, items: Sequence[Any]) -> List[NpuEvent]:
        """Items that come as objects (TraceEvents decoded elsewhere, Losses, NpuEvents) as their events, in
        order, paired with the calls before them (a channel's decoded records: BPF's)."""
        nb = self.normalize(objects_block(items))
        return [nb.event(i) for i in range(len(nb))]

    def normalize(self, block: Block) -> NormBlock:
        nb = NormBlock(self, block)
        for etype, rows in block.groups if block.groups is not None else _split_by(block.etype):
            if etype == OBJECT:
                self._objects(nb, rows)
            else:
                self._format(nb, rows, int(etype))
        self._pair(nb)
        return nb

    # ---- per format ---------------------------------------------------------------------------------------
    def _format(self, nb: NormBlock, rows: np.ndarray, etype: int) -> None:
        table = nb.block.tables[etype]
        if table.plan is None:  # an event no format describes (raw rows): a "log" event of its bytes
            for r in rows.tolist():
                raw = nb.block.item(r)
                self._put(nb, r, NpuEvent(raw.ts_ns, "log", None, f"unknown:{raw.id}", raw.pid, raw.cpu,
                                          {"raw": raw.payload.hex()}))  # fmt: skip
            return
        name, rules, plan = self.normalizer.format_info(table.plan.fmt)
        if not rules:
            nb.kind[rows] = LOG
            nb.op[rows] = self.op_code(name)
            nb.counted_only[rows] = True
            return
        if plan is None:
            self._shape_rows(nb, rows)
            return
        nb.group_of[rows] = len(nb.groups)
        nb.groups.append(_Group(rows, table, plan))
        self._planned(nb, rows, table, plan)

    def _planned(self, nb: NormBlock, rows: np.ndarray, table: Any, plan: Any) -> None:
        kind, op, dev_at, _, _, pair, kind_if = plan
        kinds: np.ndarray = np.full(len(rows), KIND_CODE[kind], dtype=np.int8)
        undecided: np.ndarray = np.ones(len(rows), dtype=bool)
        fields = table.plan.fmt.fields
        for at, cmp, value, other in kind_if:
            if fields[at].kind != "int" or fields[at].name not in table.plan.fields:
                continue  # a string, array or struct field (a damaged or unusual format): never holds
            col = table.cols[fields[at].name]
            hit = undecided & np.asarray(cmp(col, value), dtype=bool)
            kinds[hit] = KIND_CODE[other]
            undecided &= ~hit
        nb.kind[rows] = kinds
        nb.op[rows] = self.op_code(op)
        if dev_at >= 0 and fields[dev_at].kind == "int" and fields[dev_at].name in table.plan.fields:
            nb.dev[rows] = table.cols[fields[dev_at].name].astype(np.int64)
        nb.role[rows] = _ROLE[pair]

    def _shape_rows(self, nb: NormBlock, rows: np.ndarray) -> None:
        block = nb.block
        for r in rows.tolist():
            shaped, pair = self.normalizer.shape(block.item(r))
            self._put(nb, r, shaped)
            nb.role[r] = _ROLE[pair]

    def _objects(self, nb: NormBlock, rows: np.ndarray) -> None:
        """The items that came as objects: the channels' NpuEvents as they are, losses as "lost" events, and
        the TraceEvents BPF decoded itself, shaped by their rules and paired like the trace's records."""
        block = nb.block
        for r in rows.tolist():
            item = block.objects[int(block.ref[r])]
            if isinstance(item, TraceEvent):
                name, rules, _ = self.normalizer.format_info(item.fmt)
                if not rules:  # counted as "log", never built (as the formats without a rule are)
                    nb.kind[r], nb.op[r], nb.counted_only[r] = LOG, self.op_code(name), True
                    continue
                shaped, pair = self.normalizer.shape(item)
                self._put(nb, r, shaped)
                nb.role[r] = _ROLE[pair]
            else:
                self._put(nb, r, lost_event(item) if isinstance(item, Loss) else item)

    def _put(self, nb: NormBlock, r: int, ev: NpuEvent) -> None:
        nb.shaped[r] = ev
        nb.kind[r] = KIND_CODE[ev.kind]
        nb.op[r] = self.op_code(ev.op)
        nb.dev[r] = -1 if ev.dev is None else ev.dev

    # ---- call pairing: the pairing's stacks, in time order ---------------------------------------------------
    def _pair(self, nb: NormBlock) -> None:
        rows = np.flatnonzero(nb.role)
        if not len(rows):
            return
        if not self._pair_alternating(nb, rows):
            self._pair_one_by_one(nb, rows)

    def _pair_one_by_one(self, nb: NormBlock, rows: np.ndarray) -> None:
        """Pairing entry by entry (nested calls of one op on one thread, huge backlogs)."""
        pairing, block, ops = self.normalizer.pairing, nb.block, self.ops
        keys = zip(block.pid[rows].tolist(), nb.op[rows].tolist(), nb.role[rows].tolist(), rows.tolist())
        stamps, devs = block.ts.tolist(), nb.dev.tolist()
        pushed = set()
        for pid, op, role, r in keys:
            key = (pid, ops[op])
            if role == _ENTRY:
                ref: Any = _Ref(r)  # the args, still in the block's columns
                pairing.push(key, (stamps[r], None if devs[r] < 0 else devs[r], ref))
                pushed.add(key)
            else:
                self._return(nb, r, key, pairing.take(key))
        self._materialize_pending(nb, pushed)

    def _pair_alternating(self, nb: NormBlock, rows: np.ndarray) -> bool:
        """The common case at once: no (pid, op) nests calls, so a return pairs with the entry just before it of
        its (pid, op), in the block or pending from before; False (nothing done) when that does not hold, or
        when the pending entries could reach the pairing's bound (its evictions are then replayed exactly)."""
        block = nb.block
        is_entry = nb.role[rows] == _ENTRY
        if self.normalizer.pairing.count + int(is_entry.sum()) >= MAX_PENDING:
            return False
        pid, op = block.pid[rows].astype(np.int64), nb.op[rows].astype(np.int64)
        prev, last = previous_of((pid - pid.min()) * (int(op.max()) + 1) + op)  # (pid, op) as one number
        inner = prev >= 0  # a row after another of its (pid, op) in the block
        after_entry: np.ndarray = np.zeros(len(rows), dtype=bool)
        after_entry[inner] = is_entry[prev[inner]]
        if (is_entry & after_entry).any():
            return False  # nested calls
        firsts = np.flatnonzero(~inner)
        carried = self._carried(nb, rows[firsts])
        if carried is None:
            return False
        if (is_entry[firsts] & carried).any():
            return False  # an entry on top of a pending one: nested
        after_entry[firsts] = carried
        self._apply_pairs(nb, rows, prev, is_entry, after_entry)
        self._settle_pending(nb, rows, is_entry, last)
        return True

    def _carried(self, nb: NormBlock, first_rows: np.ndarray) -> Optional[np.ndarray]:
        """For each (pid, op) of the block (by its first row): has it a pending entry (None: one is nested)."""
        pairing, ops, block = self.normalizer.pairing, self.ops, nb.block
        out: np.ndarray = np.zeros(len(first_rows), dtype=bool)
        for i, r in enumerate(first_rows.tolist()):
            depth = pairing.depth((int(block.pid[r]), ops[int(nb.op[r])]))
            if depth > 1:
                return None
            out[i] = depth == 1
        return out

    def _apply_pairs(self, nb: NormBlock, rows: np.ndarray, prev: np.ndarray, is_entry: np.ndarray,
                     after_entry: np.ndarray) -> None:  # fmt: skip
        """Each return just after an entry of its (pid, op) paired with it: `prev`, the row before of its (pid,
        op) in the block (-1: the entry, if any, is pending from before the block)."""
        pairing, block = self.normalizer.pairing, nb.block
        returns = ~is_entry
        pairing.stats["unpaired_returns"] += int((returns & ~after_entry).sum())
        matched = np.flatnonzero(returns & after_entry)
        before = prev[matched]
        inside = before >= 0  # the entry is in this block
        ret_rows, entry_rows = rows[matched[inside]], rows[before[inside]]
        nb.paired[ret_rows] = True
        nb.entry_ts[ret_rows] = block.ts[entry_rows]
        nb.latency[ret_rows] = block.ts[ret_rows] - block.ts[entry_rows]
        nb.dev[ret_rows] = nb.dev[entry_rows]
        nb.entry_pos[ret_rows] = entry_rows
        for r in rows[matched[~inside]].tolist():  # the entry was pending from before the block
            key = (int(block.pid[r]), self.ops[int(nb.op[r])])
            self._return(nb, r, key, pairing.take(key))
        if not nb.shaped:
            return
        returned: np.ndarray = np.zeros(len(nb), dtype=bool)
        returned[ret_rows] = True
        for r in sorted(r for r in nb.shaped if returned[r]):  # a row shaped alone gets its merged event now
            dev = None if nb.dev[r] < 0 else int(nb.dev[r])
            nb.shaped[r] = nb.shaped[r]._replace(dev=dev, args=nb._merged_args(r, nb.shaped[r].args))

    def _settle_pending(self, nb: NormBlock, rows: np.ndarray, is_entry: np.ndarray, last: np.ndarray) -> None:
        """The stacks after the block, as pairing one by one leaves them: a (pid, op) whose last row is an entry
        has that entry pending (placed where its push put it: after the others, in row order), the others none."""
        pairing, block = self.normalizer.pairing, nb.block
        ends = np.flatnonzero(last)
        opened = []
        for i in ends.tolist():
            r = int(rows[i])
            key = (int(block.pid[r]), self.ops[int(nb.op[r])])
            pairing.settle(key, None)
            if is_entry[i]:
                dev = None if nb.dev[r] < 0 else int(nb.dev[r])
                opened.append((r, key, (int(block.ts[r]), dev, nb.event(r).args)))
        for _, key, entry in opened:  # in row order (the rows ascend)
            pairing.settle(key, entry)

    def _return(self, nb: NormBlock, r: int, key: Tuple[int, str], entry: Any) -> None:
        shaped = nb.shaped.get(r)
        if entry is None:
            return  # unpaired: the return keeps its own (absent) device and its own args
        entry_ts, dev, args = entry
        latency = int(nb.block.ts[r]) - entry_ts
        if shaped is not None:  # a row shaped alone: its event gets the pairing now
            entry_args = nb.event(args.pos).args if isinstance(args, _Ref) else args
            merged = {**entry_args, **shaped.args, "latency_ns": latency, "entry_ts_ns": entry_ts}
            nb.shaped[r] = shaped._replace(dev=dev, args=merged)
        nb.paired[r] = True
        nb.latency[r], nb.entry_ts[r] = latency, entry_ts
        nb.dev[r] = -1 if dev is None else dev
        if isinstance(args, _Ref):
            nb.entry_pos[r] = args.pos
        else:
            nb.entry_args[r] = args

    def _materialize_pending(self, nb: NormBlock, keys: Any) -> None:
        """Entries of this block still pending get their arguments as dicts: the stacks outlive the block."""

        def args_of(args: Any) -> Any:
            return nb.event(args.pos).args if isinstance(args, _Ref) else args

        for key in keys:
            self.normalizer.pairing.resolve(key, args_of)


def _split_by(groups: np.ndarray) -> List[Tuple[int, np.ndarray]]:
    """(group, the positions of its members in order) for each group of a column of small group numbers."""
    if not len(groups):
        return []
    first = groups[0]
    if (groups == first).all():
        return [(int(first), np.arange(len(groups)))]
    order = stable_order(groups)
    ordered = groups[order]
    bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
    return [(int(ordered[a]), order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _is_int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63)


def kind_counts(nb: NormBlock) -> Dict[str, int]:
    """Events by kind as check counts them (rows of formats without a rule as "log")."""
    counts = np.bincount(nb.kind.astype(np.int64), minlength=len(KINDS))
    return {KINDS[i]: int(n) for i, n in enumerate(counts.tolist()) if n}


def time_span(nb: NormBlock) -> Optional[Tuple[int, int]]:
    """(first, last) stamp of the events check counts in time (not rows without a rule, not untimed losses)."""
    timed = ~nb.counted_only & ((nb.kind != LOST) | (nb.block.ts != 0))
    if not timed.any():
        return None
    stamps = nb.block.ts[timed]
    low, high = int(stamps.min()), int(stamps.max())
    if high == I64_MAX:  # an object stamped past the column's range keeps its exact stamp
        high = max([high, *(int(nb.block.item(r).ts_ns) for r in np.flatnonzero(timed & (nb.block.ts == high)))])
    return low, high


def rows_of(nb: NormBlock, kinds: Sequence[str]) -> np.ndarray:
    return np.flatnonzero(kind_in(nb.kind, [KIND_CODE[k] for k in kinds]))


def kind_in(kind: np.ndarray, codes: Iterable[int]) -> np.ndarray:
    """Which rows have one of the few kind codes (one comparison per code: several times np.isin's speed)."""
    mask: np.ndarray = np.zeros(len(kind), dtype=bool)
    for code in codes:
        mask |= kind == code
    return mask
