"""Format-file parsing: every field kind, the page header, and malformed input."""

from __future__ import annotations

import glob
import os
import re
from typing import Optional

import pytest

from goldens import DATA, kernel_dirs, load_formats, read
from npu_trace.errors import FormatError
from npu_trace.ftrace.decode import make_decoder
from npu_trace.ftrace.format import (
    ARRAY,
    BYTES,
    CHAR_ARRAY,
    DATA_LOC,
    INT,
    REL_LOC,
    TAIL,
    hex_fields,
    parse_field,
    parse_format,
    parse_header_page,
)  # fmt: skip


@pytest.mark.parametrize(
    ("line", "kind", "name", "ctype", "count"),
    [
        ("field:int irq;\toffset:8;\tsize:4;\tsigned:1;", INT, "irq", "int", 1),
        ("field:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;", DATA_LOC, "name", "char", 1),
        ("field:__rel_loc char[] s;\toffset:12;\tsize:4;\tsigned:0;", REL_LOC, "s", "char", 1),
        ("field:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;", CHAR_ARRAY, "prev_comm", "char", 16),
        ("field:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;", ARRAY, "args", "unsigned long", 6),
        ("field:char buf[];\toffset:16;\tsize:0;\tsigned:0;", TAIL, "buf", "char", 1),
        ("field:struct trs_id_inst inst;\toffset:12;\tsize:8;\tsigned:0;", BYTES, "inst", "struct trs_id_inst", 1),
        ("field:ka_timespec64_t timestamp;\toffset:64;\tsize:16;\tsigned:0;", BYTES, "timestamp", "ka_timespec64_t", 1),
        ("field:const char * name;\toffset:8;\tsize:8;\tsigned:0;", INT, "name", "const char *", 1),
        ("field:struct page *page;\toffset:8;\tsize:8;\tsigned:0;", INT, "page", "struct page *", 1),
        ("field:u8 addr[TASK_COMM_LEN];\toffset:8;\tsize:16;\tsigned:0;", ARRAY, "addr", "u8", 16),
    ],
)
def test_field_kinds(line: str, kind: str, name: str, ctype: str, count: int) -> None:
    f = parse_field(line)
    assert f is not None and (f.kind, f.name, f.type) == (kind, name, ctype)
    if kind in (ARRAY, CHAR_ARRAY):
        assert f.count == count


def test_array_with_symbolic_count_uses_size() -> None:
    f = parse_field("field:u8 addr[TASK_COMM_LEN];\toffset:8;\tsize:16;\tsigned:0;")
    assert f is not None and f.kind == ARRAY and f.count == 16 and f.elem_size == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "name: x\nformat:\n",  # no ID
        "name: x\nID: abc\n",
        "name: x\nID: 3\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n",  # no common_type
        "name: x\nID: 3\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:garbage here\n",
        "name: x\nID: 3\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:__data_loc broken;\toffset:8;\tsize:4;\tsigned:0;\n",
    ],
)
def test_malformed_format_is_a_format_error(text: str) -> None:
    with pytest.raises(FormatError):
        parse_format(text, "sys")


def test_overlapping_fields_are_refused_by_the_decoder() -> None:
    text = (
        "name: x\nID: 3\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
        "\tfield:u64 a;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:u32 b;\toffset:12;\tsize:4;\tsigned:0;\n"
    )
    with pytest.raises(FormatError, match=r"field 'b' .* overlaps field 'a'"):
        make_decoder(parse_format(text, "sys"))


def test_header_page_of_this_kernel_and_a_32_bit_one() -> None:
    root = kernel_dirs()[0]
    h = parse_header_page(read(os.path.join(root, "header_page")))
    assert (h.commit_offset, h.commit_size, h.data_offset, h.page_size) == (8, 8, 16, 4096)
    old = ("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\tfield: local_t commit;\toffset:8;\tsize:4;"
           "\tsigned:1;\n\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
           "\tfield: char data;\toffset:12;\tsize:4084;\tsigned:0;\n")  # fmt: skip
    h = parse_header_page(old)
    assert (h.commit_size, h.data_offset, h.page_size) == (4, 12, 4096)
    with pytest.raises(FormatError):
        parse_header_page("field: u64 timestamp; offset:0; size:8;")


def test_hex_fields_follow_the_print_fmt() -> None:
    assert hex_fields('"(%lx) dev=%u va=0x%Lx", REC->__probe_ip, REC->dev, REC->va') == {"__probe_ip", "va"}
    assert hex_fields('"NR %ld (%lx)", REC->id, REC->args[0]') == frozenset()
    assert hex_fields("") == frozenset()


def test_all_captured_formats_parse_and_compile() -> None:
    for root in [*kernel_dirs(), os.path.join(DATA, "ascend-driver")]:
        _, formats = load_formats(root)
        assert formats
        for fmt in formats:
            make_decoder(fmt)


@pytest.mark.privileged
def test_every_format_of_the_running_kernel_parses_and_compiles() -> None:
    from npu_trace.ftrace.tracefs import Tracefs

    fs = Tracefs.find()
    paths = glob.glob(fs.path("events/*/*/format"))
    assert len(paths) > 500
    failures = []
    for path in paths:
        system = os.path.basename(os.path.dirname(os.path.dirname(path)))
        try:
            make_decoder(parse_format(read(path), system))
        except FormatError as exc:
            failures.append(f"{path}: {exc}")
    assert not failures, failures[:5]


