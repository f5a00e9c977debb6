"""The ring-buffer layouts npu-trace is tested on, and what a running kernel's layout differs in.

A layout is what decoding a kernel's pages depends on, as its tracefs says it (kernel/trace/ring_buffer.c
prints the first two, kernel/trace/trace_events.c the third):

- the page (`events/header_page`): its size (4 KiB, or 64 KiB on aarch64 kernels built with 64 KiB pages) and
  the width of its commit word;
- the record header (`events/header_event`): the widths of type_len, time_delta and array, and the type numbers
  of padding, time extend and absolute time stamp. Kernels before 4.17 print no `time_stamp` line: type 31 is
  never written there (RB_LEN_TIME_STAMP is 16 bytes and the reader skips it); from 4.17 it is an absolute
  stamp of 59 bits (5.10 writes one when a nested event's delta cannot be trusted; 6.x readers take the top
  five bits from the time before it, rb_fix_abs_ts, as the decoder does);
- `struct trace_entry`, the common fields every format file starts with;
- whether `char` is signed (the `signed:` of char fields: 1 on x86-64 before 6.2, 0 on aarch64 and from 6.2,
  built with -funsigned-char): decoding does not depend on it, but the format files show it.

`TESTED` holds the layouts of the golden sets under tests/data (a capture of this machine's kernel, and
fleet-kernels/: sets written from the sources of the fleet's kernels, each decoded in tests by the page decoder
and both page walkers);
tests/test_ftrace_kernels.py keeps the two equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from npu_trace.errors import FormatError
from npu_trace.ftrace.format import parse_field, parse_header_page

Common = Tuple[Tuple[str, int, int, bool], ...]  # (name, offset, size, signed) of each common field
RecordHeader = Tuple[Tuple[str, int], ...]  # ("type_len", 5), ..., ("padding", 29), ...

_BITS_RE = re.compile(r"^\s*(type_len|time_delta|array)\s*:\s*(\d+) bits\s*$")
_TYPE_RE = re.compile(r"^\s*(padding|time_extend|time_stamp)\s*: type == (\d+)\s*$")
_MAX_RE = re.compile(r"^\s*data max type_len\s*== (\d+)\s*$")


@dataclass(frozen=True)
class Layout:
    page_size: int
    commit_size: int
    record_header: RecordHeader
    common: Common
    char_signed: bool

    def describe(self) -> Dict[str, str]:
        """Each property as doctor shows it."""
        stamp = dict(self.record_header).get("time_stamp")
        return {
            "page": f"{self.page_size} B pages",
            "commit": f"{self.commit_size}-byte commit word",
            "record header": (f"time stamps: type {stamp} absolute (4.17+)" if stamp is not None
                              else "no time_stamp type (before 4.17)") + _odd_header(self.record_header),
            "common fields": " ".join(f"{name}@{offset}:{size}" for name, offset, size, _ in self.common),
            "char": "signed char" if self.char_signed else "unsigned char",
        }  # fmt: skip


# The record header npu-trace's decoder and walker assume (npu_trace.ftrace.decode); the time_stamp line is
# optional (kernels before 4.17 have none).
DECODER_HEADER: RecordHeader = (
    ("type_len", 5), ("time_delta", 27), ("array", 32), ("padding", 29), ("time_extend", 30), ("time_stamp", 31),
    ("data max type_len", 28),
)  # fmt: skip


def _odd_header(header: RecordHeader) -> str:
    """ "; unlike the decoder's: padding 30" when the header's numbers differ from what the decoder assumes."""
    parts = _header_differences(header)
    return f"; unlike the decoder's: {', '.join(parts)}" if parts else ""


def _header_differences(header: RecordHeader) -> List[str]:
    assumed = dict(DECODER_HEADER)
    odd = [f"{k} {v}" for k, v in header if assumed.get(k) != v]
    missing = [k for k in assumed if k != "time_stamp" and k not in dict(header)]
    return odd + [f"no {k}" for k in missing]


