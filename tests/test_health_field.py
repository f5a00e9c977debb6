"""The health channel on npu-smi as it really is: a fake npu-smi that answers `info` with a real paste (every field
sample with a table) and fails every `-t` query with the DCMI error containers print. From `info` alone come,
per chip and poll, one reading (health, temperature, power, AICore %, memory used/total as printed, Bus-Id)
and one event per process row; each failing query is named once, whatever the chips and polls; the chips get
the devices the driver's messages use."""

from __future__ import annotations

import stat
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from npu_trace.device.npusmi import parse_table
from npu_trace.device.npusmi_events import PROCESS, READING
from npu_trace.events import NpuEvent
from npu_trace.sources.host_channels import Channels
from npu_trace.sources.npusmi_source import QUERIES, HealthSource

FIELD = Path(__file__).parent / "data" / "npusmi" / "field"
TABLES = sorted(p.name for p in FIELD.glob("*.txt") if parse_table(p.read_text()).chips)
DCMI = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is -8005"


def info_only(tmp_path: Path, sample: str) -> str:
    """An npu-smi answering `info` with the paste (its source line left out), every other command with the DCMI
    error on stderr and exit code 255; each call is logged into calls.log."""
    body = (FIELD / sample).read_text().split("\n", 1)[1]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "info.txt").write_text(body)
    script = tmp_path / "npu-smi"
    script.write_text(f"""#!/bin/sh
echo "$*" >> "{tmp_path}/calls.log"
if [ "$*" = "info" ]; then cat "{tmp_path}/info.txt"; exit 0; fi
printf '%s\\n' "{DCMI.splitlines()[0]}" "{DCMI.splitlines()[1]}" >&2
exit 255
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def calls(tmp_path: Path) -> List[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


def of(events: List[NpuEvent], op: str) -> List[NpuEvent]:
    return [e for e in events if e.kind == "log" and e.op == op]


@pytest.mark.parametrize("sample", TABLES)
def test_info_alone_makes_every_chip_and_process_event(tmp_path: Path, sample: str) -> None:
    table = parse_table((FIELD / sample).read_text())
    src = HealthSource(npu_smi=info_only(tmp_path, sample), pci_root=str(tmp_path / "no-pci"))
    first = src.poll()
    readings, procs = of(first, READING), of(first, PROCESS)
    assert [(e.args["npu"], e.args["chip"]) for e in readings] == [(c.npu, c.chip) for c in table.chips]
    for ev, chip in zip(readings, table.chips):
        want = {"health": chip.health, "temp_c": chip.temp_c, "power_w": chip.power_w, "aicore_pct": chip.aicore_pct,
                "used_mb": chip.used_mb, "total_mb": chip.total_mb, "memory": chip.memory, "bus_id": chip.bus_id}
        assert {k: ev.args[k] for k in want} == want
        assert ev.ts_ns == readings[0].ts_ns and ev.args["source"] == "npu-smi"
    assert sorted((e.args["npu"], e.args["chip"], e.args["pid"], e.args["memory_mb"]) for e in procs) == sorted(
        (p.npu, p.chip, p.pid, p.memory_mb) for p in table.processes)  # fmt: skip
    notes = [e.args["note"] for e in first if e.op == "health_note"]
    failed = [n for n in notes if "-8005" in n]
    assert len(failed) == len(QUERIES)  # each query named once, however many chips failed it
    assert all("not read while it fails" in n for n in failed)
    second = src.poll()
    assert len(of(second, READING)) == len(table.chips) and len(of(second, PROCESS)) == len(table.processes)
    assert [e for e in second if e.op == "health_note"] == []  # not per poll
    assert len(src.notes()) == len(notes)


def test_readings_come_with_their_process_rows_first(tmp_path: Path) -> None:
    src = HealthSource(npu_smi=info_only(tmp_path, "info-01.txt"), pci_root=str(tmp_path / "no-pci"))
    table_ops = [(e.op, e.args["npu"], e.args["chip"]) for e in src.poll() if e.op in (READING, PROCESS)]
    assert table_ops[:10] == [(PROCESS, 0, 0)] * 8 + [(READING, 0, 0), (PROCESS, 0, 1)]
    first_reading = next(e for e in src.poll() if e.op == READING)
    assert first_reading.args["processes"] == 8 and first_reading.dev == 0


def test_health_and_temperature_from_the_table_when_queries_fail(tmp_path: Path) -> None:
    src = HealthSource(npu_smi=info_only(tmp_path, "info-06.txt"), pci_root=str(tmp_path / "no-pci"))
    events = src.poll()
    thermal = sorted((e.dev, e.args["temp_c"]) for e in events if e.kind == "thermal")
    health = sorted((e.dev, e.args["health"]) for e in events if e.op == "health")
    assert thermal == [(0, 55), (1, 52)] and health == [(0, "OK"), (1, "OK")]


def test_failing_queries_back_off(tmp_path: Path) -> None:
    src = HealthSource(npu_smi=info_only(tmp_path, "info-02.txt"), pci_root=str(tmp_path / "no-pci"))
    per_poll = []
    for _ in range(8):
        before = len(calls(tmp_path)) if (tmp_path / "calls.log").exists() else 0
        src.poll()
        per_poll.append(len(calls(tmp_path)) - before - 1)  # the -t runs of the poll (its `info` left out)
    chips = 8
    # every query of every chip: tried, left out 1 poll, tried, left out 2, tried, left out 4 ...
    assert per_poll == [chips * len(QUERIES), 0, chips * len(QUERIES), 0, 0, chips * len(QUERIES), 0, 0]


def test_a_query_that_works_again_is_said(tmp_path: Path) -> None:
    script = Path(info_only(tmp_path, "info-02.txt"))
    src = HealthSource(npu_smi=str(script), pci_root=str(tmp_path / "no-pci"))
    src.poll()
    script.write_text(f'#!/bin/sh\nif [ "$*" = "info" ]; then cat "{tmp_path}/info.txt"; exit 0; fi\n'
                      'printf "\\tHealth                         : OK\\n"\n')  # fmt: skip
    src.poll()  # left out this poll
    notes = [e.args["note"] for e in src.poll() if e.op == "health_note"]
    assert sorted(notes) == sorted(f"npu-smi info -t {q} works again" for q in QUERIES)


@pytest.mark.parametrize(
    "sample,devices",
    [
        ("info-01.txt", list(range(16))),  # A3: the Phy-ID column
        ("vllm-ascend-6063-310p3-container.txt", list(range(8))),  # 310P: the Device column (ids 0, 96, 32768..)
        ("info-02.txt", list(range(8))),  # 910B: the NPU id of a one-chip card
        ("vllm-ascend-4505-910b2c-x16.txt", list(range(16))),
    ],
)
def test_devices_of_the_chips(tmp_path: Path, sample: str, devices: List[int]) -> None:
    src = HealthSource(npu_smi=info_only(tmp_path, sample), pci_root=str(tmp_path / "no-pci"))
    assert [e.dev for e in of(src.poll(), READING)] == devices


def make_function(root: Path, bdf: str, dev_id: Optional[int]) -> None:
    d = root / bdf
    d.mkdir(parents=True)
    (d / "vendor").write_text("0x19e5\n")
    if dev_id is not None:
        (d / "dev_id").write_text(f"{dev_id}\n")


def test_the_drivers_dev_id_in_sysfs_wins_for_a_bus_id_of_its_own(tmp_path: Path) -> None:
    pci = tmp_path / "pci"
    make_function(pci, "0000:c1:00.0", 5)  # NPU 0 of info-02 is the driver's device 5 (a container's view)
    make_function(pci, "0000:83:00.0", 9)  # both chips of info-06's card: ambiguous, the Device column decides
    first = of(HealthSource(npu_smi=info_only(tmp_path / "a", "info-02.txt"), pci_root=str(pci)).poll(), READING)
    assert [e.dev for e in first] == [5, 1, 2, 3, 4, 5, 6, 7]
    duo = of(HealthSource(npu_smi=info_only(tmp_path / "b", "info-06.txt"), pci_root=str(pci)).poll(), READING)
    assert [e.dev for e in duo] == [0, 1]


def test_a_dcmi_error_instead_of_a_table_is_named_once(tmp_path: Path) -> None:
    script = tmp_path / "npu-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"{DCMI.splitlines()[1]}\" >&2\nexit 255\n")
    script.chmod(0o755)
    src = HealthSource(npu_smi=str(script), pci_root=str(tmp_path))
    notes = [e.args["note"] for e in src.poll()]
    assert notes == ["npu-smi info: failed:255 (dcmi module initialize failed. ret is -8005)"]
    assert src.poll() == [] and src.poll() == []


def test_the_health_channel_delivers_them(tmp_path: Path) -> None:
    """Through the channels, as a session reads them: the background poll's events, in time order."""
    channels = Channels(["health"], npu_smi=info_only(tmp_path, "vllm-ascend-6063-310p3-container.txt"),
                        health_interval_s=0.05)  # fmt: skip
    got: List[NpuEvent] = []
    with channels:
        deadline = time.monotonic() + 60
        while len(of(got, READING)) < 16 and time.monotonic() < deadline:  # two polls
            got += channels.read()
            time.sleep(0.01)
    readings = of(got, READING)
    assert len(readings) >= 16 and [e.dev for e in readings[:8]] == list(range(8))
    assert [e.ts_ns for e in got] == sorted(e.ts_ns for e in got)
    assert sum(1 for e in got if e.op == PROCESS) >= 3
    per_note: Dict[Any, int] = {}
    for text in channels.notes:
        per_note[text] = per_note.get(text, 0) + 1
    assert all(n == 1 for n in per_note.values()) and len([t for t in channels.notes if "-8005" in t]) == 4
