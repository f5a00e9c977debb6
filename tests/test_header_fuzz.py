"""A damaged header never crashes a reader: the header of a real recording (the demo's) decoded, each of its
fields mutated (types changed, values out of range, strings changed, format texts with fields removed, renamed,
moved or resized, keys missing or added), encoded again with a correct checksum (so that what lies past the
checksum is exercised), a wrong one, or none (a file written before checksums), then opened, read, decoded and
`check`ed (both paths): only a one-line typed error (exit 2) or a read, never a traceback.

Set NPT_FUZZ_EXAMPLES=2000 for a longer local run (the committed setting stays fast: a few seconds).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
from typing import Any, Callable, Dict, Optional, Tuple
from unittest import mock

import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from npu_trace import cli
from npu_trace.errors import FormatError, InputError, RecordingError
from npu_trace.ftrace.format import parse_format
from npu_trace.recording import RecordingReader
from npu_trace.recording.schema import PREAMBLE, pack_header
from reference.analyze import analyze as reference_analyze
from reference.pages import iter_events

DEMO = os.path.join(os.path.dirname(__file__), os.pardir, "npu_trace", "data", "demo.npt")
EXAMPLES = int(os.environ.get("NPT_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int) -> Any:
    """Fixed, reproducible runs (derandomized, no example database), `examples` each unless overridden."""
    return settings(
        max_examples=EXAMPLES or examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


class Demo(dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:  # keeps hypothesis' failure reports short
        return "<the demo recording>"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: Any) -> Dict[str, Any]:
    """The demo recording's decoded header (magic, schema and compression included, no checksum) and the bytes of
    its records (everything after the header), and a directory for the mutants."""
    reader = RecordingReader(DEMO)
    with open(DEMO, "rb") as f:
        blob = f.read()
    out: Dict[str, Any] = Demo(header=reader.header, records=blob[reader.data_offset :])
    out["dir"] = str(tmp_path_factory.mktemp("header-fuzz"))
    return out


def encode(header: Dict[str, Any], checksum: str) -> bytes:
    """The preamble and `header`: with its correct checksum ("good"), a wrong one ("bad"), or none ("none")."""
    if checksum == "none":
        return PREAMBLE.pack(b"NPUTRACE", 1) + msgpack.packb(header, use_bin_type=True)
    blob = pack_header(header)
    if checksum == "bad":
        digit = blob[-1:]
        blob = blob[:-1] + (b"0" if digit != b"0" else b"1")
    return blob


def run_check(path: str, *extra: str, reference: bool = False) -> Tuple[int, str]:
    """`npu-trace check -q PATH` in this process: (exit code, stderr); `reference`: its analysis by the reference
    path (tests/reference/analyze.py) instead of the blocks. An exception other than the typed errors the CLI
    turns into exit codes propagates: the test fails with its traceback."""
    err = io.StringIO()
    path_of = mock.patch("npu_trace.ci.checking.analyze", reference_analyze) if reference else contextlib.nullcontext()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), path_of:
        code = cli.main(["check", "-q", path, *extra])
    return code, err.getvalue()


def read_everything(path: str) -> Optional[str]:
    """Open, read every record, decode every event: None when it all reads, else the typed error's one line."""
    try:
        reader = RecordingReader(path)
        for _ in reader.records():
            pass
        for _ in iter_events(reader):
            pass
    except InputError as exc:  # RecordingError, DecodeError: damaged input
        message = str(exc)
        assert message and "\n" not in message, message
        return message
    return None


def assert_one_line_exit(path: str, reference: bool = False) -> Tuple[int, str]:
    code, err = run_check(path, reference=reference)
    assert code in (0, 1, 2), (code, err)
    if code == 2:
        assert err.startswith("npu-trace: ") and err.count("\n") == 1, err
    else:
        assert "Traceback" not in err, err
    return code, err


def judge(demo: Dict[str, Any], header: Dict[str, Any], checksum: str, reference: bool) -> Tuple[Optional[str], int]:
    path = os.path.join(demo["dir"], "mutant.npt")
    with open(path, "wb") as f:
        f.write(encode(header, checksum) + demo["records"])
    error = read_everything(path)
    code, err = assert_one_line_exit(path, reference)
    if error is not None:
        assert code == 2, (error, code, err)
    if checksum == "bad":
        assert error is not None and "header damaged (checksum" in error, error
    if currently_in_test_context():  # what the mutants came to (--hypothesis-show-statistics)
        event(f"exit {code}: " + (f"read {err[:50]}" if error is None else re.sub(r"[\d'\"].*", "", error)[:60]))
    return error, code