def odd_record_header(layout: Layout) -> bool:
    """Whether the record header's widths or type numbers differ from those the decoder and walker assume
    (no kernel since 2.6.30 has done so): its records would be misread."""
    return bool(_header_differences(layout.record_header))


def parse_header_event(text: str) -> RecordHeader:
    """`events/header_event` -> its bit widths and type numbers, in the order printed."""
    out: List[Tuple[str, int]] = []
    for line in text.splitlines():
        for rx in (_BITS_RE, _TYPE_RE):
            m = rx.match(line)
            if m:
                out.append((m.group(1), int(m.group(2))))
        m = _MAX_RE.match(line)
        if m:
            out.append(("data max type_len", int(m.group(1))))
    if not out:
        raise FormatError("header_event: no record header fields")
    return tuple(out)


def common_fields(format_text: str) -> Tuple[Common, Optional[bool]]:
    """The common fields of a `format` file, and whether its char fields are signed (None: it has none)."""
    common: List[Tuple[str, int, int, bool]] = []
    char_signed: Optional[bool] = None
    for line in format_text.splitlines():
        field = parse_field(line)
        if field is None:
            continue
        if field.name.startswith("common_"):
            common.append((field.name, field.offset, field.size, field.signed))
        elif field.type.replace("const ", "").strip() == "char":
            char_signed = field.signed
    return tuple(common), char_signed


def layout_of(header_page: str, header_event: str, format_text: str) -> Layout:
    """The layout a kernel's tracefs describes: its header_page, header_event, and one event's format with a
    char field (ftrace:print's `char buf[]`, irq_handler_entry's `__data_loc char[] name`)."""
    page = parse_header_page(header_page)
    common, char_signed = common_fields(format_text)
    if not common:
        raise FormatError("format: no common fields")
    data = [parse_field(line, check=False) for line in header_page.splitlines()]
    data_signed = next((f.signed for f in data if f is not None and f.name == "data"), False)
    return Layout(page.page_size, page.commit_size, parse_header_event(header_event), common,
                  data_signed if char_signed is None else char_signed)  # fmt: skip


_TRACE_ENTRY: Common = (
    ("common_type", 0, 2, False), ("common_flags", 2, 1, False), ("common_preempt_count", 3, 1, False),
    ("common_pid", 4, 4, True),
)  # fmt: skip
_BEFORE_4_17 = tuple(kv for kv in DECODER_HEADER if kv[0] != "time_stamp")

TESTED: Dict[str, Layout] = {
    # captured on the development VM (tests/data/kernel-6.18.44-x86_64)
    "kernel-6.18.44-x86_64": Layout(4096, 8, DECODER_HEADER, _TRACE_ENTRY, False),
    # written from the kernels' sources (tests/data/fleet-kernels/<name>, README.md there)
    "centos-7.6-4.14-aarch64": Layout(65536, 8, _BEFORE_4_17, _TRACE_ENTRY, False),
    "kylin-v10-4.19-aarch64": Layout(65536, 8, DECODER_HEADER, _TRACE_ENTRY, False),
    "openeuler-22.03-5.10-aarch64": Layout(4096, 8, DECODER_HEADER, _TRACE_ENTRY, False),
    "openeuler-22.03-5.10-x86_64": Layout(4096, 8, DECODER_HEADER, _TRACE_ENTRY, True),
    "ubuntu-24.04-6.8-x86_64": Layout(4096, 8, DECODER_HEADER, _TRACE_ENTRY, False),
}


def compare(running: Layout, tested: Optional[Dict[str, Layout]] = None) -> Tuple[List[str], List[str]]:
    """(the tested sets with exactly this layout, what in it no tested set has: one line per property)."""
    tested = TESTED if tested is None else tested
    same = [name for name, lay in tested.items() if lay == running]
    mine = running.describe()
    differs = []
    for prop, value in mine.items():
        seen = sorted({lay.describe()[prop] for lay in tested.values()})
        if value not in seen:
            differs.append(f"{prop}: {value} (tested: {' | '.join(seen)})")
    if not same and not differs:
        differs.append("each part was tested, not this combination")
    return same, differs
