"""npu-smi parsers (golden, from each documented output format), health events, and the health source's
behaviour with a missing, hanging or garbage-printing npu-smi and with a fake sysfs PCIe tree."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Dict

import pytest

from npu_trace.device.npusmi import HealthTracker, error_codes, parse_fields, parse_info, temperature
from npu_trace.sources.npusmi_source import HealthSource, read_link, run_bounded

DATA = Path(__file__).parent / "data" / "npusmi"


def sample(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


def test_info_910b_table() -> None:
    chips = parse_info(sample("info_910b"))
    assert [(c.npu, c.chip, c.name, c.health, c.temp_c, c.bus_id) for c in chips] == [
        (0, 0, "910B3", "OK", 40, "0000:C1:00.0"),
        (1, 0, "910B3", "Warning", 85, "0000:C2:00.0"),
    ]
    assert (chips[0].power_w, chips[0].hbm_used_mb, chips[0].hbm_total_mb) == (93.6, 3162, 65536)
    assert (chips[1].aicore_pct, chips[1].hbm_used_mb) == (12, 20480)


def test_info_a3_table_with_phy_id() -> None:
    chips = parse_info(sample("info_a3"))
    assert [(c.npu, c.chip, c.phy_id, c.power_w) for c in chips] == [(0, 0, 0, 170.1), (0, 1, 1, None)]


def test_ecc() -> None:
    f = parse_fields(sample("ecc"))
    assert (f["hbm_single_bit_error_count"], f["hbm_double_bit_error_count"]) == (255, 1)
    assert f["hbm_single_bit_aggregate_total_err_cnt"] == 1020
    assert f["hbm_double_bit_isolated_pages_count"] == 1 and f["ddr_single_bit_error_count"] == 0
    assert f["npu_id"] == 1


@pytest.mark.parametrize("name,temp", [("temp", 85), ("temp_card", 41), ("sensors", 86)])
def test_temperatures(name: str, temp: int) -> None:
    assert temperature(parse_fields(sample(name))) == temp


def test_sensors_and_memory() -> None:
    s = parse_fields(sample("sensors"))
    assert s["hbm_temperature_c"] == 85 and s["sfp_temperature_c"] == "NA"
    m = parse_fields(sample("memory"))
    assert m["hbm_capacity_mb"] == 65536 and m["hbm_temperature_c"] == 85


def test_health() -> None:
    bad, ok = parse_fields(sample("health")), parse_fields(sample("health_ok"))
    assert bad["health"] == "Warning" and error_codes(bad) == ["80E01801", "80CB8009"]
    assert ok["health"] == "OK" and error_codes(ok) == []


def test_pcie_err() -> None:
    f = parse_fields(sample("pcie_err"))
    assert (f["rx_error_count"], f["lcrc_error_count"], f["retry_count"], f["phy_lane_error_count"]) == (12, 3, 7, 1)


@pytest.mark.parametrize("junk", ["", "\x00\xff garbage\n" * 1000, "|||||\n" * 1000, ": : :\n", "a" * 2_000_000])
def test_garbage_parses_to_nothing_quickly(junk: str) -> None:
    t = time.perf_counter()
    assert parse_info(junk) == []
    parse_fields(junk)
    assert time.perf_counter() - t < 1.0


def test_tracker_events_on_change() -> None:
    tr = HealthTracker()
    first = tr.update(1, {"hbm_single_bit_error_count": 3, "hbm_double_bit_error_count": 0, "npu_temperature_c": 70,
                          "health": "OK"}, 100)  # fmt: skip
    assert sorted(e.kind for e in first) == ["ecc", "log", "thermal"]
    assert tr.update(1, {"hbm_single_bit_error_count": 3, "npu_temperature_c": 70, "health": "OK"}, 200) == []
    later = tr.update(1, {"hbm_single_bit_error_count": 10, "hbm_double_bit_error_count": 1,
                          "npu_temperature_c": 85, "health": "Alarm"}, 300)  # fmt: skip
    ecc = next(e for e in later if e.kind == "ecc")
    assert (ecc.dev, ecc.args["ce_count"], ecc.args["ce_delta"], ecc.args["uce_delta"]) == (1, 10, 7, 1)
    assert next(e for e in later if e.kind == "thermal").args["temp_c"] == 85
    health = next(e for e in later if e.kind == "log")
    assert (health.op, health.args["health"], health.args["previous"]) == ("health", "Alarm", "OK")


# ---- the source with fake npu-smi executables ----------------------------------------------------------
def fake_npu_smi(tmp_path: Path, body: str) -> str:
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def serving_script() -> str:
    files: Dict[str, str] = {"ecc": "ecc", "temp": "temp", "health": "health", "pcie-err": "pcie_err"}
    cases = "".join(f'  {q}) cat "{DATA}/{f}.txt";;\n' for q, f in files.items())
    return f'if [ "$2" = "" ]; then cat "{DATA}/info_910b.txt"; exit 0; fi\ncase "$3" in\n{cases}esac\n'


def test_source_reads_a_working_npu_smi(tmp_path: Path) -> None:
    src = HealthSource(npu_smi=fake_npu_smi(tmp_path, serving_script()), pci_root=str(tmp_path / "nopci"))
    events = src.poll()
    kinds = sorted((e.dev, e.kind) for e in events)
    assert (1, "ecc") in kinds and (1, "thermal") in kinds and (1, "link") in kinds and (0, "log") in kinds
    again = src.poll()  # nothing changed: only the readings every poll makes
    assert sorted(e.op for e in again) == ["npu_smi", "npu_smi", "npu_smi_process"]


def test_missing_npu_smi_says_so_once(tmp_path: Path) -> None:
    src = HealthSource(npu_smi=str(tmp_path / "absent-npu-smi"), pci_root=str(tmp_path))
    first, second = src.poll(), src.poll()
    assert len(first) == 1 and "not found" in first[0].args["note"] and second == []
    assert len(src.notes()) == 1


def test_hanging_npu_smi_is_a_rate_limited_note_never_a_stall(tmp_path: Path) -> None:
    src = HealthSource(timeout_s=0.3, npu_smi=fake_npu_smi(tmp_path, "exec sleep 30\n"), pci_root=str(tmp_path))
    t = time.monotonic()
    first = src.poll()
    second = src.poll()
    assert time.monotonic() - t < 10  # the timeout (0.3 s) ended it, not npu-smi's 30 s; the second: no call
    assert [e.args["note"] for e in first] == ["npu-smi info: timeout"] and second == []


def test_garbage_and_endless_npu_smi(tmp_path: Path) -> None:
    src = HealthSource(timeout_s=30, npu_smi=fake_npu_smi(tmp_path, "head -c 5000 /dev/urandom\n"), pci_root="/x")
    assert [e.args["note"] for e in src.poll()] == ["npu-smi info: no device table in its output"]
    t = time.monotonic()
    status, text = run_bounded([fake_npu_smi(tmp_path, "exec yes garbage\n")], 60.0, limit=100_000)
    assert status == "too_long" and len(text) <= 100_000 and time.monotonic() - t < 30  # the limit, not the timeout


def test_background_thread_never_blocks_read(tmp_path: Path) -> None:
    src = HealthSource(interval_s=0.05, timeout_s=5, npu_smi=fake_npu_smi(tmp_path, "exec sleep 30\n"), pci_root="/x")
    with src:
        t = time.monotonic()
        assert src.read() == []
        assert time.monotonic() - t < 2.5  # a read that waited on the hanging poll would wait out its 5 s timeout


def make_pci(root: Path, bdf: str, vendor: str, speed: str, width: str, mx: str = "16.0 GT/s PCIe") -> Path:
    d = root / bdf
    d.mkdir(parents=True)
    values = {"vendor": vendor, "current_link_speed": speed, "current_link_width": width, "max_link_speed": mx,
              "max_link_width": "16", "aer_dev_correctable": "RxErr 0\nTOTAL_ERR_COR 4\n"}  # fmt: skip
    for name, value in values.items():
        (d / name).write_text(value + "\n")
    return d


def test_pcie_link_degraded(tmp_path: Path) -> None:
    make_pci(tmp_path, "0000:c1:00.0", "0x19e5", "16.0 GT/s PCIe", "16")
    slow = make_pci(tmp_path, "0000:c2:00.0", "0x19e5", "5.0 GT/s PCIe", "8")
    make_pci(tmp_path, "0000:00:01.0", "0x8086", "2.5 GT/s PCIe", "1")
    src = HealthSource(npu_smi=str(tmp_path / "none"), pci_root=str(tmp_path))
    events = src.poll_pcie()
    assert [(e.dev, e.args["bdf"], e.args["degraded"]) for e in events] == [
        (0, "0000:c1:00.0", 0),
        (1, "0000:c2:00.0", 1),
    ]
    assert events[1].args["aer_correctable"] == 4 and events[1].args["width"] == 8
    assert src.poll_pcie() == []
    (slow / "current_link_width").write_text("16\n")
    (slow / "dev_id").write_text("5\n")
    again = src.poll_pcie()
    assert [(e.dev, e.args["width"]) for e in again] == [(5, 16)]
    assert read_link(str(tmp_path / "missing")) == {}


def test_real_sysfs_does_not_fail() -> None:
    HealthSource(npu_smi="/nonexistent").poll_pcie()
    assert os.path.isdir("/sys") or True
