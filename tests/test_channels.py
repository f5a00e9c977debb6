"""The other channels beside ftrace (kmsg, uevents, npu-smi): opened one by one, recorded, replayed, checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List

import pytest

from npu_trace.device.kmsg import write_kmsg
from npu_trace.errors import UsageError
from npu_trace.events import NpuEvent
from npu_trace.sources import host_channels as channels_mod
from npu_trace.sources.host_channels import Channels, parse_channels
from npu_trace.sources.replay_source import ReplaySource
from replay_support import replayed_items
from smi_support import now_ns, wait_for_polls

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
        lines = [line for line in proc.stderr.strip().splitlines() if "not on this host" not in line]  # notes
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr


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
    """--profile ascend where the driver is absent: its tracepoints are named once, and this host's interrupts
    are not traced (none is an NPU's); kmsg and uevents still recorded; replay and check see the driver's
    heartbeat-lost line as a timeout of device 5."""
    path = str(tmp_path / "a.npt")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "--profile", "ascend", "--channels", "kmsg,uevent"],
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert rec.stderr is not None
    first = ""
    for line in rec.stderr:  # up to the line that says it records: the channels were opened before it
        first += line
        if "recording to" in line:
            break
    write_kmsg("<3>" + HB_LOST.format(tag=TAG, pid=os.getpid()))
    rec.send_signal(signal.SIGINT)  # after the line is in the log: the recorder's last read at the stop takes it
    rest = rec.stderr.read()
    assert rec.wait(timeout=60) == 0, first + rest
    said = first + rest
    assert said.count("no NPU interrupt on this host") == 1, said
    assert "none of the profile's events exists here (trs_chan:*, trs_core:*)" in said
    assert "with kmsg, uevent; recording to" in first, said
    assert "irq:irq_handler_entry" not in ReplaySource(path).header["events"]
    source = ReplaySource(path)
    got = [e for e in replayed_items(source) if isinstance(e, NpuEvent) and e.args.get("comm") == TAG]
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


@pytest.mark.privileged
def test_ecc_reset_is_one_sequence_told_by_ftrace_kmsg_and_uevents(sim_loaded: Any, tmp_path: Any) -> None:
    """The ecc-reset scenario live, recorded with every channel, then check: one reset sequence, every step in
    order, each told by the driver probe and its kmsg line (and a uevent where a real reset sends one); its
    precursor window shows the ECC climb and the temperature peak the simulator injected (probe and npu-smi)."""
    from npu_trace import sim
    from npu_trace.device.hal import RESET_STEPS
    from npu_trace.sim.side_channels import SideChannels

    path, report_path = str(tmp_path / "ecc.npt"), str(tmp_path / "report.json")
    side = SideChannels(npu_smi_dir=str(tmp_path / "bin"))
    smi = str(tmp_path / "bin" / "npu-smi")
    rec = subprocess.Popen([*CLI, "record", "-o", path, "-e", "ascend:*", "--npu-smi", smi,
                            "--health-interval", "0.3"], stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert "with kmsg, uevent, health" in line, line
    try:
        truth = sim.run_scenario("ecc-reset", 3, 3.0, 300, 1, str(tmp_path / "truth.json"), ensure_loaded=False,
                                 channels=side)  # fmt: skip
        wait_for_polls(str(tmp_path / "bin"), now_ns())  # a whole poll of the final state (kmsg and uevents:
        # the recorder's last read)
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    proc = subprocess.run([*CLI, "check", path, "--quiet", "--json", report_path], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # a reset sequence fails the default gate
    with open(report_path) as f:
        report = json.load(f)
    (reset,) = [f for f in report["findings"] if f["kind"] == "reset_sequence"]
    d = reset["details"]
    assert d["status"] == "complete" and not d["out_of_order"] and d["missing"] == []
    assert [s["step"] for s in d["steps"]] == list(RESET_STEPS)
    by_uevent = {"unbind", "remove", "bus_remove", "rescan", "probe", "half_probe_finish"}
    for step in d["steps"]:
        want = {"ftrace", "kmsg"} | ({"uevent"} if step["step"] in by_uevent else set())
        assert set(step["sources"]) == want, step
    assert d["trigger"]["op"] == "heartbeat"
    smi_truth = truth["channels"]["npu_smi"]
    climb, (peak,) = smi_truth["ecc_climb"], smi_truth["temp_peak"]
    ecc = d["precursor"]["ecc"]
    assert (ecc["ce_last"], ecc["uce_last"]) == (climb[-1]["ce"], climb[-1]["uce"]) and ecc["ce_delta"] > 0
    assert d["precursor"]["max_temp_c"] == peak["temp_c"]
    # npu-smi told the same climb: the health summary of device 0, and at least one reading from it
    health = report["summary"]["health"]["devices"]["0"]
    assert health["ce_last"] == climb[-1]["ce"] and health["max_temp_c"] == peak["temp_c"]
    source = ReplaySource(path)
    smi_events = [
        e for e in replayed_items(source) if isinstance(e, NpuEvent) and e.args.get("source") == "npu-smi"
    ]
    assert {e.kind for e in smi_events} >= {"ecc", "thermal"}


def test_events_naming_only_a_pci_address_get_their_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's "unbind driver. (bdf=3b:00.0)" line has no device: the uevent of the same step tells it
    (even in a later read), a kmsg line with both tells it for later lines; an unknown one waits, then goes on."""
    feed: List[List[NpuEvent]] = []

    class FakeKmsg:
        offset_measured = True
        offset_error_ns = 0
        caught_up = True
        held_ns = None  # no kernel fault block being read

        def open(self) -> None:
            pass

        def read(self, drain: bool = False) -> List[NpuEvent]:
            return feed.pop(0) if feed else []

        def finish(self) -> List[NpuEvent]:
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(channels_mod, "KmsgSource", FakeKmsg)
    monkeypatch.setattr(channels_mod, "sysfs_bdf_dev", lambda: {"0000:3c:00.0": 7})
    clock = [100.0]
    monkeypatch.setattr(channels_mod.time, "monotonic", lambda: clock[0])

    def step(ts: int, dev: Any, bdf: str, source: str = "kmsg") -> NpuEvent:
        return NpuEvent(ts, "reset_step", dev, "reset", -1, -1, {"source": source, "bdf": bdf, "step": "unbind"})

    with Channels(["kmsg"]) as ch:
        feed.append([step(1, None, "3b:00.0")])
        assert ch.read() == []  # held: nothing tells 3b:00.0's device yet
        feed.append([step(2, 0, "0000:3b:00.0", "uevent"), step(3, None, "3c:00.0")])
        got = ch.read()
        assert [(e.ts_ns, e.dev) for e in got] == [(1, 0), (2, 0), (3, 7)]  # sysfs tells 3c:00.0
        feed.append([step(4, None, "3d:00.0")])
        assert ch.read() == []
        clock[0] += 1.0
        assert [(e.ts_ns, e.dev) for e in ch.read()] == [(4, None)]  # waited long enough: passed on as is
        feed.append([step(5, None, "3e:00.0")])
        assert [(e.ts_ns, e.dev) for e in ch.read(final=True)] == [(5, None)]  # the last read holds nothing


def test_a_bpf_channel_that_fails_closes_the_channels_opened_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_trace.bpf import source as bpf_source
    from npu_trace.bpf.config import BpfConfig
    from npu_trace.errors import KernelFeatureError

    closed: List[str] = []

    class FakeUevent:
        def open(self) -> None:
            pass

        def close(self) -> None:
            closed.append("uevent")

    class FailingBpf:
        def __init__(self, config: Any) -> None:
            pass

        def start(self) -> None:
            raise KernelFeatureError("kernel headers missing")

    monkeypatch.setattr(channels_mod, "UeventSource", FakeUevent)
    monkeypatch.setattr(bpf_source, "BpfSource", FailingBpf)
    ch = Channels(["uevent"], bpf=BpfConfig(hal=False, irq=True))
    with pytest.raises(KernelFeatureError, match="headers"):
        ch.open()
    assert closed == ["uevent"] and ch.uevent is None
