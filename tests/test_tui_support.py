"""Helpers for the TUI tests (no tests here): synthesized simulator runs cut into batches, waiting helpers."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Optional

from npu_trace.events import TraceEvent
from npu_trace.profiles import PROFILES
from npu_trace.sim.scenarios import plan
from synth import synth_events
from tui.app import NpuTraceApp
from tui.sources import FakeSource

PROFILE = PROFILES["sim"]
BATCH_NS = 50_000_000


def mixed_events(seed: int = 1, duration_s: float = 2.0, rate: float = 400, devices: int = 2) -> List[TraceEvent]:
    return synth_events(plan("mixed", seed, duration_s, rate, devices))


def batches(events: List[TraceEvent], until_ns: Optional[int] = None, span_ns: int = BATCH_NS) -> List[List[Any]]:
    """Events (optionally up to `until_ns`) cut into batches of `span_ns` of event time."""
    out: List[List[Any]] = []
    for ev in events:
        if until_ns is not None and ev.ts_ns > until_ns:
            break
        if not out or ev.ts_ns - out[-1][0].ts_ns >= span_ns:
            out.append([])
        out[-1].append(ev)
    return out


def fake_app(items: List[List[Any]], **kw: Any) -> NpuTraceApp:
    rows = kw.pop("rows", 1000)
    source = FakeSource(items, comms=kw.pop("comms", {4242: "sim-executor"}), **kw)
    return NpuTraceApp(source, PROFILE, rows=rows)


async def wait_for(pilot: Any, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)


def settled(app: NpuTraceApp, events: int) -> Callable[[], bool]:
    """All `events` seen by the UI and their spikes' context resolved."""
    return lambda: app.counters.events >= events and not app.feed.collector.pending_spikes and app.counters.rate == 0