# ---- mutations ---------------------------------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=12), st.binary(max_size=8)
)
VALUES = st.recursive(
    SCALARS, lambda v: st.lists(v, max_size=3) | st.dictionaries(st.text(max_size=6), v, max_size=3), max_leaves=8
)
NUMBERS = st.one_of(st.integers(0, 80), st.integers(0, 70_000), st.integers(0, 2**64), st.sampled_from([0, 1, 4, 8]))
IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
NAMES = st.one_of(IDENT, st.text(max_size=8), st.sampled_from(["common_pid", "common_type", "common_x", "dev", "pid"]))
TYPES = st.sampled_from([
    "u8", "u16", "u32", "u64", "s32", "int", "unsigned int", "unsigned long", "long", "char", "bool", "void *",
    "struct trs_id_inst", "enum foo", "__data_loc char[]", "__rel_loc u8[]", "pid_t", "short", "unsigned char",
])  # fmt: skip
SCOPE = {"pid": [4242], "comm": ["npu-sim"], "device": [1], "irqs": {"130": 0, "131": None},
         "kernel": {"filters": {"ascend:ascend_drv_timeout": {"filter": "dev == 1", "scope": ["device"]}},
                    "event_pid": [4242], "event_fork": True},
         "pipeline": {"comm": [], "device": True, "irq": True}, "notes": ["n"]}  # fmt: skip
WINDOW = {"trigger": {"kind": "timeout", "ts_ns": 1}, "start_ns": 0}
_FIELD_NAME = re.compile(r"(field:[^;]*?)([A-Za-z_]\w*)(\s*(?:\[[^\]]*\])?;)")
_NUMBER = re.compile(r"((?:offset|size|signed|ID):\s*)(-?\d+)")
_SIZED = re.compile(r"^(\s*field:).*?([A-Za-z_]\w*)(?:\[[^\]]*\])?;(\s*offset:\d+;\s*size:(\d+);.*)$")
_TYPE = re.compile(r"(field:)([^;]*?)(\s*[A-Za-z_]\w*\s*(?:\[[^\]]*\])?;)")


@st.composite
def mutated_text(draw: Callable[..., Any], text: str) -> str:
    """A format (or header_page) text with a line dropped, doubled, moved or added, a field renamed, retyped,
    moved or resized, its name or ID changed, a character changed, or the text cut."""
    lines = text.split("\n")
    fields = [i for i, line in enumerate(lines) if "field:" in line]
    op = draw(st.sampled_from(["drop", "double", "swap", "insert", "rename", "number", "type", "array", "name", "char",
                               "cut"]))  # fmt: skip
    if op in ("drop", "double", "rename", "type", "array") and fields:
        i = draw(st.sampled_from(fields))
        if op == "drop":
            del lines[i]
        elif op == "double":
            lines.insert(i, lines[i])
        elif op == "rename":
            lines[i] = _FIELD_NAME.sub(lambda m: m.group(1) + draw(NAMES) + m.group(3), lines[i], count=1)
        elif op == "array":  # the same bytes as a string, an array or a struct (where a rule wants an integer)
            m = _SIZED.match(lines[i])
            if m:
                name, n = m.group(2), int(m.group(4))
                decl = draw(st.sampled_from([f"char {name}[{n}]", f"u8 {name}[{n}]", f"struct foo {name}",
                                             f"__data_loc char[] {name}"]))  # fmt: skip
                lines[i] = m.group(1) + decl + ";" + m.group(3)
        else:
            lines[i] = _TYPE.sub(lambda m: m.group(1) + draw(TYPES) + m.group(3), lines[i], count=1)
    elif op == "swap" and len(lines) > 1:
        i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "insert":
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "\tfield:int x;\toffset:8;\tsize:4;"
                                                                           "\tsigned:1;", "format:", "ID: 7", "junk"])))
    elif op == "number":
        spots = [(i, m) for i, line in enumerate(lines) for m in _NUMBER.finditer(line)]
        if spots:
            i, m = draw(st.sampled_from(spots))
            value = draw(st.one_of(NUMBERS, st.integers(-3, -1)))
            lines[i] = lines[i][: m.start(2)] + str(value) + lines[i][m.end(2) :]
    elif op == "name":
        i = next((k for k, line in enumerate(lines) if line.startswith("name:")), 0)
        lines[i] = "name: " + draw(st.one_of(IDENT, st.text(max_size=8)))
    elif op == "char":
        out = "\n".join(lines)
        if out:
            k = draw(st.integers(0, len(out) - 1))
            out = out[:k] + draw(st.characters(codec="utf-8")) + out[k + 1 :]
        return out
    elif op == "cut":
        out = "\n".join(lines)
        return out[: draw(st.integers(0, len(out)))]
    return "\n".join(lines)


