"""A recording's analysed events as an exported timeline: which track, slice, instant or counter each becomes.

`TimelineMapper` is pure (no I/O, no clock): it is handed, in time order, what the replay pipeline and the
`Analysis` of `check` made of a recording (npu_trace.export.run drives it) and calls a `TraceWriter`:
- `event(ev)`: each normalized event (NpuEvent) as the detectors saw it;
- `task(complete, submitted_ns)`: a task the latency detector paired (its completion, its submit's time);
  `unmatched_complete(ev)` for a completion it could not pair;
- `memory(ts, dev, pid, delta)`: the memory detector's changes of live bytes;
- `findings(found)`, `transitions(changes)`: the detectors' findings, the device-state detector's transitions;
- `finish(end_ns, ...)`: the calls still in flight, the reset sequences still open, then every track is closed.

Layout (Perfetto's track tree; Chrome JSON flattens it, see chrome_json):

    npu-trace             the tracer: "recording" (what was recorded, on which host and clock), "loss"
                          instants and the "events lost" counter, "markers", findings and events of no device
    NPU <d>               one group per device, in device order
      state               ok / degraded / resetting / offline as slices (the device-state detector)
      reset               each reset sequence as a slice, one nested slice per step (the reset detector), a
                          flow from the timeout that triggered it
      findings            every finding of the device as an instant with its details
      events              timeouts (heartbeat lost among them), allocation failures, ECC reports, link and
                          thermal readings, reset steps as each channel told them
      kernel log          the driver's kernel log lines
      calls, calls (2)..  driver calls as slices named by their operation, with their arguments
      stream <s> [(2)..]  tasks, submit -> completion, as "task" slices, a flow from the submitting call
      interrupts          one track per interrupt line: handler entry -> exit as slices
      memory              "live bytes" and one counter per process, "allocations" as instants
      health              temperature, ECC counts, PCIe link width and speed (counters)

Tracks are made when first asked for and described to the writer right before their first event (the writer
the export gives is an `Emitter`: npu_trace.export.emit). The export draws a block's hot kinds as columns
(npu_trace.export.drawing), keeping this mapper's state (its lanes, handlers, names, live memory, counts) and
calling it for everything else: the calls it makes are the calls drawing every row one by one makes.

A slice is given to the writer whole (its begin, then its end) once its end is known: a call at its return,
a task at its completion, a handler at its exit. `LanePacker` puts it on the first lane of its group where it
nests properly with what is there, so that overlapping calls land on separate tracks. The window (`lo`, `hi`,
ns on the trace clock) cuts what is shown, never what is analysed: the state before it (live memory, the
device's state, handlers entered) is carried into it, and slices that cross its edges are cut there
(`clipped`).
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)  # fmt: skip

from npu_trace.events import NpuEvent
from npu_trace.export.lanes import Lane, LanePacker  # noqa: F401  (Lane: named here by the tests, as before)
from npu_trace.export.tracks import (
    COUNTER,
    GROUP,
    INSTANTS,
    SLICES,
    TraceWriter,
    Track,
    counter_value,
    flow_id,
    track_uuid,
)  # fmt: skip

if TYPE_CHECKING:
    from npu_trace.detectors.base import Finding
    from npu_trace.detectors.reset import OpenSequence
    from npu_trace.detectors.states import Transition

CALL_KINDS = frozenset(("call", "submit", "free", "timeout"))  # a return paired with its entry carries latency_ns
MAX_OPEN_IRQS = 16  # handler entries of one interrupt line waiting for their exit
_HIDDEN_ARGS = ("latency_ns", "entry_ts_ns", "duration_ns", "edge")
_HEALTH = (("temp_c", "temperature", "°C"), ("hbm_temp_c", "HBM temperature", "°C"),
           ("ce_count", "ECC correctable", "count"), ("uce_count", "ECC uncorrectable", "count"),
           ("width", "PCIe link width", "lanes"))  # fmt: skip
# where a device's tracks sit among its children
RANK_BOUND = (1 << 31) - 1  # a track's rank among its siblings, as Perfetto holds it
RANK = {"state": 0, "reset": 1, "findings": 2, "events": 3, "kernel log": 4, "calls": 10, "stream": 100,
        "interrupts": 10_000, "memory": 10_001, "health": 10_002}  # fmt: skip
CommOf = Callable[[int], str]
COUNTS = ("calls", "tasks", "irqs", "unreturned_calls", "unmatched_completes", "irq_exits_without_entry",
          "irq_entries_without_exit", "irqs_open_at_end", "resets", "findings")  # what finish() tells
_MIN, _MAX = -(1 << 63), (1 << 63) - 1


def lane_name(name: str, lane: int) -> str:
    return name if lane == 0 else f"{name} ({lane + 1})"


class TimelineMapper:
    """See the module docstring. `lo`/`hi`: the window (None: open); `devices`: the devices shown (None: all;
    then events naming no device are left out too, except losses and markers); `info`: the recording's
    description for the "recording" instant."""

    def __init__(self, writer: TraceWriter, comm_of: CommOf, lo: Optional[int] = None, hi: Optional[int] = None,
                 devices: Optional[FrozenSet[int]] = None,
                 info: Optional[Mapping[str, Any]] = None) -> None:  # fmt: skip
        self.w: TraceWriter = writer  # an Emitter (or what captures an Emitter's calls): tracks described lazily
        self.comm_of = comm_of
        self.lo = _MIN if lo is None else lo
        self.hi = _MAX if hi is None else hi
        self.devices = devices
        self.info = dict(info or {})
        self.opened = False  # the window has begun: what is seen from now on is shown
        self.last_ts = 0  # the latest stamp seen (an untimed loss is shown there)
        self.tracks: Dict[Tuple[Any, ...], Track] = {}
        self.by_uuid: Dict[int, Track] = {}  # every track made, by its uuid (the writer's Emitter reads it)
        self.packers: Dict[Tuple[Any, ...], LanePacker] = {}
        self.irq_open: Dict[Tuple[Optional[int], Any], List[Tuple[int, Dict[str, Any]]]] = {}
        self.irq_names: Dict[Tuple[Optional[int], Any], str] = {}
        self.dev_live: Dict[int, int] = {}
        self.pid_live: Dict[Tuple[int, int], int] = {}
        self.mem_carried: Set[int] = set()  # devices whose live memory at the window's start was drawn
        self.mem_tracks: Dict[Tuple[int, int], Tuple[str, Track, Track]] = {}  # (dev, pid) -> comm, its counters
        self.first_seen: Dict[int, int] = {}  # device -> its first event (its state is "ok" from there)
        self.states: Dict[int, Tuple[str, int, str]] = {}  # device -> (state, since, why)
        self.lost = 0
        self.counts: Dict[str, int] = dict.fromkeys(COUNTS, 0)
        self._tracer()

    # ---- inputs --------------------------------------------------------------------------------------------
    def event(self, ev: NpuEvent) -> None:
        """One normalized event (entries of paired calls and completions are not shown this way: a call shows
        at its return, a task through task())."""
        ts, dev = ev.ts_ns, ev.dev
        if ts > self.last_ts and ev.kind != "lost":
            self.last_ts = ts
        if dev is not None:
            if self.devices is not None and dev not in self.devices:
                return
            if dev not in self.first_seen:
                self.first_seen[dev] = ts
        elif self.devices is not None and ev.kind not in ("lost", "marker"):
            return
        kind = ev.kind
        if kind == "irq":
            self._irq(ev)
        elif kind in CALL_KINDS and _is_int(ev.args.get("latency_ns")):
            self._call(ev)
            if kind == "timeout":
                self._rare(ev)
        elif kind == "call" or kind == "free" or kind == "complete":
            return  # an entry waiting for its return, or a return without one: not a slice
        elif kind == "submit":
            self._submit(ev)
        elif kind == "alloc":
            self._alloc(ev)
        elif kind == "lost":
            self._lost(ev)
        elif kind == "marker":
            self._marker(ev)
        else:
            self._rare(ev)

    def task(self, complete: NpuEvent, submitted: int) -> None:
        dev, stream = complete.dev, complete.args.get("stream")
        if not self._wanted(dev):
            return
        span = self._span(submitted, complete.ts_ns)
        if span is None:
            return
        track = self._packer(("stream", dev, stream), lambda lane: self._stream_track(dev, stream, lane)).place(*span)
        args = self._plain_args(complete, span != (submitted, complete.ts_ns))
        args["submit_ts_ns"] = submitted
        flows = [_task_flow(dev, stream, complete.args.get("task"), submitted)]
        self._slice(track, span, "task", args, flow_in=flows)
        self.counts["tasks"] += 1

    def unmatched_complete(self, ev: NpuEvent) -> None:
        if not self._wanted(ev.dev):
            return
        self.counts["unmatched_completes"] += 1
        if self._inside(ev.ts_ns):
            track = self._stream_first(ev.dev, ev.args.get("stream"))
            self._instant(track, ev.ts_ns, "completion without submit", self._plain_args(ev))

    def memory(self, ts: Sequence[int], dev: Sequence[int], pid: Sequence[int], delta: Sequence[int]) -> None:
        """The memory detector's changes, in order (device -1: none). A device's counters start where the
        window does, at the bytes live then (`_carry_memory`), drawn before its first change inside it."""
        for t, d, p, n in zip(ts, dev, pid, delta):
            if d >= 0 and self.lo <= t < self.hi and d not in self.mem_carried and self._wanted(d):
                self._carry_memory(d)
            live = self.dev_live[d] = self.dev_live.get(d, 0) + n
            mine = self.pid_live[(d, p)] = self.pid_live.get((d, p), 0) + n
            if d < 0 or not self._wanted(d) or not self._inside(t):
                continue
            comm = self.comm_of(p)
            kept = self.mem_tracks.get((d, p))
            if kept is None or kept[0] != comm:  # its tracks found (made when new) in the order they are drawn
                self.w.counter(self._live_track(d), t, live)
                self.w.counter(self._process_track(d, p), t, mine)
                self.mem_tracks[(d, p)] = (comm, self._live_track(d), self._process_track(d, p))
            else:
                self.w.counter(kept[1], t, live)
                self.w.counter(kept[2], t, mine)

    def _carry_memory(self, dev: int) -> None:
        """The device's live bytes (and its processes') when the window opens, drawn at its start (nothing:
        no window start, or nothing live)."""
        self.mem_carried.add(dev)
        if self.lo == _MIN or not self.dev_live.get(dev):
            return
        self._inside(self.lo)
        self.w.counter(self._live_track(dev), self.lo, self.dev_live[dev])
        for (d, pid), live in sorted(self.pid_live.items()):
            if d == dev and live:
                self.w.counter(self._process_track(dev, pid), self.lo, live)

    def findings(self, found: Iterable[Finding]) -> None:
        for f in found:
            if not self._wanted(f.device) and f.kind not in ("loss", "truncated"):
                continue
            if f.kind == "reset_sequence" and f.device is not None:
                self._reset(f)
            if self._inside(f.ts_ns):
                track = self._findings_track(f.device)
                self._instant(track, f.ts_ns, f"{f.kind} {f.op}" if f.op else f.kind, f.details)
                self.counts["findings"] += 1

    def transitions(self, changes: Iterable[Transition]) -> None:
        for t in changes:
            if not self._wanted(t.dev):
                continue
            self._state_until(t.dev, t.ts_ns)
            self.states[t.dev] = (t.state, t.ts_ns, t.why)

    def finish(self, end: int, pending: Iterable[Tuple[int, str, int, Optional[int], Dict[str, Any]]] = (),
               open_resets: Iterable[OpenSequence] = ()) -> Dict[str, int]:  # fmt: skip
        """The export's end (`end`: the last event shown, or the window's end): calls still in flight (the
        normalizer's pending entries: pid, op, entry time, device, args), handlers entered and not exited, reset
        sequences still open and each device's state are drawn up to it. Returns the mapper's counts."""
        end = min(end, self.hi)
        for pid, op, entry_ts, dev, args in sorted(pending, key=lambda p: p[2]):
            self._unreturned(pid, op, entry_ts, dev, args, end)
        for key, stack in sorted(self.irq_open.items(), key=lambda kv: repr(kv[0])):
            for entry_ts, args in stack:
                self._handler(key, entry_ts, end, {**args, "exit": "not seen"})
                self.counts["irqs_open_at_end"] += 1
        self.irq_open.clear()
        for seq in open_resets:
            if self._wanted(seq.dev):
                self._open_reset(seq, end)
        for dev in sorted(set(self.first_seen) | set(self.states)):
            self._state_until(dev, end)
        for dev in sorted(set(self.dev_live) - self.mem_carried):
            if dev >= 0 and self._wanted(dev) and self.opened:
                self._carry_memory(dev)  # memory live all through the window, never changed in it
        return dict(self.counts)

    # ---- calls, tasks, interrupts ----------------------------------------------------------------------------
    def _call(self, ev: NpuEvent) -> None:
        end = ev.ts_ns
        entry: Any = ev.args.get("entry_ts_ns")
        begin = int(entry) if _is_int(entry) else end - int(ev.args["latency_ns"])
        span = self._span(begin, end)
        if span is None:
            return
        dev = ev.dev
        packer = self.packers.get(("calls", dev))
        if packer is None:
            packer = self._packer(("calls", dev), lambda lane: self._calls_track(dev, lane))
        track = packer.place(span[0], span[1])
        flows: Tuple[int, ...] = ()
        if ev.kind == "submit" and "stream" in ev.args:
            flows = (_task_flow(dev, ev.args["stream"], ev.args.get("task"), end),)
        self._slice(track, span, ev.op, self._plain_args(ev, span != (begin, end)), flow_out=flows)
        self.counts["calls"] += 1

    def _unreturned(self, pid: int, op: str, entry_ts: int, dev: Optional[int], args: Dict[str, Any], end: int) -> None:
        if not self._wanted(dev):
            return
        span = self._span(entry_ts, max(end, entry_ts))
        if span is None:
            return
        track = self._packer(("calls", dev), lambda lane: self._calls_track(dev, lane)).place(*span)
        shown = {**args, "pid": pid, "comm": self.comm_of(pid), "returned": False, "clipped": span[0] != entry_ts}
        self._slice(track, span, op, shown)
        self.counts["unreturned_calls"] += 1

    def _submit(self, ev: NpuEvent) -> None:
        """A submit the trace saw without its call (the driver's sqe tracepoint): an instant on its stream."""
        if not self._inside(ev.ts_ns):
            return
        stream = ev.args.get("stream")
        flows = (_task_flow(ev.dev, stream, ev.args.get("task"), ev.ts_ns),)
        self._instant(self._stream_first(ev.dev, stream), ev.ts_ns, f"submit {ev.op}", self._plain_args(ev), flows)

    def _irq(self, ev: NpuEvent) -> None:
        args, key = ev.args, (ev.dev, _hashable(ev.args.get("irq")))
        edge = args.get("edge")
        if isinstance(args.get("name"), str):
            self.irq_names.setdefault(key, args["name"])
        if edge == "entry":
            stack = self.irq_open.setdefault(key, [])
            if len(stack) >= MAX_OPEN_IRQS:
                entry_ts, entry_args = stack.pop(0)
                self.counts["irq_entries_without_exit"] += 1
                if self._inside(entry_ts):
                    self._instant(self._irq_first(key), entry_ts, "entry without exit", entry_args)
            stack.append((ev.ts_ns, self._plain_args(ev)))
        elif edge == "exit":
            stack = self.irq_open.get(key, [])
            if not stack:
                self.counts["irq_exits_without_entry"] += 1
                if self._inside(ev.ts_ns):
                    self._instant(self._irq_first(key), ev.ts_ns, "exit without entry", self._plain_args(ev))
                return
            entry_ts, entry_args = stack.pop()
            self._handler(key, entry_ts, ev.ts_ns, {**entry_args, **self._plain_args(ev), "cpu_exit": ev.cpu})
        elif _is_int(args.get("entry_ts_ns")) and _is_int(args.get("duration_ns")):  # timed in the kernel (BPF)
            begin = int(args["entry_ts_ns"])
            self._handler(key, begin, begin + int(args["duration_ns"]), self._plain_args(ev))
        elif self._inside(ev.ts_ns):
            self._instant(self._irq_first(key), ev.ts_ns, str(args.get("name", "irq")), self._plain_args(ev))

    def _handler(self, key: Tuple[Optional[int], Any], begin: int, end: int, args: Dict[str, Any]) -> None:
        span = self._span(begin, end)
        if span is None:
            return
        track = self._packer(("irq", *key), lambda lane: self._irq_track(key, lane)).place(*span)
        if span != (begin, end):
            args = {**args, "clipped": True}
        self._slice(track, span, self.irq_names.get(key, "irq"), args)
        self.counts["irqs"] += 1

    # ---- resets and states -------------------------------------------------------------------------------------
    def _reset(self, f: Finding) -> None:
        d = f.details
        steps = [(str(s["step"]), int(s["ts_ns"]), {k: v for k, v in s.items() if k not in ("step", "ts_ns")})
                 for s in d.get("steps", ())]  # fmt: skip
        if not steps:
            return
        trigger = d.get("trigger")
        flows: Tuple[int, ...] = ()
        if isinstance(trigger, dict) and _is_int(trigger.get("ts_ns")):
            flows = (_trigger_flow(f.device, trigger["ts_ns"], trigger.get("kind"), trigger.get("op")),)
        args = {k: v for k, v in d.items() if k != "steps"}
        self._reset_tree(f.device, f"reset {d.get('status', '')}".strip(), steps, steps[-1][1], args, flows)

    def _open_reset(self, seq: OpenSequence, end: int) -> None:
        steps = [(name, ts, {"ret": ret}) for name, ts, ret in seq.steps]
        if steps:
            args = {"status": "in progress", "precursor": seq.precursor, "trigger": seq.trigger}
            self._reset_tree(seq.dev, "reset in progress", steps, max(end, steps[-1][1]), args, ())

    def _reset_tree(self, dev: Optional[int], name: str, steps: List[Tuple[str, int, Dict[str, Any]]], end: int,
                    args: Dict[str, Any], flows: Sequence[int]) -> None:  # fmt: skip
        """A reset sequence as one slice over its steps, each step a slice nested in it up to the next step."""
        span = self._span(steps[0][1], end)
        if span is None:
            return
        track = self._packer(("reset", dev), lambda lane: self._device_child(dev, "reset", SLICES, lane)).place(*span)
        self.w.begin(track, span[0], name, {**args, "clipped": span != (steps[0][1], end)}, flow_in=flows)
        for i, (step, ts, step_args) in enumerate(steps):
            inner = self._span(ts, steps[i + 1][1] if i + 1 < len(steps) else end)
            if inner is not None:
                self.w.begin(track, inner[0], step, step_args)
                self.w.end(track, inner[1])
        self.w.end(track, span[1])
        self.counts["resets"] += 1

    def _state_until(self, dev: int, ts: int) -> None:
        """The device's current state drawn as a slice from its start up to `ts`."""
        state, since, why = self.states.get(dev, ("ok", self.first_seen.get(dev, ts), ""))
        span = self._span(since, ts)
        if span is not None and span[1] > span[0]:
            track = self._device_child(dev, "state", SLICES)
            self._slice(track, span, state, {"since_ns": since, "why": why, "clipped": span[0] != since})
        self.states[dev] = (state, ts, why)

    # ---- the rest: instants and counters -----------------------------------------------------------------------
    def _rare(self, ev: NpuEvent) -> None:
        """Timeouts, failures, ECC, link and thermal readings, reset steps, kernel log lines: instants on the
        device's "events" (or "kernel log") track, and the readings' counters."""
        if not self._inside(ev.ts_ns):
            return
        dev, kind, args = ev.dev, ev.kind, ev.args
        self._readings(ev)
        if kind == "log":
            self._instant(self._device_child(dev, "kernel log", INSTANTS), ev.ts_ns, ev.op, self._plain_args(ev))
            return
        name = f"reset step {args.get('step', ev.op)}" if kind == "reset_step" else f"{kind} {ev.op}"
        flows = (_trigger_flow(dev, ev.ts_ns, kind, ev.op),) if kind == "timeout" and dev is not None else ()
        self._instant(self._device_child(dev, "events", INSTANTS), ev.ts_ns, name, self._plain_args(ev), flows)

    def _readings(self, ev: NpuEvent) -> None:
        if ev.dev is None or ev.kind not in ("ecc", "thermal", "link"):
            return
        for arg, name, unit in _HEALTH:
            value = counter_value(ev.args.get(arg))
            if value is not None:
                self.w.counter(self._health_track(ev.dev, name, unit), ev.ts_ns, value)
        speed = _gts(ev.args.get("speed")) if ev.kind == "link" else None
        if speed is not None:
            self.w.counter(self._health_track(ev.dev, "PCIe link speed", "GT/s"), ev.ts_ns, speed)

    def _alloc(self, ev: NpuEvent) -> None:
        if ev.dev is not None and self._inside(ev.ts_ns):
            track = self._memory_child(ev.dev, "allocations", INSTANTS, 1)
            self._instant(track, ev.ts_ns, "alloc", self._plain_args(ev))

    def _lost(self, ev: NpuEvent) -> None:
        ts = ev.ts_ns or max(self.last_ts, self.lo)  # an untimed loss: shown where the trace stands
        lost = ev.args.get("lost", 0)
        if ev.op != "page_missed" and _is_int(lost):
            self.lost += int(lost)  # page_missed rows only flag where: the overrun counters count them (LossLedger)
        if not self._inside(ts):
            return
        args = {"source": ev.args.get("source"), "loss_kind": ev.op, "cpu": ev.cpu, "lost": lost,
                "untimed": not ev.ts_ns}  # fmt: skip
        what = f"lost {lost} events" if lost else "lost events (count unknown)"
        self._instant(self._tracer_child("loss", INSTANTS, 1), ts, what, args)
        self.w.counter(self._tracer_child("events lost", COUNTER, 2, "count"), ts, self.lost)

    def _marker(self, ev: NpuEvent) -> None:
        if self._inside(ev.ts_ns):
            text = str(ev.args.get("text", ""))
            track = self._tracer_child("markers", INSTANTS, 3)
            self._instant(track, ev.ts_ns, text[:80] or "marker", self._plain_args(ev))

    # ---- emitting ------------------------------------------------------------------------------------------
    def _slice(self, track: Track, span: Tuple[int, int], name: str, args: Mapping[str, Any],
               flow_out: Sequence[int] = (), flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        self.w.begin(track, span[0], name, args, flow_out, flow_in)
        self.w.end(track, span[1])

    def _instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flows: Sequence[int] = ()) -> None:
        self.w.instant(track, ts, name, args, flows)

    def _plain_args(self, ev: NpuEvent, clipped: bool = False) -> Dict[str, Any]:
        """The event's arguments as shown: its own values, who ran it (pid, task name, CPU)."""
        out = dict(ev.args)
        for k in _HIDDEN_ARGS:
            out.pop(k, None)
        if ev.pid >= 0:
            out["pid"], out["comm"] = ev.pid, self.comm_of(ev.pid)
        if ev.cpu >= 0:
            out["cpu"] = ev.cpu
        if clipped:
            out["clipped"] = True
        return out

    # ---- the window -----------------------------------------------------------------------------------------
    def _inside(self, ts: int) -> bool:
        if not self.lo <= ts < self.hi:
            return False
        if not self.opened:
            self._open(ts)
        return True

    def _span(self, begin: int, end: int) -> Optional[Tuple[int, int]]:
        """[begin, end] cut to the window (None: outside it)."""
        lo, hi = self.lo, self.hi
        if end < lo or begin >= hi or end < begin:
            return None
        span = (begin if begin > lo else lo, end if end < hi else hi)
        if not self.opened:
            self._inside(span[0])
        return span

    def _open(self, ts: int) -> None:
        """The window begins (at its start, or at the first thing shown): the recording is described and the
        loss so far shown there (live memory: _carry_memory)."""
        self.opened = True
        at = ts if self.lo == _MIN else self.lo
        self.w.instant(self._tracer_child("recording", INSTANTS, 0), at, "recording", self.info)
        self.w.counter(self._tracer_child("events lost", COUNTER, 2, "count"), at, self.lost)

    def _wanted(self, dev: Optional[int]) -> bool:
        if self.devices is None:
            return True
        return dev is not None and dev in self.devices

    # ---- tracks ---------------------------------------------------------------------------------------------
    def _track(self, key: Tuple[Any, ...], name: str, kind: str, parent: Optional[Track], rank: int,
               unit: str = "") -> Track:  # fmt: skip
        """The track of `key`, made when new (described to the writer before its first event: `Emitter`)."""
        track = self.tracks.get(key)
        if track is None:
            top = 0 if parent is None else (parent.top or parent.uuid)
            rank = min(max(rank, -RANK_BOUND), RANK_BOUND)  # Perfetto's is int32 (a device 2^32-1, an IRQ 2^30)
            track = Track(track_uuid(*key), name, kind, parent.uuid if parent else 0, rank, unit, top)
            self.tracks[key] = track
            self.by_uuid[track.uuid] = track
        return track

    def _packer(self, key: Tuple[Any, ...], new_track: Callable[[int], Track]) -> LanePacker:
        packer = self.packers.get(key)
        if packer is None:
            packer = self.packers[key] = LanePacker(new_track)
        return packer

    def _tracer(self) -> Track:
        return self._track(("tracer",), "npu-trace", GROUP, None, -1)

    def _tracer_child(self, name: str, kind: str, rank: int, unit: str = "") -> Track:
        return self._track(("tracer", name), name, kind, self._tracer(), rank, unit)

    def _device(self, dev: Optional[int]) -> Track:
        if dev is None:
            return self._tracer()
        return self._track(("device", dev), f"NPU {dev}", GROUP, None, dev)

    def _device_child(self, dev: Optional[int], name: str, kind: str, lane: int = 0) -> Track:
        shown = name if dev is not None or name != "calls" else "calls (no device)"
        return self._track(("device", dev, name, lane), lane_name(shown, lane), kind, self._device(dev),
                           RANK.get(name, 50) + lane)  # fmt: skip

    def _calls_track(self, dev: Optional[int], lane: int) -> Track:
        return self._device_child(dev, "calls", SLICES, lane)

    def _stream_track(self, dev: Optional[int], stream: Any, lane: int) -> Track:
        rank = RANK["stream"] + (int(stream) * 16 if _is_int(stream) and 0 <= stream < 600 else 9_600) + lane
        return self._track(("stream", dev, stream, lane), lane_name(f"stream {stream}", lane), SLICES,
                           self._device(dev), rank)  # fmt: skip

    def _stream_first(self, dev: Optional[int], stream: Any) -> Track:
        stream = _hashable(stream)
        return self._packer(("stream", dev, stream), lambda lane: self._stream_track(dev, stream, lane)).first()

    def _irq_track(self, key: Tuple[Optional[int], Any], lane: int) -> Track:
        dev, irq = key
        group = self._track(("device", dev, "interrupts"), "interrupts", GROUP, self._device(dev), RANK["interrupts"])
        name = f"{self.irq_names.get(key, 'irq')} ({irq})"
        rank = (int(irq) if _is_int(irq) else 1 << 20) * 16 + lane
        return self._track(("irq", dev, irq, lane), lane_name(name, lane), SLICES, group, rank)

    def _irq_first(self, key: Tuple[Optional[int], Any]) -> Track:
        return self._packer(("irq", *key), lambda lane: self._irq_track(key, lane)).first()

    def _memory_child(self, dev: int, name: str, kind: str, rank: int, unit: str = "") -> Track:
        group = self._track(("device", dev, "memory"), "memory", GROUP, self._device(dev), RANK["memory"])
        return self._track(("memory", dev, name), name, kind, group, rank, unit)

    def _live_track(self, dev: int) -> Track:
        return self._memory_child(dev, "live bytes", COUNTER, 0, "bytes")

    def _process_track(self, dev: int, pid: int) -> Track:
        return self._memory_child(dev, f"pid {pid} ({self.comm_of(pid)})", COUNTER, 2 + max(pid, 0), "bytes")

    def _health_track(self, dev: int, name: str, unit: str) -> Track:
        group = self._track(("device", dev, "health"), "health", GROUP, self._device(dev), RANK["health"])
        names = [n for _, n, _ in _HEALTH] + ["PCIe link speed"]
        return self._track(("health", dev, name), name, COUNTER, group, names.index(name), unit)

    def _findings_track(self, dev: Optional[int]) -> Track:
        if dev is None:
            return self._tracer_child("findings", INSTANTS, 4)
        return self._device_child(dev, "findings", INSTANTS)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _gts(speed: Any) -> Optional[float]:
    """A PCIe link speed as sysfs says it ("16.0 GT/s PCIe") in GT/s (None when it is not one)."""
    if isinstance(speed, (int, float)) and not isinstance(speed, bool):
        return float(speed)
    try:
        return float(str(speed).split()[0])
    except (ValueError, IndexError):
        return None


def _hashable(value: Any) -> Any:
    """A stream or interrupt number as a key: itself, or its text when it is a list or a map (an array or struct
    field where the profile expects an integer: a damaged or unusual format)."""
    return repr(value) if isinstance(value, (list, dict)) else value


def _task_flow(dev: Optional[int], stream: Any, task: Any, submitted: int) -> int:
    """The flow from a task's submitting call to its execution: the latency detector's task key and the time
    it was opened (its submit), so that both ends compute it alike."""
    return flow_id("task", dev, stream, task, submitted)


def _trigger_flow(dev: Optional[int], ts: int, kind: Any, op: Any) -> int:
    """The flow from the event that triggered a reset sequence (its trigger: kind, op, time) to the sequence."""
    return flow_id("trigger", dev, ts, kind, op)
