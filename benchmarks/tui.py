"""TUI benchmark: a fake source streams ~100,000 events/s into the app for ~20 s (headless pilot).

Measures key-press-to-redraw latency (press `p`, wait until the status bar shows the change and the screen
has been refreshed) and the process RSS over time. Prints figures only; never asserts timings.
Run: .venv/bin/python -m benchmarks.tui [--seconds 20] [--rate 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any, Iterator, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "tests"))

from npu_trace.profiles import PROFILES
from npu_trace.sim.scenarios import plan
from synth import synth_events
from tui.app import NpuTraceApp
from tui.sources import FakeSource

TICK_S = 0.02


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def flood(rate: int, seconds: float) -> Iterator[List[Any]]:
    """Batches every TICK_S holding rate*TICK_S events (a synthesized mixed run, replayed with shifted times)."""
    base = synth_events(plan("mixed", 1, 2.0, 2000, 2))
    per_tick = int(rate * TICK_S)
    span = base[-1].ts_ns + 1
    ready = [[ev._replace(ts_ns=ev.ts_ns + k * span) for ev in base] for k in range(int(rate * 10 / len(base)) + 1)]
    flat = [ev for run in ready for ev in run]  # ~10 s of distinct events, cycled (built before timing)
    start, i = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        yield flat[i : i + per_tick]
        i = (i + per_tick) % (len(flat) - per_tick)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - start) % TICK_S))


async def measure(seconds: float, rate: int) -> None:
    source = FakeSource(flood(rate, seconds), hold=True)
    app = NpuTraceApp(source, PROFILES["sim"])
    lat: List[float] = []
    rss: List[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            before = app.paused
            start = time.perf_counter()
            await pilot.press("p")
            while app.paused == before:
                await asyncio.sleep(0)
            await asyncio.sleep(0)  # the refresh scheduled by the key's handler
            lat.append((time.perf_counter() - start) * 1000)
            rss.append(rss_mib())
            await asyncio.sleep(0.2)
        events = app.counters.events
        await pilot.press("q")
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
    print(f"tui: {events:,} events in {seconds:.0f} s ({events / seconds:,.0f} ev/s analysed), "
          f"{app.updates} UI updates ({app.updates / seconds:.1f}/s)")  # fmt: skip
    print(f"tui: key->redraw over {len(lat)} presses: p50 {pick(0.5):.1f} ms, p99 {pick(0.99):.1f} ms, "
          f"max {lat[-1]:.1f} ms")  # fmt: skip
    print(f"tui: RSS MiB start {rss[0]:.0f}, middle {rss[len(rss) // 2]:.0f}, end {rss[-1]:.0f}, max {max(rss):.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=100_000)
    args = ap.parse_args()
    asyncio.run(measure(args.seconds, args.rate))


if __name__ == "__main__":
    main()