@st.composite
def mutated_header(draw: Callable[..., Any], header: Dict[str, Any]) -> Dict[str, Any]:
    """`header` with one to three of its fields changed: removed, of another type, out of range, another string,
    a format entry or text changed, the header_page text changed, a nested map changed, a key added."""
    h = copy.deepcopy(header)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "retype", "string", "int", "add", "format", "format", "format",
                                   "entry", "header_page", "nested", "scope", "window", "list"]))  # fmt: skip
        keys = sorted(h, key=str)
        if op == "delete" and keys:
            del h[draw(st.sampled_from(keys))]
        elif op == "retype" and keys:
            h[draw(st.sampled_from(keys))] = draw(VALUES)
        elif op == "string":
            key = draw(st.sampled_from(["host", "kernel", "machine", "byteorder", "clock", "profile", "compression",
                                        "magic", "tool_version", "created_by"]))  # fmt: skip
            words = st.sampled_from(["big", "little", "none", "zstd", "ascend", "sim", "boot"])
            h[key] = draw(st.one_of(st.text(max_size=12), words))
        elif op == "int":
            h[draw(st.sampled_from(["cpus", "page_size", "schema"]))] = draw(st.integers(-(2**63), 2**64 - 1))
        elif op == "add":
            h[draw(st.one_of(st.text(max_size=10), st.sampled_from(["checksum", "scope", "window", "trace_cpus"])))] = (
                draw(VALUES))  # fmt: skip
        elif op in ("format", "entry") and isinstance(h.get("formats"), list) and h["formats"]:
            i = draw(st.integers(0, len(h["formats"]) - 1))
            entry = h["formats"][i]
            if not isinstance(entry, dict):
                continue
            if op == "format" and isinstance(entry.get("text"), str):
                entry["text"] = draw(mutated_text(entry["text"]))
            else:
                key = draw(st.sampled_from(["system", "name", "text", "extra"]))
                choice = draw(st.sampled_from(["delete", "value", "copy"]))
                if choice == "delete":
                    entry.pop(key, None)
                elif choice == "value":
                    entry[key] = draw(st.one_of(VALUES, IDENT))
                else:  # another entry's (a duplicate id or name)
                    h["formats"].append(copy.deepcopy(h["formats"][draw(st.integers(0, len(h["formats"]) - 1))]))
        elif op == "header_page" and isinstance(h.get("header_page"), str):
            h["header_page"] = draw(mutated_text(h["header_page"]))
        elif op == "nested":
            key = draw(st.sampled_from(["clock_anchor", "extra"]))
            if isinstance(h.get(key), dict):
                sub = h[key]
                inner = draw(st.sampled_from(sorted([*sub, "comms", "tasks", "processes", "channels", "mono_ns"])))
                if draw(st.booleans()):
                    sub.pop(inner, None)
                else:
                    sub[inner] = draw(VALUES)
        elif op in ("scope", "window"):
            entry = copy.deepcopy(SCOPE if op == "scope" else WINDOW)
            inner = draw(st.sampled_from(sorted(entry)))
            entry[inner] = draw(VALUES)
            h[op] = entry
        elif op == "list":
            key = draw(st.sampled_from(["events", "trace_cpus"]))
            h[key] = draw(st.lists(st.one_of(st.integers(-5, 70_000), st.text(max_size=12), VALUES), max_size=4))
    return h


