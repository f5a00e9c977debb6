"""The logs people already have: every file of the field samples (tests/data/logs, copied from
../shared/reference/field-samples/logs) and further real pastes from public issues, each file's first line
naming its source. Application errors, kernel lines, fault blocks; import into a recording and check it."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import timezone
from typing import Any, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.cli import main
from npu_trace.detectors.base import Finding
from npu_trace.detectors.links import explain
from npu_trace.device.applog import AppLogParser, split_fused
from npu_trace.device.kernlog import read_line
from npu_trace.device.kfault import FaultAssembler
from npu_trace.device.kmsg import KmsgMatcher
from npu_trace.sources.importer import read_kernel_log

DATA = os.path.join(os.path.dirname(__file__), "data", "logs")
FIELD = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference", "field-samples", "logs")
S = 1_000_000_000


def lines_of(name: str) -> List[str]:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("# source: "), f"{name}: the first line names the source"
    return lines[1:]


def app_errors(name: str) -> List[Any]:
    parser = AppLogParser(tz=timezone.utc)
    out = []
    for line in lines_of(name):
        out += parser.feed(line)
    return out + parser.flush()


def test_every_field_sample_is_here_as_it_was_published() -> None:
    if not os.path.isdir(FIELD):
        pytest.skip("the field samples are not beside this checkout")
    for name in os.listdir(FIELD):
        with open(os.path.join(FIELD, name), "rb") as a, open(os.path.join(DATA, name), "rb") as b:
            assert a.read() == b.read(), name


# ---- application logs ----------------------------------------------------------------------------------------
def test_heartbeat_lost_block_is_one_error_on_device_1() -> None:
    (err,) = app_errors("app-heartbeat-lost.txt")
    assert (err.cls, err.dev, err.pid, err.codes, err.results, err.drv_ret_code) == (
        "heartbeat_lost",
        1,
        389,
        ["EL0001"],
        [507010],
        33,
    )
    assert err.classes == ["heartbeat_lost", "device_absent", "driver_error"]
    assert err.wall_ns == 1777633154 * S + 702326000 and err.res_ns == 1000  # 2026-05-01-10:59:14.702.326 UTC
    assert len(err.lines) == 11 and err.inner_code == "0x7020012"


def test_damaged_halmemalloc_lines_are_two_allocation_failures_on_device_7() -> None:
    first, second = app_errors("app-halMemAlloc-failed.txt")
    assert (first.cls, first.dev, first.drv_ret_code, first.results) == ("alloc_fail", 7, 6, [207001])
    assert (second.cls, second.dev, second.dev_inferred) == ("alloc_fail", 7, True)  # its device_id was cut
    assert "7, ErrCode=207001" in second.lines[0]  # the broken line joined to its rest
    assert second.wall_ns - first.wall_ns == 140_260_000


def test_the_call_site_that_began_a_plog_report_logging_again_is_the_next_failure() -> None:
    rec = ("[ERROR] RUNTIME(5,p):2026-01-01-00:00:00.00{ms}.000 [npu_driver.cc:1534]5 DevMemAlloc:[drv api] "
           "halMemAlloc failed:size=1(bytes), drvRetCode=6, device_id {dev}, ErrCode=207001")  # fmt: skip
    parser = AppLogParser(tz=timezone.utc)
    lines = [rec.format(ms=1, dev=2), "[ERROR] RUNTIME(5,p):2026-01-01-00:00:00.001.500 [api.cc:9]5 rtMalloc failed",
             rec.format(ms=2, dev=3)]  # fmt: skip
    errors = [e for line in lines for e in parser.feed(line)] + parser.flush()
    assert [(e.cls, e.dev, len(e.lines)) for e in errors] == [("alloc_fail", 2, 2), ("alloc_fail", 3, 1)]


def test_a_traceback_without_its_header_and_a_second_report() -> None:
    orphan, report = app_errors("app-el0001-halMemCreate.txt")
    assert (orphan.cls, orphan.dev, orphan.wall_ns) == ("heartbeat_lost", 0, None)
    assert (report.cls, report.drv_ret_code, report.pid, report.results) == ("alloc_fail", 17, 379, [507899])


def test_fused_json_line_from_docker_compose_is_one_device_open_failure() -> None:
    (err,) = app_errors("app-507033-compose-fused.txt")
    assert (err.cls, err.dev, err.pid) == ("device_open", 0, 356)
    assert err.results == [507033] and "E30006" in err.codes
    assert err.wall_ns == 1763550898 * S + 516606000  # CANN's µs time, finer than torch_npu's second


def test_plog_records_of_one_setdevice_are_one_report() -> None:
    (err,) = app_errors("app-107001-plog.txt")
    assert (err.cls, err.dev, err.pid, err.results, err.inner_code) == ("device_open", 0, 42, [107001], "0x7010003")


def test_old_header_chains_with_torch_npus_runtime_error() -> None:
    (err,) = app_errors("app-507033-old-header.txt")
    assert (err.cls, err.dev, err.pid, err.codes[0]) == ("device_open", 0, 528886, "EL0003")
    assert err.wall_ns == 1750764041 * S + 662506000


def test_new_header_behind_a_prefix_names_haldeviceopen() -> None:
    (err,) = app_errors("app-507033-halDeviceOpen.txt")
    assert (err.cls, err.dev, err.drv_ret_code, err.codes) == ("device_open", 1, 7, ["EE1001"])


def test_framework_prefixes_are_read_and_an_unrelated_code_is_not_reported() -> None:
    parser = AppLogParser(tz=timezone.utc, year=2026)
    lines = lines_of("app-vllm-prefixes-507011.txt")
    seen = [parser.read(line) for line in lines]
    assert seen[-1].form == "runtime" and seen[-1].prefix == "Worker_DP0_TP5_EP5"
    assert seen[-1].wall_ns == 1774419242 * S  # 03-25 06:14:02 in 2026, UTC
    assert not [e for line in lines for e in parser.feed(line)] + parser.flush()


def test_split_fused_cuts_at_a_second_header() -> None:
    line = "[ERROR] RUNTIME(1,a):2026-01-01-00:00:00.000.000 [x.cc:1]1 f: x [ERROR] RUNTIME(1,a):2026-01-01-00:00:00.0"
    assert len(split_fused(line)) == 2


# ---- kernel logs ---------------------------------------------------------------------------------------------
def test_field_dmesg_is_one_register_dump_and_device_5_dead() -> None:
    kernel = read_kernel_log(lines_of("dmesg-device-abnormal.txt"))
    assert kernel.clock == "uptime" and kernel.stats["faults"] == 1 and kernel.stats["driver_events"] == 2
    fault, abnormal, unreachable = kernel.events
    assert (fault.kind, fault.op, fault.args["fault"], fault.cpu, fault.pid) == (
        "fault",
        "kernel_fault",
        "register_dump",
        0,
        0,
    )
    assert fault.ts_ns == 452388493000 and fault.args["lines"] == 56 and fault.args["comm"] == "swapper/0"
    assert fault.args["functions"][:3] == ["__do_softirq", "irq_exit", "__handle_domain_irq"]
    assert fault.args["driver_functions"] == []  # the driver is not on this trace
    assert (abnormal.op, abnormal.dev, abnormal.args["comm"], abnormal.pid) == (
        "device_abnormal",
        5,
        "kworker/u385:0",
        15232,
    )
    assert (unreachable.op, unreachable.dev, unreachable.args["ret"]) == ("send_msg_failed", 5, -19)


def test_a_line_naming_only_a_pci_address_takes_the_device_of_the_nearest_line_naming_both() -> None:
    pre = "[ascend] [drv_pcie] [f 1] <a:1:1> "
    kernel = read_kernel_log([f"[  1.000000] {pre}Pcie hotreset, unbind driver. (bdf=3c:00.0)",
                              f"[  1.100000] {pre}Remove driver exit. (dev_id=1; bdf=0000:3c:00.0)",
                              f"[  2.000000] {pre}Pcie hotreset, bus remove. (bdf=3c:00.0)",
                              f"[  3.000000] {pre}Pcie hotreset, bus remove. (bdf=3d:00.0)"])  # fmt: skip
    assert [(ev.args["step"], ev.dev) for ev in kernel.events] == [("unbind", 1), ("remove", 1), ("bus_remove", 1),
                                                                  ("bus_remove", None)]  # fmt: skip
    assert kernel.stats["bdf_resolved"] == 1  # the bus_remove after it: the matcher had learnt the address


def test_slog_lines_carry_both_clocks_and_anchor_the_log() -> None:
    kernel = read_kernel_log(lines_of("slog-device-os-devmm.txt"), tz=timezone.utc)
    assert kernel.anchor is not None and kernel.anchor.source == "log"
    assert [ev.op for ev in kernel.events] == ["ascend:devmm", "ascend:devmm", "ascend:tsdrv", "ascend:tsdrv"]
    assert kernel.events[0].ts_ns == 257382266115000 and kernel.events[0].dev == 0
    assert kernel.anchor.to_trace(kernel.anchor.realtime_ns) == kernel.anchor.mono_ns
    grep = read_line(lines_of("slog-grep-n-event.txt")[0])
    assert grep.form == "slog" and grep.uptime_ns == 2572550901383000 and grep.msg.startswith("[ascend] [ERROR]")


@pytest.mark.parametrize("line,form,up,msg", [
    ("[  452.388493] hello", "dmesg", 452388493000, "hello"),
    ("[Wed Jul 24 10:00:01 2024] [ascend] x", "dmesg_t", None, "[ascend] x"),
    ("[  452.388493] vm kernel: [ascend] x", "dmesg", 452388493000, "[ascend] x"),
    ("Jul 24 10:00:01 vm kernel: [  452.5] [ascend] x", "syslog", 452500000000, "[ascend] x"),
    ("2024-07-24T10:00:01.123456+08:00 vm kernel: [ascend] x", "iso", None, "[ascend] x"),
    ("6,1234,452388493,-;[ascend] x", "kmsg", 452388493000, "[ascend] x"),
    ("12:[  452.388493] hello", "dmesg", 452388493000, "hello"),
    ("[root@host ~]# dmesg | grep ascend", "none", None, ""),
    ("[ascend] [drv_pcie] [f 1] <a:1:1> Device offline. (dev_id=1)", "bare", None, "[ascend] [drv_pcie] [f 1] "
     "<a:1:1> Device offline. (dev_id=1)"),
])  # fmt: skip
def test_kernel_line_forms(line: str, form: str, up: Any, msg: str) -> None:
    got = read_line(line, tz=timezone.utc)
    assert (got.form, got.uptime_ns, got.msg) == (form, up, msg)
    if form == "iso":
        assert got.wall_ns == 1721786401 * S + 123456000


def test_fault_headers_give_kind_cpu_and_task() -> None:
    text = [
        "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:1234]",
        "Modules linked in: asdrv_trs(OE) drv_pcie_host(OE)",
        "CPU: 3 PID: 1234 Comm: kworker/3:1 Tainted: G OE 5.10.0 #1",
        "Call trace:",
        " trs_chan_irq_proc+0x40/0x100 [asdrv_trsbase]",
        " devdrv_dma_done_interrupt+0x10/0x20 [drv_pcie_host]",
        " __do_softirq+0x1/0x2",
        "INFO: task python3:777 blocked for more than 120 seconds.",
        "      Tainted: G OE 5.10.0 #1",
        "rcu: INFO: rcu_sched self-detected stall on CPU",
        "[ascend] [drv_pcie] [f 1] <a:1:1> Device offline. (dev_id=1)",
    ]
    fa = FaultAssembler()
    out = []
    used = []
    for i, line in enumerate(text):
        ok, done = fa.feed(i, line)
        used.append(ok)
        out += done
    out += fa.flush()
    assert [(f.kind, f.cpu, f.pid, f.comm) for f in out] == [
        ("soft_lockup", 3, 1234, "kworker/3:1"),
        ("hung_task", -1, 777, "python3"),
        ("rcu_stall", -1, -1, ""),
    ]
    assert out[0].driver_functions == ["trs_chan_irq_proc [asdrv_trsbase]", "devdrv_dma_done_interrupt [drv_pcie_host]"]
    assert out[0].driver_modules == ["asdrv_trsbase", "drv_pcie_host"]
    assert used[-1] is False and KmsgMatcher().parse(text[-1]).kind == "reset_step"  # type: ignore[union-attr]


def test_a_soft_lockup_of_a_recent_kernel_in_syslog_form_is_one_block() -> None:
    """6.x kernels print the CPU's utilization during the lockup (kernel/watchdog.c) between the header and the
    registers; syslog pastes drop the tab before each `#N:` line. RCU stall lines list `N-...0:` CPUs."""
    host = "Nov 17 15:41:58 host kernel: "
    lines = [host + text for text in (
        "watchdog: BUG: soft lockup - CPU#2 stuck for 78s! [kworker/u16:7:1014]",
        "CPU#2 Utilization every 4s during lockup:", "#1: 100% system, 0% softirq, 1% hardirq, 0% idle",
        "\t#2: 100% system,\t  0% softirq,\t  0% hardirq,\t  0% idle",
        "Modules linked in: asdrv_svm(OE) drv_pcie_host(OE) nfs", "CPU: 2 PID: 1014 Comm: kworker/u16:7 Tainted: G L",
        "RIP: 0010:devmm_free_pages+0x2c/0x80 [asdrv_svm]", "Call Trace:", " <TASK>",
        " devmm_ioctl_free_pages+0x1a/0x30 [asdrv_svm]", " </TASK>",
        "rcu: INFO: rcu_sched detected stalls on CPUs/tasks:", "rcu:     41-...0: (1 GPs behind) idle=7b24/1/0x4",
        "[ascend] [devmm] [devmm_ioctl 77] <p:5,5> Free failed. (dev_id=0)")]  # fmt: skip
    kernel = read_kernel_log(lines, tz=timezone.utc, year=2025)
    faults = [ev for ev in kernel.events if ev.op == "kernel_fault"]
    assert [(f.args["fault"], f.args["lines"]) for f in faults] == [("soft_lockup", 11), ("rcu_stall", 2)]
    assert faults[0].args["driver_functions"] == ["devmm_free_pages [asdrv_svm]", "devmm_ioctl_free_pages [asdrv_svm]"]
    assert (faults[0].cpu, faults[0].pid, faults[0].args["comm"]) == (2, 1014, "kworker/u16:7")
    assert kernel.stats["driver_events"] == 1


def test_a_page_allocation_dump_is_no_fault() -> None:
    fa = FaultAssembler()
    lines = ["modprobe: page allocation failure: order:7, mode:0x2080020(GFP_ATOMIC)",
             "CPU: 2 PID: 15211 Comm: modprobe Tainted: G           O    4.9.0-8-amd64 #1", "Call Trace:",
             " [<ffffffff9e531e54>] ? dump_stack+0x5c/0x78"]  # fmt: skip
    fed = [fa.feed(i, line) for i, line in enumerate(lines)]
    assert fed[0] == (False, []) and all(used for used, _ in fed[1:])
    assert fa.flush() == []


# ---- linking -------------------------------------------------------------------------------------------------
def test_an_app_error_is_explained_by_the_nearest_driver_finding_that_can_cause_it() -> None:
    hb = Finding("timeout", 1, "heartbeat", 10 * S, {})
    reset = Finding("reset_sequence", 1, "reset", 12 * S, {"duration_ns": 3 * S, "status": "complete"})
    other = Finding("timeout", 2, "heartbeat", 11 * S, {})
    app = Finding("app_error", 1, "heartbeat_lost", 11 * S, {"time_resolution_ns": 1000})
    late = Finding("app_error", 1, "device_open", 20 * S, {})
    nothing = Finding("app_error", 3, "alloc_fail", 20 * S, {})
    out = {f.op: f for f in explain([hb, reset, other, app, late, nothing]) if f.kind == "app_error"}
    assert out["heartbeat_lost"].details["explained_by"][0] == {
        "kind": "timeout",
        "device": 1,
        "op": "heartbeat",
        "ts_ns": 10 * S,
        "app_after_ns": S,
    }
    assert out["device_open"].details["explained_by"][0]["kind"] == "reset_sequence"
    assert out["device_open"].details["explained_by"][0]["app_after_ns"] == 5 * S
    assert out["alloc_fail"].details["explained_by"] == []


# ---- import and check ----------------------------------------------------------------------------------------
def test_import_of_the_field_kernel_log_fails_check_on_device_5(tmp_path: Any, capsys: Any) -> None:
    rec, report = str(tmp_path / "k.npt"), str(tmp_path / "k.json")
    assert main(["import", os.path.join(DATA, "dmesg-device-abnormal.txt"), "-o", rec]) == 0
    assert main(["check", rec, "--json", report, "-q"]) == 1
    with open(report) as f:
        got = json.load(f)
    kinds = {(f["kind"], f["device"]) for f in got["findings"]}
    assert {("device_fault", 5), ("kernel_fault", None)} <= kinds
    assert {v["rule"] for v in got["violations"]} == {"device_faults", "kernel_faults"}
    assert got["summary"]["events"]["total"] == 3  # the fault block and the two driver lines


def test_import_with_app_logs_links_them_and_needs_an_anchor(tmp_path: Any, capsys: Any) -> None:
    kernel = tmp_path / "k.txt"
    kernel.write_text("[  100.000000] [ascend] [ERROR] [drv_soft_fault] [hb_read_process 205] <k:1,1> Heartbeat lost! "
                      "(device_id=1; old_count=1; current_count=1; lost_count=3; total_lost_count=3; "
                      "miss_read_count=0; hb_read_fail_count=0).\n")  # fmt: skip
    app = os.path.join(DATA, "app-heartbeat-lost.txt")
    rec = str(tmp_path / "r.npt")
    assert main(["import", str(kernel), "--app-log", app, "-o", rec]) == 2  # dmesg's clock alone: no anchor
    assert "--boot-time" in capsys.readouterr().err
    # the heartbeat-lost report was printed 2026-05-01-10:59:14.702 UTC: boot 100.5 s before it
    boot = "2026-05-01T10:57:34.202326+00:00"
    assert main(["import", str(kernel), "--app-log", app, "-o", rec, "--boot-time", boot, "--tz", "+00:00"]) == 0
    report = str(tmp_path / "r.json")
    assert main(["check", rec, "--json", report, "-q"]) == 1
    with open(report) as f:
        findings = json.load(f)["findings"]
    (err,) = [f for f in findings if f["kind"] == "app_error"]
    assert err["ts_ns"] == 100_500_000_000 and err["device"] == 1
    assert err["details"]["explained_by"][0]["kind"] == "timeout"
    assert err["details"]["explained_by"][0]["ts_ns"] == 100 * S


def test_import_refuses_what_it_cannot_read(tmp_path: Any, capsys: Any) -> None:
    assert main(["import", str(tmp_path / "none.txt"), "-o", str(tmp_path / "x.npt")]) == 2
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"\x17\x08Dtracing7\x00\x00\x08\x00\x10\x00\x00")
    assert main(["import", str(bad), "-o", str(tmp_path / "y.npt")]) == 2
    assert "not a readable trace.dat" in capsys.readouterr().err


# ---- no reader raises on any truncation ----------------------------------------------------------------------
SAMPLES = sorted(n for n in os.listdir(DATA) if n.endswith(".txt"))


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(SAMPLES), cut=st.floats(0, 1), start=st.floats(0, 1), junk=st.text(max_size=40))
def test_no_reader_raises_on_a_cut_sample(name: str, cut: float, start: float, junk: str) -> None:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        text = f.read()
    a = int(len(text) * min(start, cut))
    piece = text[a : int(len(text) * cut)] + junk
    parser = AppLogParser()
    for line in piece.splitlines():
        parser.feed(line)
    parser.flush()
    read_kernel_log(piece.splitlines())


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=600))
def test_the_tracedat_reader_fails_cleanly_on_any_bytes(blob: bytes) -> None:
    from npu_trace.errors import InputError
    from npu_trace.ftrace.tracedat import MAGIC, parse

    for data in (blob, MAGIC + blob, MAGIC + b"7\x00\x00\x08\x00\x10\x00\x00" + blob):
        with contextlib.suppress(InputError):
            parse(data)  # a clean InputError or a value: never another exception
