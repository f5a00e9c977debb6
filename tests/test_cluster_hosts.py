"""A recording's host and clock: the identity and clock-sync state in its header (npu_trace.recording.host), how
the cluster view reads them (npu_trace.cluster.hosts), the evidence ranking and origin choice (pure), and the
applications' collective-timeout reports (HCCL's EI0002 and EI0006, real pastes)."""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from npu_trace.cluster.evidence import FAULT, SIGN, WAIT, evidence_of
from npu_trace.cluster.hosts import UNKNOWN_ERROR_NS, host_of
from npu_trace.cluster.incidents import Item, incidents
from npu_trace.device.applog import AppLogParser
from npu_trace.errors import RecordingError
from npu_trace.recording import RecordingReader, RecordingWriter
from npu_trace.recording.host import (
    SimulatedHost,
    adjtimex_state,
    error_bound,
    parse_chrony_tracking,
    parse_pmc_time_status,
    read_adjtimex,
    read_identity,
    this_host,
)
from npu_trace.recording.schema import validate_header

DATA = os.path.join(os.path.dirname(__file__), "data")
MS, S = 1_000_000, 1_000_000_000


def data(*parts: str) -> str:
    with open(os.path.join(DATA, *parts), encoding="utf-8") as f:
        return f.read()


def test_chrony_and_ptp_answers_are_read() -> None:
    chrony = parse_chrony_tracking(data("clock", "chronyc-tracking.csv"))
    assert chrony == {"offset_ns": 6523, "root_delay_ns": 13639022, "root_dispersion_ns": 1100737, "stratum": 3,
                      "leap": "Normal", "synchronized": True}  # fmt: skip
    assert error_bound(None, chrony) == 6523 + 13639022 // 2 + 1100737
    assert parse_pmc_time_status(data("clock", "pmc-time-status.txt")) == {"master_offset_ns": -4, "gm_present": True}
    assert parse_chrony_tracking("506 Cannot talk to daemon\n") is None and parse_pmc_time_status("") is None


def test_the_kernel_state_bounds_the_error_only_when_synchronized() -> None:
    synced = adjtimex_state(12_000, 300, 0x2001, 0)
    assert synced["synchronized"] and error_bound(synced, None) == 12 * MS
    unsynced = adjtimex_state(16_000_000, 16_000_000, 0x40, 5)
    assert not unsynced["synchronized"] and unsynced["state"] == "error" and error_bound(unsynced, None) is None
    here = read_adjtimex()  # this host's, whatever it is: read without changing anything
    assert here is None or set(here) == {"maxerror_us", "esterror_us", "status", "state", "synchronized"}


def test_identity_is_read_from_the_hosts_files(tmp_path: Any) -> None:
    mid, boot = tmp_path / "machine-id", tmp_path / "boot_id"
    mid.write_text("3D1219C7C4C5404AAA1F6D2A48ADFDA4\n")
    boot.write_text("554ba7ab-7a1f-4d2f-b78b-43ba55c6aa4d\n")
    got = read_identity((str(tmp_path / "none"), str(mid)), str(boot))
    assert got["machine_id"] == "3d1219c7c4c5404aaa1f6d2a48adfda4" and got["boot_id"].startswith("554ba7ab")
    mid.write_text("not an id\n")
    assert read_identity((str(mid),), str(tmp_path / "none"))["machine_id"] == ""


def header(**extra: Any) -> Any:
    from benchmarks.gen_recording import Spec, kernel_formats
    from benchmarks.gen_recording import header as gen_header
    from npu_trace.ftrace.format import parse_header_page

    _, texts, page = kernel_formats()
    return {**gen_header(Spec(), texts, page, parse_header_page(page).page_size), **extra}


def test_a_header_with_identity_and_clock_keeps_its_checksum_and_reads_back(tmp_path: Any) -> None:
    path = str(tmp_path / "a.npt")
    mine = this_host()
    with RecordingWriter(path, header(**mine)):
        pass
    reader = RecordingReader(path)
    assert reader.header["host_identity"] == mine["host_identity"] and reader.checksum is not None
    host = host_of(reader.header, "a.npt")
    assert host.identity == "host" and host.key == f"machine:{mine['host_identity']['machine_id']}"
    assert host.error_known == (mine["clock_sync"]["error_ns"] is not None)
    with pytest.raises(RecordingError, match="host_identity"):
        validate_header(header(host_identity="node1", magic="NPUTRACE", schema=1, compression="zstd"))