# ---- the tests -----------------------------------------------------------------------------------------------
def test_the_demo_reads_and_new_files_carry_a_checksum(demo: Dict[str, Any]) -> None:
    """The demo (written before checksums) reads; a header encoded anew carries one, and reads the same."""
    assert RecordingReader(DEMO).checksum is None
    error, code = judge(demo, demo["header"], "good", reference=False)
    assert error is None and code in (0, 1)
    reader = RecordingReader(os.path.join(demo["dir"], "mutant.npt"))
    assert reader.checksum is not None and re.fullmatch(r"crc32:[0-9a-f]{8}", reader.checksum)
    assert reader.header == demo["header"]  # the checksum is the reader's, not the header's


@fuzz(100)
@given(data=st.data(), checksum=st.sampled_from(["good", "good", "good", "none", "bad"]), reference=st.booleans())
def test_a_mutated_header_is_read_or_refused_in_one_line(demo: Dict[str, Any], data: Any, checksum: str,
                                                         reference: bool) -> None:  # fmt: skip
    header = data.draw(mutated_header(demo["header"]), label="header")
    try:
        encode(header, checksum)
    except (OverflowError, TypeError, ValueError):  # not packable (an int msgpack cannot hold)
        return
    judge(demo, header, checksum, reference)


@fuzz(100)
@given(data=st.data(), reference=st.booleans())
def test_a_mutated_format_text_is_read_or_refused_in_one_line(demo: Dict[str, Any], data: Any, reference: bool) -> None:
    """The format texts alone (the validation past a correct checksum): one to three mutations each."""
    header = copy.deepcopy(demo["header"])
    for _ in range(data.draw(st.integers(1, 3))):
        entry = data.draw(st.sampled_from(header["formats"]))
        entry["text"] = data.draw(mutated_text(entry["text"]))
    error, _ = judge(demo, header, "good", reference)
    for entry in header["formats"]:  # what the reader refused, the parser refuses: named format and field
        try:
            parse_format(entry["text"], entry["system"])
        except FormatError as exc:
            assert error is not None and exc.event is not None
            break


@fuzz(80)
@given(flip=st.integers(0, 10**9))
def test_a_flipped_bit_in_the_header_is_always_caught(demo: Dict[str, Any], flip: int) -> None:
    """With a checksum no bit of the preamble or the header can change unnoticed: the file is refused."""
    blob = bytearray(encode(demo["header"], "good"))
    blob[(flip >> 3) % len(blob)] ^= 1 << (flip & 7)
    path = os.path.join(demo["dir"], "flipped.npt")
    with open(path, "wb") as f:
        f.write(bytes(blob) + demo["records"])
    assert read_everything(path) is not None


def flip_in_common_pid(blob: bytes, entry: int) -> Tuple[bytes, str]:
    """The demo's bytes with one bit flipped in `common_pid` in the format text of its `entry`th format."""
    header = RecordingReader(DEMO).header
    fmt = header["formats"][entry]
    start = blob.find(fmt["text"].encode())
    at = blob.find(b"common_pid", start)
    assert start > 0 and 0 < at < start + len(fmt["text"])
    damaged = bytearray(blob)
    damaged[at + len("common_p")] ^= 0x01  # common_pid -> common_phd
    return bytes(damaged), f"{fmt['system']}:{fmt['name']}"


@pytest.mark.parametrize("checksum", [False, True])
def test_the_original_case_a_flipped_bit_in_common_pid(demo: Dict[str, Any], checksum: bool) -> None:
    """Issue 21: a bit flipped in `common_pid` inside a header format text raised KeyError from RecordDecoder.
    Without a checksum (the demo, written before them): exit 2, one line naming the format and the field. With
    one: exit 2, "header damaged (checksum ...)"."""
    with open(DEMO, "rb") as f:
        blob = f.read()
    if checksum:
        blob = encode(demo["header"], "good") + demo["records"]
    damaged, name = flip_in_common_pid(blob, 0)
    path = os.path.join(demo["dir"], "common_pid.npt")
    with open(path, "wb") as f:
        f.write(damaged)
    for reference in (False, True):
        code, err = assert_one_line_exit(path, reference)
        assert code == 2
        if checksum:
            assert "header damaged (checksum crc32:" in err, err
        else:
            assert f"format of {name}: field 'common_pid' is missing" in err, err
    with pytest.raises(RecordingError):
        RecordingReader(path)


