"""kmsg parsing: /dev/kmsg records, sequence gaps, and the Ascend driver's templates (golden table)."""

from __future__ import annotations

import json
import os
import time
from typing import Any, List, Tuple

import pytest

from npu_trace.device.kmsg import (
    MAX_LINE,
    KmsgMatcher,
    SeqTracker,
    driver_suppressed,
    parse_context,
    parse_kv,
    parse_record,
    suppressed,
    to_event,
)
from npu_trace.device.kmsg_templates import RULES

DATA = os.path.join(os.path.dirname(__file__), "data", "kmsg", "templates.txt")


def golden() -> List[Tuple[str, ...]]:
    with open(DATA) as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip() and not line.startswith("#")]


def expected_of(p: Any) -> Tuple[str, ...]:
    ctx = "-" if p.ctx is None else f"{p.ctx.comm}:{p.ctx.tgid}:{p.ctx.pid}:{p.ctx.cpu}"
    dev = "-" if p.dev is None else str(p.dev)
    return (p.kind, p.op, dev, p.step or "-", ctx, json.dumps(p.kv, sort_keys=True))


@pytest.mark.parametrize("row", golden(), ids=lambda r: r[0][:70])
def test_golden_template(row: Tuple[str, ...]) -> None:
    line, *want = row
    if want[0] == "lost":
        assert driver_suppressed(line) == json.loads(want[5])["lost"]
        assert KmsgMatcher().parse(line) is None
        return
    parsed = KmsgMatcher().parse(line)
    assert parsed is not None
    assert expected_of(parsed) == tuple(want)


def test_every_rule_has_a_golden_line() -> None:
    lines = [row[0] for row in golden()]
    matcher = KmsgMatcher()
    used = set()
    for line in lines:
        p = matcher.parse(line)
        if p is not None and p.module != "kernel":
            rule = matcher._rule(p.module, p.msg)
            assert rule is not None, line
            used.add((rule.text, rule.module, rule.op, rule.contains))
    missing = [r for r in RULES if (r["text"], r["module"], r["op"], r.get("contains", "")) not in used]
    assert not missing


def test_reset_steps_follow_the_simulator_names() -> None:
    from npu_trace.device.hal import RESET_STEPS

    steps = {row[4] for row in golden() if row[1] == "reset_step"}
    assert set(RESET_STEPS) <= steps


def test_bdf_lines_get_the_device_learned_from_earlier_lines() -> None:
    m = KmsgMatcher()
    unbind = "[ascend] [drv_pcie] [devdrv_hot_reset_unbind 5150] <a:1:1> Pcie hotreset, unbind driver. (bdf=3b:00.0)"
    assert m.parse(unbind).dev is None  # type: ignore[union-attr]
    m.parse("[ascend] [drv_pcie] [drv_pcie_remove 2340] <x:1:1> Remove driver exit. (dev_id=5; bdf=3b:00.0)")
    assert m.parse(unbind).dev == 5  # type: ignore[union-attr]
    seeded = KmsgMatcher()
    seeded.bdf_dev["3b:00.0"] = 2
    assert seeded.parse(unbind).dev == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "line",
    [
        "[ascend] [drv_pcie] Device hot reset begin. (dev_id=0)",  # no [func line]
        "[ascend][drv_pcie] [devdrv_hot_reset_device 5200] Device hot reset begin. (dev_id=0)",  # no space
        "[ascend] [ERROR] [drv_pcie] [devdrv_hot_reset_device x5200] Device hot reset begin. (dev_id=0)",
        "[ascend] [WARN] [drv_pcie] [f 1] Device hot reset begin. (dev_id=0)",
        "[ascend] [drv_pcie [f 1] Device hot reset begin.",
    ],
)
def test_near_miss_prefix_is_a_malformed_log(line: str) -> None:
    p = KmsgMatcher().parse(line)
    assert p is not None and p.kind == "log" and p.op == "ascend:malformed"


@pytest.mark.parametrize(
    "module,msg,op",
    [
        ("drv_pcie", "Device hot reset begins now. (dev_id=0)", "ascend:drv_pcie"),  # "begin." required
        ("drv_pcie", "device hot reset begin. (dev_id=0)", "ascend:drv_pcie"),  # case differs
        ("drv_soft_fault", "Heartbeat lost (device_id=1)", "ascend:drv_soft_fault"),  # no "!"
        ("drv_soft_fault", "Wait timeout. (dev_id=1; chan_id=2)", "ascend:drv_soft_fault"),  # not that module's
        ("drv_pcie", " Device hot reset begin. (dev_id=0)", "ascend:drv_pcie"),  # leading space
        ("drv_pcie", "Device hot reset begin. (dev_id=0)", "reset"),  # the real one, for contrast
    ],
)
def test_near_miss_messages(module: str, msg: str, op: str) -> None:
    p = KmsgMatcher().parse(f"[ascend] [ERROR] [{module}] [f 1] <a:1:2> {msg}")
    assert p is not None and p.op == op
    assert p.kind == ("reset_step" if op == "reset" else "log")