def test_older_and_simulated_headers() -> None:
    old = host_of(header(), "old.npt")
    assert (old.identity, old.key, old.error_ns, old.error_known) == ("hostname", "host:npu-trace-generated",
                                                                     UNKNOWN_ERROR_NS, False)  # fmt: skip
    imported = host_of({**header(), "host": ""}, "imp.npt")
    assert (imported.identity, imported.key) == ("file", "file:imp.npt")
    sim = SimulatedHost("n1", "a" * 32, "b", 30 * MS, 50 * MS)
    h = header(**sim.header())
    h["clock_anchor"] = sim.anchor(h["clock_anchor"])
    got = host_of(h, "s.npt")
    assert got.identity == "simulated" and got.error_ns == 50 * MS
    assert got.wall(1_000 * S) == old.wall(1_000 * S) + 30 * MS  # its wall clock reads 30 ms ahead


def item(host: str, dev: int, kind: str, rank: int, at: int, err: int = 50 * MS) -> Item:
    return Item(host, host, dev, kind, rank, kind, at, at, err, f"{host}.npt")


def test_a_fault_outranks_an_earlier_timeout_and_time_decides_among_equals() -> None:
    items = [item("b", 0, "timeout", WAIT, 0), item("a", 1, "uce", FAULT, 2 * S), item("c", 0, "reset", FAULT, 3 * S)]
    (found,) = incidents(items)
    d = found["details"]
    assert (d["origin"]["host"], d["origin"]["device"]) == ("a", 1) and "origin_not_told_apart_from" not in d
    assert [c["host"] for c in d["consequences"]] == ["b", "c"]
    assert not d["consequences"][0]["after_beyond_uncertainty"] and d["consequences"][0]["after_origin_ns"] < 0
    close = [item("a", 0, "uce", FAULT, 0), item("b", 0, "uce", FAULT, 60 * MS)]
    d = incidents(close)[0]["details"]
    assert d["origin"]["host"] == "a" and d["origin_not_told_apart_from"][0]["host"] == "b"


def test_incidents_are_split_by_quiet_time_and_the_order_of_items_does_not_matter() -> None:
    items = [item("a", 0, "timeout", WAIT, 0), item("b", 0, "heartbeat", FAULT, 3600 * S)]
    one, two = incidents(items), incidents(list(reversed(items)))
    assert one == two and len(one) == 2
    assert one[0]["details"]["origin_missing"] and one[0]["op"] == "origin_missing"


def test_evidence_from_check_findings() -> None:
    findings = [
        {"kind": "timeout", "op": "heartbeat", "device": 0, "ts_ns": 5, "details": {}},
        {"kind": "timeout", "op": "cq_wait", "device": 1, "ts_ns": 6, "details": {}},
        {"kind": "spike", "op": "halMemAlloc", "device": 1, "ts_ns": 7, "details": {}},
        {"kind": "app_error", "op": "collective_timeout", "device": 1, "ts_ns": 8,
         "details": {"codes": ["EI0002"], "results": [507048]}},
        {"kind": "app_error", "op": "heartbeat_lost", "device": 0, "ts_ns": 9, "details": {}},
    ]  # fmt: skip
    got = evidence_of(findings, {0: {"ecc_first_ns": 1, "uce_first_ns": 3}})
    assert [(e.ts_ns, e.kind, e.rank) for e in got] == [
        (1, "ecc", SIGN), (3, "uce", FAULT), (5, "heartbeat", FAULT), (6, "timeout", WAIT),
        (8, "app:collective_timeout", WAIT), (9, "app:heartbeat_lost", SIGN)]  # fmt: skip
    assert got[4].what == "application: collective timeout (EI0002,507048)"


def parse(name: str) -> List[Any]:
    parser = AppLogParser()
    out: List[Any] = []
    for line in data("logs", name).splitlines()[1:]:
        out += parser.feed(line)
    return out + parser.flush()


def test_hccl_collective_timeouts_are_read_as_such() -> None:
    (notify,) = parse("app-hccl-ei0002-notify.txt")
    assert (notify.cls, notify.dev, notify.pid, notify.codes) == ("collective_timeout", 0, 2969, ["EI0002"])
    (socket,) = parse("app-hccl-ei0006-socket.txt")
    assert (socket.cls, socket.dev, socket.pid, socket.codes) == ("collective_timeout", 1, 1292363, ["EI0006"])