def test_formats_of_every_golden_kernel_pass_the_check() -> None:
    """What the kernels write is never taken for damage: every format file of the golden sets (this machine's
    kernel, the fleet's) parses and passes the check."""
    root = os.path.join(os.path.dirname(__file__), "data")
    seen = 0
    for top, _, files in os.walk(root):
        if "format" in files:
            with open(os.path.join(top, "format"), encoding="utf-8") as f:
                parse_format(f.read(), os.path.basename(os.path.dirname(top)))
            seen += 1
    assert seen > 50


def test_a_recording_of_each_writer_carries_a_checksum(tmp_path: Any) -> None:
    """Rotated files, flight dumps and imports all write through RecordingWriter: a header copied from a read
    file (its checksum dropped by the reader) gets a checksum of its own."""
    from npu_trace.recording import RecordingWriter

    header = dict(RecordingReader(DEMO).header, checksum="crc32:00000000")  # a stale one: replaced
    path = str(tmp_path / "copy.npt")
    with RecordingWriter(path, header):
        pass
    reader = RecordingReader(path)
    assert reader.checksum is not None and "checksum" not in reader.header
    with open(path, "rb") as f:
        assert f.read(reader.data_offset).endswith(msgpack.packb(reader.checksum))


def test_a_checksum_under_a_damaged_key_is_caught(demo: Dict[str, Any]) -> None:
    blob = encode(demo["header"], "good")
    key = msgpack.packb("checksum")
    at = blob.rfind(key)
    damaged = blob[:at] + key.replace(b"checksum", b"checksuM") + blob[at + len(key) :]
    path = os.path.join(demo["dir"], "key.npt")
    with open(path, "wb") as f:
        f.write(damaged + demo["records"])
    error = read_everything(path)
    assert error is not None and "header damaged" in error


def test_a_bad_header_page_is_refused_in_one_line(demo: Dict[str, Any]) -> None:
    header = copy.deepcopy(demo["header"])
    header["header_page"] = header["header_page"].replace("offset:8;\tsize:8;\tsigned:1;", "offset:9;\tsize:8;"
                                                          "\tsigned:1;", 1)  # fmt: skip
    error, code = judge(demo, header, "good", reference=False)
    assert code == 2 and error is not None and "header_page" in error and "'commit'" in error, error



@pytest.mark.parametrize("event, field, decl", [
    ("ascend_trs_logic_cq_enque", "stream", "u8 stream[4]"),  # a task id as a list
    ("ascend_halSqTaskSend", "task", "__rel_loc u8[] task"),
    ("ascend_irq_handler_entry", "irq", "u8 irq[4]"),
    ("ascend_devdrv_reset_step", "dev", "char dev[4]"),  # a device as a string
    ("ascend_devmm_alloc_done", "ret", "struct foo ret"),  # a kind_if field without a column
    ("ascend_devmm_alloc_done", "size", "char size[8]"),
    ("ascend_dms_event_report", "uce_count", "u8 uce_count[4]"),
])  # fmt: skip
def test_a_field_of_another_type_than_its_rule_expects(demo: Dict[str, Any], event: str, field: str,
                                                       decl: str) -> None:  # fmt: skip
    """A format that is valid, but whose field the profile reads as an integer is a string, an array or a struct
    (a damaged header under a correct checksum, or an unusual kernel): check (both paths, the same report) and
    export read it, never crash."""
    header = copy.deepcopy(demo["header"])
    (entry,) = [e for e in header["formats"] if e["name"] == event]
    entry["text"] = re.sub(rf"field:[^;]*\b{field};", f"field:{decl};", entry["text"], count=1)
    assert decl in entry["text"]
    path = os.path.join(demo["dir"], "typed.npt")
    with open(path, "wb") as f:
        f.write(encode(header, "good") + demo["records"])
    assert read_everything(path) is None
    reports = []
    for reference in (False, True):
        out = os.path.join(demo["dir"], "typed.json")
        code, err = run_check(path, "--json", out, reference=reference)
        assert code in (0, 1), err
        with open(out, encoding="utf-8") as f:
            report = json.load(f)
        reports.append({k: v for k, v in report.items() if k not in ("timing", "reading")})
    assert reports[0] == reports[1]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["export", "-q", "-o", os.path.join(demo["dir"], "typed.pftrace"), path])
    assert code in (0, 1), err.getvalue()
