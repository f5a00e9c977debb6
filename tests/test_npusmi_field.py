"""npu-smi as it really is: every real paste under tests/data/npusmi/field/ (the shared field samples and further
pastes from public issues, each file's first line naming its source) read by the parsers, what each one holds
checked by hand; and no parser raises on any cut of any sample, nor reads a chip or a process the whole text
does not hold (property tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_trace.device.npusmi import error_codes, parse_fields, parse_table, temperature
from npu_trace.device.npusmi_info import ChipInfo, InfoTable

FIELD = Path(__file__).parent / "data" / "npusmi" / "field"
SAMPLES = sorted(p.name for p in FIELD.glob("*.txt"))
ALL_TEXT = sorted([*SAMPLES, *(f"../{p.name}" for p in FIELD.parent.glob("*.txt"))])


def text(name: str) -> str:
    return (FIELD / name).read_text()


def table(name: str) -> InfoTable:
    return parse_table(text(name))


def chips(name: str) -> List[Tuple[Any, ...]]:
    """(npu, chip, name, health, phy_id, device_id, memory, used, total, bus_id) of each chip."""
    return [(c.npu, c.chip, c.name, c.health, c.phy_id, c.device_id, c.memory, c.used_mb, c.total_mb, c.bus_id)
            for c in table(name).chips]  # fmt: skip


def test_every_sample_names_its_source() -> None:
    assert len(SAMPLES) >= 20
    for name in ALL_TEXT:
        first = (FIELD / name).read_text().splitlines()[0]
        assert first.startswith("# source: ") and len(first) > 40, name


# ---- the shared field samples --------------------------------------------------------------------------
def test_a3_two_rows_per_chip_with_phy_id() -> None:
    t = table("info-01.txt")
    assert t.version == "25.2.0" and len(t.chips) == 16 and t.notes == []
    assert [(c.npu, c.chip, c.phy_id) for c in t.chips[:4]] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    first, second = t.chips[:2]
    assert (first.power_w, first.temp_c, first.aicore_pct, first.hbm_used_mb, first.hbm_total_mb) == (
        211.3, 43, 7, 61609, 65536)  # fmt: skip
    assert second.power_w is None  # "-": the card reports its power on its first chip
    assert (t.chips[-1].phy_id, t.chips[-1].bus_id, t.chips[-1].used_mb) == (15, "0000:83:00.0", 61631)
    assert len(t.processes) == 23 and t.process_npus == list(range(8))
    assert {p.name for p in t.processes} == {""}  # the names are empty in this paste
    assert [(p.chip, p.pid, p.memory_mb) for p in t.processes if p.npu == 0][-1] == (1, 929405, 58780)
    assert sum(p.memory_mb for p in t.processes if (p.npu, p.chip) == (0, 0)) == 8 * 141
    # one pid holds memory on several chips
    assert [(p.npu, p.chip) for p in t.processes if p.pid == 930242] == [(0, 0), (1, 1)]


def test_910b3_idle_with_a_prompt_line() -> None:
    t = table("info-02.txt")
    assert t.version == "23.0.7" and t.notes == [] and t.processes == []
    assert chips("info-02.txt")[0] == (0, 0, "910B3", "OK", None, None, "hbm", 3338, 65536, "0000:C1:00.0")
    assert [c.npu for c in t.chips] == list(range(8)) and t.process_npus == list(range(8))
    assert t.chips[0].bdf == "0000:c1:00.0"


def test_310p3_106_columns_device_memory_power_na() -> None:
    t = table("info-06.txt")
    assert t.version == "25.0.rc1.1" and t.notes == []
    assert chips("info-06.txt") == [
        (6, 0, "310P3", "OK", None, 0, "device", 1175, 44280, "0000:83:00.0"),
        (6, 1, "310P3", "OK", None, 1, "device", 8322, 43693, "0000:83:00.0"),  # both chips on one Bus-Id
    ]
    assert t.chips[0].power_w is None and t.chips[1].hugepages_used == 3262 and t.chips[0].hbm_used_mb is None
    assert [(p.npu, p.chip, p.pid, p.name, p.memory_mb) for p in t.processes] == [(6, 1, 293029, "python3.11", 6612)]
    assert t.process_npus == [6]


def test_910b4_116_columns_without_closing_border() -> None:
    t = table("info-09.txt")
    assert t.version == "26.0.rc1" and t.notes == []
    assert chips("info-09.txt") == [(0, 0, "910B4", "OK", None, None, "hbm", 2871, 32768, "0000:C1:00.0")]
    assert t.chips[0].power_w == 82.6 and t.process_npus == [0] and t.processes == []


def test_310p3_in_a_vm_with_a_short_header_row() -> None:
    t = table("info-11.txt")
    assert t.version == "22.0.4"
    assert chips("info-11.txt") == [(7, 0, "310P3", "OK", None, 0, "device", 1805, 21527, "0000:00:07.0")]
    assert t.notes == ["no process section (the output ends after the chips): the processes are not known"]


def test_key_value_samples() -> None:
    ecc = parse_fields(text("ecc-01.txt"))
    assert (ecc["npu_id"], ecc["chip_count"], ecc["chip_id"]) == (0, 1, 0)
    assert (ecc["hbm_single_bit_error_count"], ecc["hbm_double_bit_error_count"]) == (0, 0)
    assert ecc["ddr_double_bit_isolated_pages_count"] == 0 and len(ecc) == 15
    health = parse_fields(text("health-05.txt"))  # "Health Status", one space deeper
    assert health == {"health": "OK", "error_code": "NA", "error_information": "NA"}
    assert error_codes(health) == []
    memory = parse_fields(text("memory-07.txt"))
    assert (memory["hbm_capacity_mb"], memory["hbm_temperature_c"]) == (65536, 46)
    assert memory["hbm_manufacturer_id"] == "0x57"
    assert temperature(memory) is None  # -t memory has no chip temperature, only HBM's
    for name in ("ecc-01.txt", "health-05.txt", "memory-07.txt"):
        assert table(name).chips == []


# ---- further pastes from public issues -------------------------------------------------------------------
def test_310p3_cards_with_npu_ids_not_0_to_n_in_a_container() -> None:
    t = table("vllm-ascend-6063-310p3-container.txt")
    assert t.version == "25.3.rc1" and t.notes == []
    assert [(c.npu, c.chip, c.device_id) for c in t.chips] == [
        (0, 0, 0), (0, 1, 1), (96, 0, 2), (96, 1, 3), (32768, 0, 4), (32768, 1, 5), (32896, 0, 6), (32896, 1, 7)]
    assert (t.chips[0].used_mb, t.chips[0].total_mb, t.chips[0].hugepages_used) == (35552, 44278, 16885)
    assert [(p.npu, p.chip, p.pid, p.memory_mb) for p in t.processes] == [
        (0, 0, 326429, 33842), (0, 0, 326430, 108), (0, 1, 326430, 34086)]  # one pid on two chips
    assert t.process_npus == [0, 96, 32768, 32896]


def test_310p3_idle_cards_npu_ids_32_and_32800() -> None:
    t = table("vllm-ascend-6842-310p3-ids.txt")
    assert [c.npu for c in t.chips] == [0, 0, 32, 32, 32768, 32768, 32800, 32800]
    assert [c.device_id for c in t.chips] == list(range(8)) and t.process_npus == [0, 32, 32768, 32800]
    assert (t.chips[-1].used_mb, t.chips[-1].total_mb, t.processes, t.notes) == (1216, 43693, [], [])


def test_910b2c_x16_with_a_four_part_version() -> None:
    t = table("vllm-ascend-4505-910b2c-x16.txt")
    assert t.version == "24.1.rc2.2" and t.notes == [] and len(t.chips) == 16
    assert chips("vllm-ascend-4505-910b2c-x16.txt")[0] == (
        0, 0, "910B2C", "OK", None, None, "hbm", 65489, 65536, "0000:5A:00.0")  # fmt: skip
    assert [(p.npu, p.pid, p.memory_mb) for p in t.processes][:3] == [(0, 472232, 6313), (0, 495142, 55751),
                                                                      (1, 495146, 60179)]  # fmt: skip
    assert t.process_npus == list(range(16))


def test_910prob_device_memory_beside_hbm() -> None:
    t = table("vllm-ascend-1047-910prob.txt")
    first = t.chips[0]
    assert (first.name, first.mem_used_mb, first.mem_total_mb, first.hbm_used_mb, first.hbm_total_mb) == (
        "910ProB", 2387, 13553, 18, 32768)  # fmt: skip
    assert (first.memory, first.used_mb, first.total_mb) == ("hbm", 18, 32768)  # HBM where there is HBM
    assert len(t.chips) == 8 and t.process_npus == list(range(8)) and t.notes == []


def test_vnpu_in_a_pod_after_environment_lines() -> None:
    t = table("hami-vnpu-in-pod.txt")
    assert chips("hami-vnpu-in-pod.txt") == [(7, 0, "310Pvir01", "OK", None, 0, "device", 249, 2690, "0000:00:07.0")]
    assert t.version == "22.0.4" and t.chips[0].bdf == "0000:00:07.0"


@pytest.mark.parametrize("name,vnpu,used,total", [("hami-vnpu-fragment-vir02.txt", "310Pvir02", 497, 5381),
                                                   ("hami-vnpu-fragment-vir04.txt", "310Pvir04", 995, 10763)])
def test_fragments_without_header_rows(name: str, vnpu: str, used: int, total: int) -> None:
    t = table(name)
    assert t.version is None
    assert chips(name) == [(7, 0, vnpu, "OK", None, 0, "device", used, total, "0000:00:07.0")]
    assert t.notes[0] == "no header rows: the chips' second id read as Device (a box without an HBM column)"


def test_a3_116_columns_cut_after_two_chips() -> None:
    t = table("vllm-ascend-12980-a3-116-head.txt")
    assert t.version == "26.0.rc2"
    assert chips("vllm-ascend-12980-a3-116-head.txt") == [
        (0, 0, "Ascend910", "OK", 0, None, "hbm", 3419, 65536, "0000:9D:00.0"),
        (0, 1, "Ascend910", "OK", 1, None, "hbm", 2874, 65536, "0000:9F:00.0"),
    ]
    assert t.chips[1].power_w is None


def test_a3_tail_fragment_with_container_column_and_cut_line() -> None:
    t = table("vllm-ascend-12980-a3-116-tail.txt")
    assert chips("vllm-ascend-12980-a3-116-tail.txt") == [
        (7, 1, "Ascend910", "OK", 15, None, "hbm", 31877, 65536, "0000:83:00.0")]  # Phy-ID inferred
    assert [(p.npu, p.chip, p.pid, p.name, p.memory_mb, p.container_pid) for p in t.processes] == [
        (0, 0, 632268, "python3.1", 197, None)]  # the fifth column: NA
    assert t.process_npus == [0, 1]  # NPU 2's line is cut: not known
    assert "line 13: cut before its closing '|': not read" in t.notes


def test_masked_bus_ids_and_a_cut_paste() -> None:
    t = table("hami-webui-47-910b4-1-masked.txt")
    assert [(c.npu, c.name, c.bus_id, c.bdf, c.used_mb, c.total_mb) for c in t.chips] == [
        (0, "910B4-1", "0000:xx:00.0", None, 3197, 65536), (1, "910B4-1", "0000:xx:00.0", None, 3197, 65536)]
    assert t.process_npus == [] and "processes are not known" in t.notes[-1]


@pytest.mark.parametrize("name", ["vllm-ascend-2698-dcmi-8005.txt", "cann-container-image-46-dcmi-8020.txt"])
def test_dcmi_errors_hold_no_table(name: str) -> None:
    t = table(name)
    assert (t.chips, t.processes, t.process_npus, t.notes) == ([], [], [], [])


# ---- damage the field shows, made on purpose ---------------------------------------------------------------
def test_values_that_say_na_or_dash() -> None:
    rows = text("info-02.txt").replace("| 102.8       55 ", "| NA          NA ").replace("0000:C1:00.0", "NA          ")
    first = parse_table(rows).chips[0]
    assert (first.power_w, first.temp_c, first.bus_id, first.bdf) == (None, None, "NA", None)


def test_collapsed_spaces_and_an_npu_id_of_1792() -> None:
    lines = ["| 1792 910B3 | OK | 93.6 40 0 / 0 |", "| 0 | 0000:C1:00.0 | 0 0 / 0 3162/65536 |"]
    (chip,) = parse_table("\n".join(lines)).chips
    assert (chip.npu, chip.name, chip.temp_c, chip.hbm_used_mb, chip.hbm_total_mb) == (1792, "910B3", 40, 3162, 65536)


def test_a_row_without_its_pair_is_said() -> None:
    lines = text("info-02.txt").splitlines()
    first_rows = [i for i, line in enumerate(lines) if "910B3" in line]
    del lines[first_rows[2] + 1]  # NPU 2's second row
    t = parse_table("\n".join(lines))
    assert [c.npu for c in t.chips] == [0, 1, 3, 4, 5, 6, 7]
    assert any("NPU 2 (910B3): its second row" in n for n in t.notes)


def test_a_process_block_that_began_before_the_text_is_not_whole() -> None:
    lines = text("info-01.txt").splitlines()
    start = next(i for i, line in enumerate(lines) if "| 934451 " in line)  # NPU 0's fourth process row
    t = parse_table("\n".join(lines[start:]))
    assert 0 not in t.process_npus and t.process_npus == list(range(1, 8))


# ---- no cut of any sample breaks a parser, and none invents what the whole text does not hold ----------------
def _key(c: ChipInfo) -> Tuple[Any, ...]:
    return c._replace(line=0)


WHOLE: Dict[str, InfoTable] = {}


def whole(name: str) -> InfoTable:
    if name not in WHOLE:
        WHOLE[name] = parse_table((FIELD / name).read_text())
    return WHOLE[name]


def check_cut(name: str, piece: str) -> None:
    t = parse_table(piece)
    full = whole(name)
    assert {_key(c) for c in t.chips} <= {_key(c) for c in full.chips}
    assert {p._replace(line=0) for p in t.processes} <= {p._replace(line=0) for p in full.processes}
    assert set(t.process_npus) <= set(full.process_npus)
    assert len(t.notes) <= 21
    parse_fields(piece)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(ALL_TEXT), data=st.data())
def test_no_cut_of_any_sample_raises_or_invents(name: str, data: Any) -> None:
    full = (FIELD / name).read_text()
    lo = data.draw(st.integers(0, len(full)))
    hi = data.draw(st.integers(lo, len(full)))
    check_cut(name, full[lo:hi])


@pytest.mark.parametrize("name", ALL_TEXT)
def test_every_line_boundary_cut(name: str) -> None:
    """Every prefix and suffix cut at a line boundary, and prefixes cut inside every number after a '/' (a
    used / total pair) and every cell."""
    full = (FIELD / name).read_text()
    for end in (i for i, ch in enumerate(full) if ch == "\n"):
        check_cut(name, full[: end + 1])
        check_cut(name, full[end + 1 :])
    for cut in (i for i, ch in enumerate(full) if ch in "/|"):
        check_cut(name, full[: cut + 3])
        check_cut(name, full[cut + 1 :])
