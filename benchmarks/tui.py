"""TUI benchmark: a flood source offers events to the app at a paced rate for ~20 s (headless, real worker process).

Two floods (--flood):
- blocks (the default, 1,000,000 events/s): what a live session's worker receives from the columnar timeline;
  a recording generated in this run (benchmarks.gen_recording: the simulator's mixed scenario, 8 devices, no
  root) is read once through `ReplaySource.block_timeline()` into blocks as a live worker takes them at the
  rate (`LiveBlocks`: the rows of 50 ms), built in the worker before the clock starts, then handed over
  again and again with their stamps shifted past the previous round, so event time
  always moves forward; each block goes whole once its first row is due;
- objects (100,000 events/s): a synthesized mixed run as TraceEvent objects (the reference path).

Measures, and prints (figures only; never asserts timings):
- key press to redraw: a key event is handed to the app as the terminal driver does, and the time runs until
  the first frame composed after the key's effect (the status bar's PAUSED) rendered to terminal output
  (the headless driver skips that step: it is done here, so the cost is counted). Pilot.press is not used:
  it waits for the process to look idle (up to 1 s, twice), which measures its own heuristic, not the app;
- events analysed per second against events offered, and the backlog (offered, not yet analysed) at the end:
  the flood is paced by the clock, so a worker that cannot keep up shows as a growing backlog, never as a
  lower offered rate; every event offered is analysed (nothing is dropped);
- UI updates per second and the UI thread's time per update;
- RSS of the UI process and of the worker process over time (the flood's own data is a few MiB).

Run: .venv/bin/python -m benchmarks.tui [--seconds 20] [--flood blocks|objects] [--rate N] [--gen-events N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from npu_trace.device.profiles import PROFILES
from npu_trace.events import TraceEvent
from npu_trace.pipeline.blocks import Block
from npu_trace.pipeline.blocktimeline import TAKE_EVERY_S, TAKE_ROWS
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import synth_events
from npu_trace.sources.replay_source import ReplaySource
from tui.worker.sources import BaseSource, FakeSource

if TYPE_CHECKING:
    from tui.ui.app import NpuTraceApp

TICK_S = 0.02
MAX_BATCH = 5000  # events per sink call at most (what one read of a busy session hands over)
KEY_EVERY_S = 0.1
_new = tuple.__new__


class FloodSource(FakeSource):
    """`rate` events/s for `seconds`, paced by the clock: a synthesized mixed run (two devices: calls, tasks,
    memory, spikes, a reset) repeated with shifted times, so event time always moves forward. Built in the
    worker process."""

    label = "flood"

    def __init__(self, rate: int, seconds: float) -> None:
        super().__init__([], hold=True)
        self.rate, self.seconds = rate, seconds
        self.offered = self.sent = 0
        self.batches = self._flood()

    def _flood(self) -> Iterator[List[Any]]:
        base = synth_events(plan("mixed", 1, 2.0, 2000, 2))
        span = base[-1].ts_ns + 1
        start = time.monotonic()
        k = i = 0
        while True:
            now = time.monotonic() - start
            if now >= self.seconds:
                return
            self.offered = int(self.rate * now)
            due = min(self.offered - self.sent, MAX_BATCH)
            if due <= 0:
                time.sleep(TICK_S)
                continue
            out: List[Any] = []
            while len(out) < due:
                part = base[i : i + due - len(out)]
                shift = k * span
                out.extend(_new(TraceEvent, (ev[0] + shift, ev[1], ev[2], ev[3], ev[4])) for ev in part)
                i += len(part)
                if i >= len(base):
                    i, k = 0, k + 1
            self.sent += len(out)
            yield out

    def detail(self) -> str:
        return f"offered {self.offered} sent {self.sent}"


class BlockFlood(BaseSource):
    """`rate` events/s for `seconds` as columnar blocks, paced by the clock: the blocks of a recording (made
    by benchmarks.gen_recording), built once in the worker, then offered round after round with their stamps
    shifted past the previous round. A block holds what a live worker's `LiveBlocks` hands over at `rate`
    when the worker keeps up (the rows of TAKE_EVERY_S, at most TAKE_ROWS), and is offered whole once its
    first row is due; `offered` counts the rows the clock has made due, so a worker
    that falls behind shows as a backlog."""

    label = "flood"

    def __init__(self, path: str, rate: int, seconds: float) -> None:
        super().__init__()
        self.rate, self.seconds = rate, seconds
        self.offered = self.sent = 0
        source = ReplaySource(path)
        timeline = source.block_timeline()
        self.blocks: List[Tuple[Block, int]] = []
        rows = max(1, min(TAKE_ROWS, int(rate * TAKE_EVERY_S)))  # what LiveBlocks hands over at this rate
        for batch in source.batches():
            timeline.add(batch)
            if timeline.pending_rows >= rows:
                self._keep(timeline.take(), timeline.now)
        self._keep(timeline.flush(), timeline.now)
        if not self.blocks:
            raise SystemExit(f"tui: {path} holds no events")
        self.span = int(self.blocks[-1][0].ts[-1]) - int(self.blocks[0][0].ts[0]) + 1

    def _keep(self, block: Block, now: Optional[int]) -> None:
        if len(block) and not block.objects:  # a generated recording has no channel objects nor losses
            self.blocks.append((block, int(block.ts[-1]) if now is None else now))

    def run(self, sink: Any, stop: Any) -> None:
        start = time.monotonic()
        k = 0
        while not stop.stopped:
            shift = k * self.span
            for block, now in self.blocks:
                while self.sent > self.rate * (time.monotonic() - start) and not stop.stopped:
                    sink([])  # serves the UI's requests while the clock catches up
                    time.sleep(TICK_S)
                elapsed = time.monotonic() - start
                if stop.stopped or elapsed >= self.seconds:
                    self.offered = int(self.rate * min(elapsed, self.seconds))
                    return self._hold(sink, stop)
                self.offered = int(self.rate * elapsed)
                shifted = Block(block.ts + shift, block.cpu, block.pid, block.etype, block.ref, block.tables, [],
                                block.groups)  # fmt: skip
                self.sent += len(block)
                sink(shifted, now + shift)
            k += 1

    def _hold(self, sink: Any, stop: Any) -> None:
        while not stop.stopped:
            sink([])
            time.sleep(TICK_S)

    def detail(self) -> str:
        return f"offered {self.offered} sent {self.sent}"


def rss_mib(pid: Optional[int] = None) -> float:
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def instrument(app: NpuTraceApp, lat: List[float], waiting: Dict[str, Any], handling: List[float]) -> None:
    """Frames: render each to terminal output (as a real driver would) and note the first one after a key's
    effect. Updates: time the UI thread's handling of each."""
    from textual._compositor import CompositorUpdate

    display = app._display

    def timed_display(screen: Any, renderable: Any) -> None:
        display(screen, renderable)
        if isinstance(renderable, CompositorUpdate):
            renderable.render_segments(app.console)
        if waiting and app.paused == waiting["want"]:
            lat.append((time.perf_counter() - waiting["t0"]) * 1000)
            waiting.pop("event").set()
            waiting.clear()

    update = app._update

    def timed_update(up: Any) -> None:
        t0 = time.perf_counter()
        update(up)
        handling.append((time.perf_counter() - t0) * 1000)

    app._display = timed_display  # type: ignore[method-assign]
    app._update = timed_update  # type: ignore[method-assign]


