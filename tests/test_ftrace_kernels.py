"""The fleet's kernels (openEuler 22.03 5.10 on x86-64 and aarch64, Kylin V10 4.19 and CentOS 7.6 4.14 on aarch64
with 64 KiB pages, Ubuntu 24.04 6.8): their tracefs headers, format files and hand-built ring-buffer pages
(tests/data/fleet-kernels, written by tests/fleet_kernels.py from those kernels' sources) decode to the truth they
were written from, by the page decoder and by both page walkers alike; npu_trace.ftrace.layouts reads each set's
layout and tells a layout no set has."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import pytest

import fleet_kernels as F
from goldens import kernel_dirs, load_formats, load_pages, read
from npu_trace.device.profiles import ASCEND_LAYOUTS
from npu_trace.errors import FormatError
from npu_trace.events import Loss, TraceEvent
from npu_trace.ftrace import layouts as L
from npu_trace.ftrace.decode import build_decoders
from test_ftrace_walk import check

SETS = {k.name: k for k in F.SETS}
NAMES = sorted(SETS)


def root(name: str) -> str:
    return os.path.join(F.ROOT, name)


def _plain(value: Any) -> Any:
    """Decoded values as expected.json holds them (struct fields are dicts, strings stay strings)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def decoded(name: str) -> List[Dict[str, Any]]:
    """Every CPU's pages through the walkers and the decoder (check() holds the three equal), as truth rows."""
    header, formats = load_formats(root(name))
    decoders = build_decoders(formats, "little", ASCEND_LAYOUTS)
    by_cpu: Dict[int, List[bytes]] = {}
    for cpu, page in load_pages(root(name)):
        by_cpu.setdefault(cpu, []).append(page)
    rows: List[Dict[str, Any]] = []
    for cpu, pages in sorted(by_cpu.items()):
        result = check(decoders, pages, header, cpu)
        losses = iter(result.losses)
        pending = next(losses, None)
        for i, ev in enumerate([*result.events, None]):
            while pending is not None and pending[0] == i:
                rows.append(_loss(pending[1]))
                pending = next(losses, None)
            if ev is not None:
                rows.append(_event(ev))
    return rows


def _loss(loss: Loss) -> Dict[str, Any]:
    return {"loss": loss.kind, "cpu": loss.cpu, "ts": loss.ts_ns, "count": loss.lost}


def _event(ev: TraceEvent) -> Dict[str, Any]:
    fields = {k: _plain(v) for k, v in ev.fields().items() if not k.startswith("common_")}
    return {"ts": ev.ts_ns, "cpu": ev.cpu, "pid": ev.pid, "event": ev.event, "fields": fields}


# ---- the stored sets are what the writer makes -----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_stored_set_is_what_the_writer_makes(name: str) -> None:
    stored = {}
    for dirpath, _, filenames in os.walk(root(name)):
        for fn in filenames:
            path = os.path.join(dirpath, fn)
            with open(path, "rb") as f:
                stored[os.path.relpath(path, root(name))] = f.read()
    assert stored == F.files(SETS[name])


def test_every_set_names_its_sources() -> None:
    readme = read(os.path.join(F.ROOT, "README.md"))
    for name in NAMES:
        assert f"`{name}`" in readme
    assert "ring_buffer.c" in readme and "trace_events.c" in readme


def test_the_sets_are_not_taken_for_captures_of_this_machine() -> None:
    assert all(not d.startswith(F.ROOT) for d in kernel_dirs())


# ---- decoding ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_pages_decode_to_the_truth_they_were_written_from(name: str) -> None:
    with open(os.path.join(root(name), "expected.json")) as f:
        truth = json.load(f)
    assert decoded(name) == truth


@pytest.mark.parametrize("name", NAMES)
def test_each_set_holds_the_rules_of_its_version(name: str) -> None:
    k = SETS[name]
    listing = read(os.path.join(root(name), "pages.txt"))
    for rule in ("time extend", "discarded record", "type_len 0", "end padding", "missed"):
        assert rule in listing
    assert ("absolute stamp" in listing) == k.forced_stamps  # never written before 4.17, forced from 5.10
    page_sizes = {length for _, _, length in json.loads(read(os.path.join(root(name), "pages.json")))["pages"]}
    assert page_sizes == {k.page_size}


