"""The simulator's kmsg channel: its lines parse into the simulator's own reset steps, devices and kinds."""

from __future__ import annotations

import time

from npu_trace.device.hal import RESET_STEPS
from npu_trace.device.kmsg import KmsgMatcher
from npu_trace.sim.scenarios import plan
from npu_trace.sim.side_channels import KmsgChannel, schedule


def test_ecc_reset_lines_parse_into_the_truth_steps() -> None:
    actions = plan("ecc-reset", 1, 2.0, 200, 2)
    lines = schedule(actions, pid=4242)
    m = KmsgMatcher()
    parsed = [m.parse(line[3:]) for _, line in lines]
    steps = [p.step for p in parsed if p is not None and p.kind == "reset_step"]
    assert steps == list(RESET_STEPS)
    assert all(p is not None and (p.dev in (0, None)) for p in parsed)
    assert [p.op for p in parsed if p is not None and p.kind == "timeout"].count("heartbeat") == 1
    assert [t for t, _ in lines] == sorted(t for t, _ in lines)


def test_channel_writes_at_planned_times(tmp_path: object) -> None:
    path = str(tmp_path) + "/kmsg"  # a plain file stands in for /dev/kmsg
    open(path, "w").close()
    actions = plan("ecc-reset", 1, 0.2, 200, 1)
    ch = KmsgChannel(actions, pid=1, path=path)
    ch.start(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    ch.join(timeout=60)  # its thread ends once the last line is written (all are due within 0.2 s)
    ch.stop()
    assert ch.written == len(ch.lines) and ch.errors == 0


def test_kmsg_events_alone_build_one_complete_reset_sequence() -> None:
    from npu_trace.detectors.analysis import Analysis
    from npu_trace.device.kmsg import parse_record, to_event
    from npu_trace.device.profiles import PROFILES

    m = KmsgMatcher()
    m.bdf_dev["3b:00.0"] = 0  # what the source seeds from sysfs dev_id
    events = []
    for seq, (t, line) in enumerate(schedule(plan("ecc-reset", 1, 2.0, 200, 1), pid=7)):
        rec = parse_record(f"5,{seq},{t // 1000},-;{line[3:]}\n".encode())
        assert rec is not None
        p = m.parse(rec.msg)
        assert p is not None
        events.append(to_event(rec, p, 0))
    analysis = Analysis(PROFILES["sim"])
    analysis.feed_events(events)
    resets = [f for f in analysis.finish()["findings"] if f["kind"] == "reset_sequence"]
    assert len(resets) == 1
    details = resets[0]["details"]
    assert details["status"] == "complete" and details["missing"] == [] and not details["out_of_order"]
    assert details["trigger"]["op"] == "heartbeat"
