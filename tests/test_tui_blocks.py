"""The TUI worker's collector on columnar blocks shows what it shows on items: the same rows, findings, spike
contexts, device states, latency table, resets and memory, update after update, whatever the log filter.

The live and replay sources hand blocks over (the fast path); `add(items)` is the reference.
"""

from __future__ import annotations

import math
import os
import random
from typing import Any, List

import pytest

from npu_trace.device.profiles import PROFILES
from npu_trace.events import Loss, NpuEvent
from npu_trace.ftrace.columns import plans
from npu_trace.pipeline.blocks import records_of
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sim.scenarios import plan
from npu_trace.sim.synth import formats, synth_events
from tui.logfilter import LogFilter
from tui.messages import Counters
from tui.worker.collector import Collector, select_rows

PROFILE = PROFILES["sim"]
DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "npu_trace", "data", "demo.npt")
PLANS = plans(formats().values(), layouts=PROFILE.layouts)
COMMS = {4242: "python3"}  # the synthesizer's process


def comm(pid: int) -> str:
    return COMMS.get(pid, "<...>")


def items_of(scenario: str, seed: int) -> List[Any]:
    rng = random.Random(seed)
    out: List[Any] = []
    for ev in synth_events(plan(scenario, seed, 1.0, 1500, 2)):
        out.append(ev._replace(cpu=rng.randrange(2)))
        if rng.random() < 0.004:
            out.append(NpuEvent(ev.ts_ns, "timeout", 0, "heartbeat", -1, -1, {"source": "kmsg"}))
        elif rng.random() < 0.002:
            out.append(Loss("tracefs", 1, "overrun", 2, ev.ts_ns))
    return out


def updates(collector: Collector, batches: List[List[Any]], blocks: bool, query: str) -> List[Any]:
    out = []
    if query:
        out.append(collector.set_filter(query))
    for seq, batch in enumerate(batches, 1):
        now = batch[-1].ts_ns if batch else None
        if blocks:
            collector.add_block(records_of(batch, PLANS), now)
        else:
            collector.add(batch, now)
        if seq % 3 == 0:
            out.append(collector.update(seq, 0.25, Counters()))
        if seq == len(batches) // 2:
            out.append(collector.set_filter(query or "kind:call"))
    collector.finish()
    out.append(collector.update(len(batches) + 1, 0.25, Counters(), ended=True))
    return out


@pytest.mark.parametrize("scenario", ["mixed", "spikes", "ecc-reset", "fragmentation"])
@pytest.mark.parametrize("query", ["", "dev:1", "kind:call kind:irq", "comm:pyth", "halMem", "pid:4242 dev:0"])
def test_blocks_and_items_give_the_same_updates(scenario: str, query: str) -> None:
    items = items_of(scenario, 4)
    rng = random.Random(scenario + query)
    cuts = sorted(rng.sample(range(1, len(items)), 40))
    batches = [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)])]
    want = updates(Collector(PROFILE, comm, rows_per_update=50), batches, False, query)
    got = updates(Collector(PROFILE, comm, rows_per_update=50), batches, True, query)
    assert got == want


FILTERS = ["dev:0", "dev:npu1", "kind:complete", "kind:nonsense", "pid:4242", "pid:7", "comm:py", "comm:absent",
           "halmemalloc dev:0", "x"]  # fmt: skip


@pytest.mark.parametrize("query", FILTERS)
def test_the_filter_on_columns_selects_what_the_filter_on_events_selects(query: str) -> None:
    items = items_of("mixed", 2)
    nb = BlockNormalizer(Normalizer(PROFILE.mapping)).normalize(records_of(items, PLANS))
    events = [nb.event(i) for i in range(len(nb))]
    flt = LogFilter.parse(query)
    assert [events[i] for i in select_rows(flt, nb, comm).tolist()] == flt.select(events, comm)


@pytest.mark.parametrize("query, dev, pid, text", [
    ("dev:²", None, None, "dev:²"),  # a digit to str.isdigit, not to int: a ValueError that killed the replay
    ("pid:٣", None, None, "pid:٣"),
    ("dev:unp3", None, None, "dev:unp3"),  # lstrip("npu") read it as 3
    ("dev:npu3 pid:12", 3, 12, ""),
])  # fmt: skip
def test_a_filter_reads_ascii_numbers_only(query: str, dev: Any, pid: Any, text: str) -> None:
    flt = LogFilter.parse(query)
    assert (flt.dev, flt.pid, flt.text) == (dev, pid, text)


def test_a_cut_recording_is_said_cut_in_the_status(tmp_path: Any) -> None:
    """replay's summary and check name a recording cut short (a crash's); the TUI's status said 'end of
    recording' as of a whole one."""
    from tui.worker.replay_feed import ReplayFeedSource

    with open(DEMO, "rb") as f:
        data = f.read()
    cut = tmp_path / "cut.npt"
    cut.write_bytes(data[: len(data) * 2 // 3])
    whole, part = ReplayFeedSource(DEMO, None), ReplayFeedSource(str(cut), None)
    for source in (whole, part):
        for _ in source.replay.batches():
            pass
    assert "cut" not in whole.detail() and part.detail().endswith(", the file is cut (its end is missing)")


@pytest.mark.parametrize("start, steps, want", [
    (None, [2, 0.5, 0.5], [math.inf, 64.0, 32.0]),  # + at max stays max (it slowed the replay to 64x)
    (1000.0, [0.5, 2], [500.0, math.inf]),  # past the fastest step: max
    (0.001, [0.5, 2], [0.001, 0.002]),  # - below the slowest stays (it sped it up to 0.125x)
    (32.0, [2, 2], [64.0, math.inf]),
])  # fmt: skip
def test_a_speed_step_never_goes_the_other_way(start: Any, steps: List[float], want: List[float]) -> None:
    from tui.worker.replay_feed import ReplayFeedSource

    source = ReplayFeedSource(DEMO, start)
    assert [source.set_speed(step) for step in steps] == want