def test_same_text_depends_on_the_module() -> None:
    ops = []
    for mod in ("drv_pcie", "uda", "trs_drv"):
        p = KmsgMatcher().parse(f"[ascend] [{mod}] [f 1] Wait timeout. (devid=1)")
        ops.append(p.op if p else None)
    assert ops == ["dma", "uda_detect", "cq_wait"]


def test_other_kernel_lines_give_nothing() -> None:
    m = KmsgMatcher()
    assert m.parse("usb 1-1: new high-speed USB device number 2 using xhci_hcd") is None
    assert m.parse("") is None


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00\x01\x02\xff\xfe[ascend] \x00",
        bytes(range(256)) * 8,
        b"[ascend] [ERROR] [\xff\xfe] [f 1] \x00\x00 (dev_id=\xff)",
    ],
)
def test_binary_junk_never_raises(junk: bytes) -> None:
    text = junk.decode("utf-8", "replace")
    m = KmsgMatcher()
    m.parse(text)
    parse_kv(text)
    assert parse_record(junk) is None or True


def _timed(fn: Any, *args: Any) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


@pytest.mark.parametrize(
    "body",
    [
        "a" * 1_000_000,
        "a=" * 500_000,
        'k="' * 300_000,
        "k:" * 500_000,
        "(" * 500_000,
        "<" + ":" * 500_000 + "> x",
        "<" + "1:" * 500_000 + "> x",
        "[" * 500_000,
        "devid " + "9" * 500_000,
        "Bus " + "0" * 500_000 + " link disable",
    ],
)
def test_extremely_long_lines_are_bounded(body: str) -> None:
    m = KmsgMatcher()
    line = "[ascend] [ERROR] [drv_pcie] [f 1] " + body
    assert _timed(m.parse, line) < 0.5
    assert _timed(m.parse, body) < 0.5
    p = m.parse(line)
    assert p is not None and len(p.msg) <= MAX_LINE


def test_rate_limited_lines() -> None:
    assert driver_suppressed("log_to_printk_and_ringbuf: 12 callbacks suppressed") == 12
    assert driver_suppressed("some_other_func: 3 callbacks suppressed") == 0
    assert suppressed("some_other_func: 3 callbacks suppressed") == ("some_other_func", 3)
    assert driver_suppressed("log_to_printk_and_ringbuf: x callbacks suppressed") == 0
    assert driver_suppressed("log_to_printk_and_ringbuf: 12 callbacks suppressed and more") == 0


def test_parse_record_with_continuation_lines() -> None:
    rec = parse_record(b"13,1234,5678901,-,caller=T42;hello world\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")
    assert rec is not None
    assert (rec.level, rec.facility, rec.seq, rec.ts_us, rec.flags) == (5, 1, 1234, 5678901, "-")
    assert rec.msg == "hello world"
    assert rec.props == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}


@pytest.mark.parametrize("data", [b"", b"garbage", b"1,2;x", b"a,b,c,d;x", b"1,2,3,-"])
def test_parse_record_rejects_malformed(data: bytes) -> None:
    assert parse_record(data) is None


def test_seq_tracker_counts_gaps() -> None:
    t = SeqTracker()
    assert [t.see(s) for s in (10, 11, 15, 16, 16, 20)] == [0, 0, 3, 0, 0, 3]
    assert t.lost == 6


def test_context_forms() -> None:
    assert parse_context("drv_pcie", "<kworker/0:1:12:34> m")[0] == ("kworker/0:1", 12, 34, -1)
    assert parse_context("trs_drv", "<a:b:1:2:3> m")[0] == ("a:b", 1, 2, 3)
    assert parse_context("devmm", "<py:th:1,2> m")[0] == ("py:th", 1, 2, -1)
    assert parse_context("devmm", "<no context> m") == (None, "<no context> m")
    assert parse_context("devmm", "m") == (None, "m")


def test_to_event_converts_the_clock_and_keeps_fields() -> None:
    line = "[ascend] [drv_pcie] [devdrv_hot_reset_device 5200] <npu-smi:4001:4002> Device hot reset begin. (dev_id=3)"
    rec = parse_record(f"5,77,1000,-;{line}\n".encode())
    assert rec is not None
    parsed = KmsgMatcher().parse(rec.msg)
    assert parsed is not None
    ev = to_event(rec, parsed, offset_ns=500)
    assert (ev.ts_ns, ev.kind, ev.dev, ev.op, ev.pid) == (1_000_500, "reset_step", 3, "reset", 4002)
    assert ev.args["step"] == "reset_begin" and ev.args["seq"] == 77 and ev.args["module"] == "drv_pcie"
    assert ev.args["comm"] == "npu-smi" and ev.args["source"] == "kmsg"
