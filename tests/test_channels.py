"""The other channels beside ftrace (kmsg, uevents, npu-smi): opened one by one, recorded, replayed, checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, List

import pytest

from npu_trace.errors import UsageError
from npu_trace.model import NpuEvent
from npu_trace.sources import channels as channels_mod
from npu_trace.sources.channels import Channels, parse_channels
from npu_trace.sources.kmsg_source import write_kmsg
from npu_trace.sources.replay_source import ReplaySource

CLI = [sys.executable, "-m", "npu_trace"]
TAG = f"npt-ch-{os.getpid() % 100000}"
HB_LOST = ("[ascend] [ERROR] [drv_soft_fault] [hb_read_process 205] <{tag}:{pid},{pid}> Heartbeat lost! (device_id=5; "
           "old_count=1; current_count=1; lost_count=3; total_lost_count=3; miss_read_count=0; "
           "hb_read_fail_count=0).")  # fmt: skip


def test_channel_names() -> None:
    assert parse_channels("kmsg, uevent,kmsg") == ["kmsg", "uevent"]
    assert parse_channels("none") == [] and parse_channels("") == []
    with pytest.raises(UsageError, match="unknown channel 'dmesg'"):
        parse_channels("kmsg,dmesg")


def test_a_channel_that_cannot_open_is_named_once_and_the_others_run(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoKmsg:
        def open(self) -> None:
            raise PermissionError(1, "Operation not permitted")

    class FakeUevent:
        def open(self) -> None:
            pass

        def read(self) -> List[NpuEvent]:
            return [NpuEvent(5, "reset_step", 0, "reset", -1, -1, {"source": "uevent", "step": "rescan"}),
                    NpuEvent(2, "lost", None, "overflow", -1, -1, {"source": "uevent", "lost": 1})]  # fmt: skip

        def close(self) -> None:
            pass

    monkeypatch.setattr(channels_mod, "KmsgSource", NoKmsg)
    monkeypatch.setattr(channels_mod, "UeventSource", FakeUevent)
    said: List[str] = []
    with Channels(["kmsg", "uevent"], on_note=said.append) as ch:
        got = ch.read()
    assert said == ["kmsg: not available here (Operation not permitted): the other channels go on"]
    assert ch.running == ["uevent"] and [e.ts_ns for e in got] == [2, 5]  # sorted by time
    assert ch.events_read == 2 and ch.lost == 1
    assert ch.header() == {"asked": ["kmsg", "uevent"], "running": ["uevent"]}


def test_bad_channel_options_are_one_line_errors() -> None:
    no_lib = ["stream", "--profile", "ascend", "--bpf", "--bpf-binary", "/nonexistent/libascend_hal.so"]
    for argv in (["stream", "--channels", "bogus"], ["record", "-o", "/tmp/x.npt", "--health-interval", "0"],
                 ["stream", "--bpf-binary", "/bin/true"], no_lib):  # fmt: skip
        proc = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.privileged
def test_kmsg_channel_reads_a_driver_line_on_the_trace_clock() -> None:
    with Channels(["kmsg"]) as ch:
        clock = ch.header()["kmsg_clock"]
        assert clock["measured"] is True
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        write_kmsg("<3>" + HB_LOST.format(tag=TAG, pid=os.getpid()))
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        got: List[NpuEvent] = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got = [e for e in ch.read() if e.args.get("comm") == TAG]
            time.sleep(0.01)
    (ev,) = got
    assert (ev.kind, ev.op, ev.dev) == ("timeout", "heartbeat", 5)
    error = clock["error_ns"]
    assert before - error - 1000 <= ev.ts_ns <= after + error + 1000


@pytest.mark.privileged
def test_record_without_the_driver_still_records_the_kernel_log_and_check_finds_it(tmp_path: Any) -> None:
    """--profile ascend where the driver is absent: its tracepoints are named once, kmsg and uevents still
    recorded; replay and check see the driver's heartbeat-lost line as a timeout of device 5."""
    path = str(tmp_path / "a.npt")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "--profile", "ascend", "--duration", "2.5",
                            "--channels", "kmsg,uevent"], stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert rec.stderr is not None
    first = rec.stderr.readline()
    time.sleep(0.8)
    write_kmsg("<3>" + HB_LOST.format(tag=TAG, pid=os.getpid()))
    rest = rec.stderr.read()
    assert rec.wait(timeout=60) == 0, first + rest
    assert "not on this host: trs_chan:*, trs_core:*" in first  # the irq tracepoints exist here
    assert "with kmsg, uevent" in rest
    source = ReplaySource(path)
    got = [e for b in source.batches() for e in b if isinstance(e, NpuEvent) and e.args.get("comm") == TAG]
    assert [(e.kind, e.op, e.dev) for e in got] == [("timeout", "heartbeat", 5)]
    assert source.header["extra"]["channels"]["running"] == ["kmsg", "uevent"]
    out = str(tmp_path / "r.json")
    proc = subprocess.run([*CLI, "check", path, "--quiet", "--json", out], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr  # a timeout fails the default CI gate
    with open(out) as f:
        report = json.load(f)
    assert [(f["kind"], f["op"], f["device"]) for f in report["findings"] if f["details"].get("comm") == TAG] == [
        ("timeout", "heartbeat", 5)
    ]
