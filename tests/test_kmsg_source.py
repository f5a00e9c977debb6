"""The kmsg source against the real /dev/kmsg: template lines written as the driver prints them, read back parsed."""

from __future__ import annotations

import os
import time
from typing import List

import pytest

from npu_trace.device.kmsg import parse_record, write_kmsg
from npu_trace.events import NpuEvent
from npu_trace.sources.kmsg_source import KmsgSource

TAG = f"npt-test-{os.getpid() % 100000}"  # the comm of every line this test writes (<= 15 chars)
LINES = [
    "[ascend] [ERROR] [drv_soft_fault] [hb_read_process 205] <{tag}:{pid},{pid}> Heartbeat lost! (device_id=3; "
    "old_count=1; current_count=1; lost_count=3; total_lost_count=3; miss_read_count=0; hb_read_fail_count=0).",
    "[ascend] [drv_pcie] [devdrv_hot_reset_wait 5110] <{tag}:{pid}:{pid}> Device is ready for hotreset. "
    "(dev_id=3; ref_cnt=0; wait_cnt=1)",
    "[ascend] [drv_pcie] [devdrv_hot_reset_device 5200] <{tag}:{pid}:{pid}> Device hot reset begin. (dev_id=3)",
    "[ascend] [ERROR] [trs_drv] [trs_hard_mbox_wait 337] <{tag}:{pid}:{pid}:0> Mbox wait fail. (ret=-110; "
    "valid=0x0; tx_time_us=1; txdone_time_us=2; wakeup_time_us=3)",
    "[ascend] [ERROR] [devmm] [devmm_alloc_pages 500] <{tag}:{pid},{pid}> Kvzalloc failed. (pg_num=262144)",
]


def _ours(events: List[NpuEvent]) -> List[NpuEvent]:
    return [e for e in events if e.args.get("comm") == TAG]


def _read_until(src: KmsgSource, count: int, timeout: float = 3.0) -> List[NpuEvent]:
    got: List[NpuEvent] = []
    deadline = time.monotonic() + timeout
    while len(_ours(got)) < count and time.monotonic() < deadline:
        got.extend(src.read())
        time.sleep(0.01)
    return got


def _kmsg_available() -> None:
    if not os.path.exists("/dev/kmsg") or not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg not readable and writable")


@pytest.mark.privileged
def test_real_kmsg_lines_read_back_parsed_on_the_trace_clock() -> None:
    _kmsg_available()
    pid = os.getpid()
    with KmsgSource() as src:
        assert src.offset_measured, "the clock marker was not read back"
        assert abs(src.offset_ns) < 10 * 1_000_000_000  # local_clock and CLOCK_MONOTONIC are close
        note = src.clock_note()
        assert note["kind"] == "clock_offset" and note["measured"]
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        for line in LINES:
            write_kmsg("<5>" + line.format(tag=TAG, pid=pid))
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        events = _ours(_read_until(src, len(LINES)))
    assert [(e.kind, e.op, e.dev) for e in events] == [
        ("timeout", "heartbeat", 3),
        ("reset_step", "reset", 3),
        ("reset_step", "reset", 3),
        ("timeout", "mbox", None),
        ("alloc_fail", "kvzalloc", None),
    ]
    assert [e.args.get("step") for e in events[1:3]] == ["ready_for_hotreset", "reset_begin"]
    slack = src.offset_error_ns + 2_000_000
    for e in events:
        assert t0 - slack <= e.ts_ns <= t1 + slack, (t0, e.ts_ns, t1)
        assert e.pid == pid
    assert [e.ts_ns for e in events] == sorted(e.ts_ns for e in events)


@pytest.mark.privileged
def test_only_new_records_and_rate_limit_loss() -> None:
    _kmsg_available()
    write_kmsg(f"<5>[ascend] [drv_pcie] [f 1] <{TAG}:1:1> Device offline. (dev_id=9)")  # before open: not seen
    with KmsgSource() as src:
        write_kmsg("<5>log_to_printk_and_ringbuf: 7 callbacks suppressed")
        write_kmsg(f"<5>[ascend] [drv_pcie] [f 1] <{TAG}:1:1> Device offline. (dev_id=8)")
        events = _read_until(src, 1)
        ours = _ours(events)
        assert [e.dev for e in ours] == [8]
        lost = [e for e in events if e.kind == "lost" and e.op == "ratelimited"]
        assert lost and lost[0].args["lost"] == 7
        assert any(loss.kind == "ratelimited" and loss.lost == 7 for loss in src.drain_losses())


@pytest.mark.privileged
def test_the_last_read_drains_the_log_past_one_read_s_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read takes at most MAX_READS records (here 3); the session's last read (drain) takes every one written
    before it, however many: none is left in the log unread at the stop."""
    from npu_trace.sources import kmsg_source

    _kmsg_available()
    monkeypatch.setattr(kmsg_source, "MAX_READS", 3)
    with KmsgSource() as src:
        src.read(drain=True)  # whatever the log held before: read
        for dev in range(10):
            write_kmsg(f"<5>[ascend] [drv_pcie] [f 1] <{TAG}:1:1> Device offline. (dev_id={dev})")
        first = _ours(src.read())
        rest = _ours(src.read(drain=True))
    assert len(first) <= 3 and [e.dev for e in first + rest] == list(range(10))


def test_sequence_gap_and_epipe_are_counted(tmp_path: object) -> None:
    src = KmsgSource(path="/dev/null")
    out: List[NpuEvent] = []
    for seq in (5, 6, 9):
        rec = parse_record(f"6,{seq},100,-;hello\n".encode())
        assert rec is not None
        src._record(rec, out)
    assert [(e.kind, e.args["lost"]) for e in out] == [("lost", 2)]
    assert src.losses[0].kind == "overwritten" and src.losses[0].lost == 2


def test_a_fault_block_is_one_event_at_its_first_line_held_until_it_ends() -> None:
    src = KmsgSource(path="/dev/null")
    block = ["BUG: soft lockup - CPU#1 stuck for 22s! [kworker/1:2:311]", "CPU: 1 PID: 311 Comm: kworker/1:2",
             "Call trace:", " trs_chan_irq_proc+0x40/0x100 [asdrv_trsbase]"]  # fmt: skip
    out: List[NpuEvent] = []
    for seq, line in enumerate(block, 1):
        rec = parse_record(f"4,{seq},{seq * 1000},-;{line}\n".encode())
        assert rec is not None
        src._record(rec, out)
    assert out == [] and src.held_ns == 1_000_000  # the watermark holds at the block's first line
    rec = parse_record(b"5,5,9000,-;[ascend] [drv_pcie] [f 1] <a:1:1> Device is abnormal. (dev_id=2)\n")
    assert rec is not None
    src._record(rec, out)
    assert [(e.kind, e.op, e.dev, e.ts_ns) for e in out] == [("fault", "kernel_fault", None, 1_000_000),
                                                             ("fault", "device_abnormal", 2, 9_000_000)]  # fmt: skip
    assert out[0].args["driver_modules"] == ["asdrv_trsbase"] and out[0].args["lines"] == 4
    assert src.held_ns is None and src.stats["fault_lines"] == 4
    src._record(parse_record(b"4,6,10000,-;Oops: 0000 [#1] SMP\n"), out)  # type: ignore[arg-type]
    assert [e.args["fault"] for e in src.finish()] == ["oops"]  # the end of the session ends the block