def test_a_6x_stamp_keeps_the_top_bits_of_the_time_before_it() -> None:
    rows = [r for r in decoded("ubuntu-24.04-6.8-x86_64") if r.get("cpu") == 2 and "event" in r]
    assert [r["ts"] for r in rows] == [(1 << 59) + 5_000, (1 << 59) + 9_000]


def test_the_5_10_nested_stamp_goes_back_and_is_counted() -> None:
    header, formats = load_formats(root("openeuler-22.03-5.10-x86_64"))
    pages = [p for cpu, p in load_pages(root("openeuler-22.03-5.10-x86_64")) if cpu == 0]
    result = check(build_decoders(formats, "little", ASCEND_LAYOUTS), pages, header, 0)
    assert result.state.backwards == 1
    ts = [e.ts_ns for e in result.events[:3]]
    assert ts[2] < ts[1]


# ---- layouts ----------------------------------------------------------------------------------------------------
def _layout_of(path: str) -> L.Layout:
    fmt = read(os.path.join(path, "events", "ftrace", "print", "format"))
    return L.layout_of(read(os.path.join(path, "header_page")), read(os.path.join(path, "header_event")), fmt)


@pytest.mark.parametrize("name", NAMES)
def test_each_sets_layout_is_the_tested_one(name: str) -> None:
    assert _layout_of(root(name)) == L.TESTED[name]
    same, differs = L.compare(L.TESTED[name])
    assert name in same and differs == []


def test_this_machines_capture_is_a_tested_layout() -> None:
    capture = next(d for d in kernel_dirs() if "6.18.44" in d)
    assert _layout_of(capture) == L.TESTED[os.path.basename(capture)]


def test_a_layout_no_set_has_is_named_property_by_property() -> None:
    odd = L.Layout(16384, 4, L.DECODER_HEADER, L.TESTED["kernel-6.18.44-x86_64"].common, False)
    same, differs = L.compare(odd)
    assert same == []
    assert [d.split(":")[0] for d in differs] == ["page", "commit"]
    assert "16384 B pages (tested: 4096 B pages | 65536 B pages)" in differs[0]


def test_a_combination_no_set_has_is_said() -> None:
    mixed = L.Layout(65536, 8, L.DECODER_HEADER, L.TESTED["kernel-6.18.44-x86_64"].common, True)
    assert L.compare(mixed) == ([], ["each part was tested, not this combination"])


def test_record_header_numbers_unlike_the_decoders_are_named() -> None:
    text = read(os.path.join(root("ubuntu-24.04-6.8-x86_64"), "header_event")).replace("== 29", "== 27")
    header = L.parse_header_event(text)
    assert dict(header)["padding"] == 27
    base = L.TESTED["ubuntu-24.04-6.8-x86_64"]
    got = L.Layout(base.page_size, base.commit_size, header, base.common, base.char_signed).describe()
    assert got["record header"].endswith("; unlike the decoder's: padding 27")


def test_common_fields_another_kernel_adds_are_named() -> None:
    text = read(os.path.join(root("ubuntu-24.04-6.8-x86_64"), "events", "ftrace", "print", "format"))
    text = text.replace("\tfield:int common_pid;", "\tfield:int common_extra;\toffset:8;\tsize:4;\tsigned:1;\n"
                                                   "\tfield:int common_pid;")  # fmt: skip
    common, _ = L.common_fields(text)
    assert [c[0] for c in common][-2:] == ["common_extra", "common_pid"]


@pytest.mark.parametrize("text", ["", "garbage\n", "\ttype_len : five bits\n"])
def test_a_header_event_without_fields_is_a_format_error(text: str) -> None:
    with pytest.raises(FormatError):
        L.parse_header_event(text)


def test_a_format_without_common_fields_is_a_format_error() -> None:
    path = root("ubuntu-24.04-6.8-x86_64")
    with pytest.raises(FormatError):
        L.layout_of(read(os.path.join(path, "header_page")), read(os.path.join(path, "header_event")), "name: x\n")


def _pairs(layout: L.Layout) -> Tuple[str, ...]:
    return tuple(layout.describe())


def test_describe_names_every_property() -> None:
    assert _pairs(L.TESTED["centos-7.6-4.14-aarch64"]) == ("page", "commit", "record header", "common fields", "char")
    assert L.TESTED["centos-7.6-4.14-aarch64"].describe()["record header"] == "no time_stamp type (before 4.17)"