GOOD = (
    "name: x\nID: 3\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    "\tfield:u32 dev;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n"
    "\tfield:__data_loc char[] name;\toffset:28;\tsize:4;\tsigned:0;\n"
    "\tfield:char buf[];\toffset:32;\tsize:0;\tsigned:0;\n"
    '\nprint fmt: "dev=%u", REC->dev\n'
)


@pytest.mark.parametrize("old, new, field, why", [
    ("int common_pid;\toffset:4", "int common_pjd;\toffset:4", "common_pid", "is missing"),
    ("common_pid;\toffset:4", "common_pid;\toffset:6", "common_pid", "at offset 6, size 4 (the kernel's: offset 4"),
    ("common_flags;\toffset:2;\tsize:1", "common_flags;\toffset:2;\tsize:0", "common_flags", "size 0"),
    ("u32 dev;\toffset:8", "u32 dev;\toffset:10", "comm", "overlaps field 'dev'"),
    ("u32 dev;\toffset:8;\tsize:4", "u32 dev;\toffset:8;\tsize:3", "dev", "size 3 for a u32"),
    ("size:4;\tsigned:0;\n\tfield:char comm", "size:4;\tsigned:1;\n\tfield:char comm", "dev", "u32 marked signed"),
    ("size:4;\tsigned:0;\n\tfield:char comm", "size:4;\tsigned:2;\n\tfield:char comm", "dev", "signed:2"),
    ("name;\toffset:28;\tsize:4", "name;\toffset:28;\tsize:8", "name", "locator of size 8"),
    ("buf[];\toffset:32;\tsize:0;\tsigned:0;", "buf[];\toffset:32;\tsize:0;\tsigned:0;\n\tfield:u32 late;\toffset:32;"
     "\tsize:4;\tsigned:0;", "buf", "a flexible array must be the last field"),
    ("buf[];\toffset:32", "buf[];\toffset:20", "buf", "overlaps field 'comm'"),
    ("u32 dev;\toffset:8", "u32 dev;\toffset:65535", "dev", "past 65536 bytes"),
    ("ID: 3", "ID: 0", None, "event ID 0 outside [1, 65535]"),
    ("ID: 3", "ID: 70000", None, "event ID 70000 outside"),
    ("name: x", "name: x y", None, "event name 'x y'"),
    ("\tfield:u32 dev", "\tfielt:u32 dev", None, "unexpected line 'fielt:u32 dev"),
])  # fmt: skip
def test_a_format_no_kernel_writes_is_damaged_naming_the_field(old: str, new: str, field: Optional[str],
                                                               why: str) -> None:  # fmt: skip
    assert old in GOOD
    parse_format(GOOD, "sys")
    with pytest.raises(FormatError) as info:
        parse_format(GOOD.replace(old, new, 1), "sys")
    assert why in str(info.value) and str(info.value).startswith(f"format {info.value.event}: "), str(info.value)
    assert info.value.field == field and str(info.value.event).startswith("sys:x")


def test_what_real_kernels_write_reads_a_repeated_name_apart_and_an_array_by_its_size() -> None:
    """Formats of real kernels that no rule of thumb would allow: a syscall argument named like the syscall number
    (trappy's trace.dat: `sys_enter_io_submit` declares `nr` twice; LISA's: `regmap:regcache_sync`'s `type`),
    an array whose size is not its declared length's (trappy's `task_rename`: `char oldcomm[32]; size:16`). Each
    field keeps its own value: a repeated name becomes `name_2`, the array's length is the one its size gives."""
    twice = parse_format(GOOD.replace("u32 dev;\toffset:8", "u32 comm;\toffset:8", 1), "sys")
    assert twice.field_names == ("comm", "comm_2", "name", "buf")
    assert (twice.field("comm").offset, twice.field("comm_2").offset) == (8, 12)
    short = parse_format(GOOD.replace("char comm[16];\toffset:12;\tsize:16", "char comm[32];\toffset:12;\tsize:16"))
    assert (short.field("comm").kind, short.field("comm").count, short.field("comm").size) == ("char_array", 16, 16)
    odd = parse_format(GOOD.replace("char comm[16];\toffset:12;\tsize:16", "u32 comm[4];\toffset:12;\tsize:16"
                                    ).replace("u32 dev;\toffset:8;\tsize:4", "u32 dev;\toffset:8;\tsize:4"))
    assert odd.field("comm").count == 4


@pytest.mark.parametrize("old, new, why", [
    ("commit;\toffset:8", "commit;\toffset:9", "field 'commit' at offset 9"),
    ("data;\toffset:16", "data;\toffset:24", "field 'data' at offset 24"),
    ("size:4080", "size:2000000", "pages of at most"),
])  # fmt: skip
def test_a_header_page_no_kernel_writes_is_damaged(old: str, new: str, why: str) -> None:
    text = read(os.path.join(kernel_dirs()[0], "header_page"))
    assert old in text
    with pytest.raises(FormatError, match=re.escape(why)):
        parse_header_page(text.replace(old, new, 1))