def cpu_s(pid: Optional[int] = None) -> float:
    """User + system CPU seconds of a process so far."""
    try:
        with open(f"/proc/{pid or 'self'}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def offered(app: NpuTraceApp) -> int:
    words = app.counters.detail.split()
    return int(words[1]) if len(words) > 1 and words[0] == "offered" else 0


async def measure(seconds: float, rate: int, recording: Optional[str] = None) -> None:
    from textual import events

    from benchmarks.tui import BlockFlood, FloodSource  # by their module's name (run as __main__, this one is not)
    from npu_trace.process import tune_gc
    from tui.messages import SourceSpec
    from tui.ui.app import NpuTraceApp

    tune_gc()  # as the CLI does
    spec = SourceSpec(BlockFlood, (recording, rate, seconds)) if recording else SourceSpec(FloodSource, (rate, seconds))
    app = NpuTraceApp(spec, PROFILES["sim"])
    lat: List[float] = []
    handling: List[float] = []
    waiting: Dict[str, Any] = {}
    rss: List[Tuple[int, float, float]] = []
    instrument(app, lat, waiting, handling)
    async with app.run_test(size=(120, 40)):
        while app.counters.events == 0:  # the worker builds its data first
            if app.error:
                raise SystemExit(f"tui: the worker failed: {app.error}")
            await asyncio.sleep(0.05)
        t0 = last_rss = time.monotonic()
        updates0, events0 = app.updates, app.counters.events
        cpu0 = cpu_s(), cpu_s(app.feed.pid)
        while time.monotonic() - t0 < seconds - 0.5:
            done = asyncio.Event()
            waiting.update(want=not app.paused, t0=time.perf_counter(), event=done)
            assert app._driver is not None
            app._driver.send_message(events.Key("p", "p"))  # as the terminal driver hands a key to the app
            try:
                await asyncio.wait_for(done.wait(), 10)
            except asyncio.TimeoutError:
                lat.append(10_000.0)
                waiting.clear()
            if time.monotonic() - last_rss >= 1.0:
                last_rss = time.monotonic()
                rss.append((round(last_rss - t0), rss_mib(), rss_mib(app.feed.pid)))
            await asyncio.sleep(KEY_EVERY_S)
        elapsed = time.monotonic() - t0
        cpu = (cpu_s() - cpu0[0]) / elapsed * 100, (cpu_s(app.feed.pid) - cpu0[1]) / elapsed * 100
        analysed = app.counters.events - events0
        total, offer, updates = app.counters.events, offered(app), app.updates - updates0
        await app.action_quit()
    lat.sort()
    handling.sort()
    pick = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    backlog = max(0, offer - total)
    print(f"tui: {analysed:,} events analysed in {elapsed:.1f} s ({analysed / elapsed:,.0f} ev/s; offered "
          f"{rate:,}/s); at the end {total:,} analysed of {offer:,} offered: backlog {backlog:,} "
          f"({backlog / rate:.2f} s)")  # fmt: skip
    per_event = cpu[1] / 100 * elapsed / analysed * 1e9 if analysed else 0.0
    print(f"tui: CPU: UI process {cpu[0]:.0f}%, worker {cpu[1]:.0f}% of one CPU ({per_event:,.0f} ns per event "
          f"analysed: {1e9 / per_event if per_event else 0:,.0f} ev/s on a CPU of its own); load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"tui: {updates} UI updates ({updates / elapsed:.1f}/s); UI thread per update: p50 "
          f"{pick(handling, 0.5):.1f} ms, p99 {pick(handling, 0.99):.1f} ms, max {handling[-1]:.1f} ms")  # fmt: skip
    print(f"tui: key->redraw over {len(lat)} presses: p50 {pick(lat, 0.5):.1f} ms, p90 {pick(lat, 0.9):.1f} ms, "
          f"p99 {pick(lat, 0.99):.1f} ms, max {lat[-1]:.1f} ms")  # fmt: skip
    ui, worker = [r[1] for r in rss], [r[2] for r in rss]
    mid = len(rss) // 2
    print(
        f"tui: RSS MiB UI start {ui[0]:.0f}, middle {ui[mid]:.0f}, end {ui[-1]:.0f}, max {max(ui):.0f}; "
        f"worker start {worker[0]:.0f}, middle {worker[mid]:.0f}, end {worker[-1]:.0f}, max {max(worker):.0f}"
    )
    step = max(1, len(rss) // 10)
    series = ", ".join(f"{t}s {u:.0f}/{w:.0f}" for t, u, w in rss[::step])
    print(f"tui: RSS MiB over time (UI/worker): {series}")


def flood_recording(events: int, out_dir: str) -> str:
    """The blocks flood's recording: the simulator's mixed scenario on 8 devices, generated (no root)."""
    from benchmarks.gen_recording import Spec, duration_for, generate

    path = os.path.join(out_dir, "flood.npt")
    t0 = time.monotonic()
    got = generate(path, Spec(duration_s=duration_for(events, Spec.rate)))
    print(f"tui: flood recording: {got.events:,} events generated in {time.monotonic() - t0:.0f} s ({path})")
    return path


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--flood", choices=("blocks", "objects"), default="blocks")
    ap.add_argument("--rate", type=int, help="events/s offered (default 1,000,000 blocks, 100,000 objects)")
    ap.add_argument("--gen-events", type=float, default=300_000, help="events in the blocks flood's recording")
    ap.add_argument("--recording", help="the blocks flood's recording (instead of generating one)")
    args = ap.parse_args()
    if args.flood == "objects":
        asyncio.run(measure(args.seconds, args.rate or 100_000))
        return
    with tempfile.TemporaryDirectory(prefix="npu-trace-bench-tui.") as tmp:
        path = args.recording or flood_recording(int(args.gen_events), tmp)
        asyncio.run(measure(args.seconds, args.rate or 1_000_000, path))


if __name__ == "__main__":
    main()
