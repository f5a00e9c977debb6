"""The kernel's tables (trace_printk's formats, the symbols) from where they come to where they are read: a
session's (npu_trace.sources.kernel_tables), a recording's header (kept, read back, its damage refused in one
line), a trace.dat's (bounded), and `--stacktrace` on every tracing command."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any, Dict

import pytest
import zstandard

from npu_trace.cli import build_parser
from npu_trace.errors import InputError, RecordingError
from npu_trace.ftrace import tracedat
from npu_trace.recording import RecordingReader, RecordingWriter, build_header
from npu_trace.recording.schema import kallsyms_entry
from npu_trace.sources.kernel_tables import MARKER_FUNCTIONS, KernelTables, cut, needs_symbols, read_kallsyms
from npu_trace.sources.options import TraceOptions
from test_recording import golden_header

CLI = [sys.executable, "-m", "npu_trace"]
KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000100 t alpha
ffffffff81000200 t tracing_mark_raw_write
ffffffff81000200 t tracing_mark_raw_write_alias
ffffffff81000280 t __pfx_beta
ffffffff81000300 T tracing_mark_write
ffffffff81000400 t gamma
"""
PRINTK = '0xffffffff82000000 : "value %d\\n"\n'
PUBLIC = os.path.join(os.path.dirname(__file__), "data", "tracedat-public")


def test_a_session_keeps_the_whole_table_only_for_stacks_and_functions(tmp_path: Any) -> None:
    assert needs_symbols(["ascend:x"], True) and needs_symbols(["ftrace:function"], False)
    assert not needs_symbols(["ascend:x", "ftrace:print"], False)
    assert cut(KALLSYMS, MARKER_FUNCTIONS) == ("ffffffff81000300 T tracing_mark_write\nffffffff81000400 t gamma\n"
                                               "ffffffff81000200 t tracing_mark_raw_write\n"
                                               "ffffffff81000280 t __pfx_beta\n")  # fmt: skip
    zeros = tmp_path / "kallsyms"
    zeros.write_text("0000000000000000 T _stext\n0000000000000000 t alpha\n")
    assert read_kallsyms(str(zeros)) == "" and read_kallsyms(str(tmp_path / "none")) == ""


def header_with(**fields: Any) -> Dict[str, Any]:
    header = golden_header()
    header.update(fields)
    return header


def test_a_recording_keeps_the_tables_and_reads_them_back(tmp_path: Any) -> None:
    tables = KernelTables(PRINTK, cut(KALLSYMS, MARKER_FUNCTIONS), MARKER_FUNCTIONS)
    session = SimpleNamespace(formats=[], header=None, selected=[], clock="mono", tables=tables)
    built = build_header(session, "test", {}, golden_header()["header_page"])
    assert built["printk_formats"] == PRINTK and built["kallsyms"]["only"] == list(MARKER_FUNCTIONS)
    path = str(tmp_path / "r.npt")
    RecordingWriter(path, header_with(printk_formats=PRINTK, kallsyms=built["kallsyms"])).close()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    kernel = RecordingReader(path).kernel_text()
    assert kernel.printk == {0xFFFFFFFF82000000: "value %d\n"}
    assert kernel.symbols is not None and kernel.symbols.name(0xFFFFFFFF81000304) == "tracing_mark_write"
    assert kernel.symbols.name(0xFFFFFFFF81000404) is None and kernel.symbols.name(0xFFFFFFFF81000104) is None


@pytest.mark.parametrize("damage, why", [
    ({"raw_len": 5}, "zstd frame declares"),
    ({"codec": "lz4"}, "codec 'lz4'"),
    ({"raw_len": 1 << 40}, "outside"),
    ({"data": b"not zstd"}, "kallsyms"),
    ({"only": ["x"] * 65}, "cut to 65 functions"),
    ({"only": [1]}, "field 'only' holds int 1"),
])  # fmt: skip
def test_a_damaged_symbol_table_is_refused_in_one_line(tmp_path: Any, damage: Dict[str, Any], why: str) -> None:
    entry = dict(kallsyms_entry(KALLSYMS), **damage)
    path = str(tmp_path / "bad.npt")
    RecordingWriter(path, header_with(kallsyms=entry)).close()
    with pytest.raises(RecordingError, match="recording header kallsyms") as err:
        RecordingReader(path).kernel_text()
    assert why in str(err.value) and "\n" not in str(err.value)
    proc = subprocess.run([*CLI, "replay", "--headless", "--max", path], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and why in proc.stderr, proc.stderr


def test_tables_of_the_wrong_type_are_refused(tmp_path: Any) -> None:
    for fields, why in (({"printk_formats": 3}, "'printk_formats' is int"), ({"kallsyms": "x"}, "'kallsyms' is str")):
        with pytest.raises(RecordingError, match=why):
            RecordingWriter(str(tmp_path / "w.npt"), header_with(**fields), overwrite=True)


def test_a_changed_byte_in_the_stored_symbols_is_a_damaged_header(tmp_path: Any) -> None:
    path = str(tmp_path / "r.npt")
    RecordingWriter(path, header_with(kallsyms=kallsyms_entry(KALLSYMS, ["alpha"]))).close()
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    at = blob.find(b"alpha")  # the name in the cut list (the text itself is compressed)
    blob[at] ^= 0x20
    with open(path, "wb") as f:
        f.write(bytes(blob))
    with pytest.raises(RecordingError, match="recording header damaged"):
        RecordingReader(path)


def test_a_tracedat_kallsyms_longer_than_any_kernels_is_refused(tmp_path: Any) -> None:
    """v6: the kallsyms section's 4-byte length, made 4 GiB: one line, exit 2, no recording."""
    with open(os.path.join(PUBLIC, "lisa-rtapp.dat.zst"), "rb") as f:
        blob = bytearray(zstandard.ZstdDecompressor().stream_reader(f).read())
    first = tracedat.parse(bytes(blob)).kallsyms.splitlines()[0].encode()
    at = blob.find(first) - 4
    blob[at : at + 4] = (0xFFFFFFF0).to_bytes(4, "little")
    with pytest.raises(InputError, match=r"kallsyms of 4294967280 bytes \(at most 33554432\)"):
        tracedat.parse(bytes(blob))
    bad, out = str(tmp_path / "bad.dat"), str(tmp_path / "bad.npt")
    with open(bad, "wb") as f:
        f.write(bytes(blob))
    proc = subprocess.run([*CLI, "import", bad, "-o", out], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "kallsyms of" in proc.stderr, proc.stderr
    assert not os.path.exists(out)


@pytest.mark.parametrize("command", ["stream", "record", "live"])
def test_the_tracing_commands_take_stacktrace(command: str) -> None:
    extra = ["-o", "x.npt"] if command == "record" else []
    args = build_parser().parse_args([command, "--stacktrace", *extra])
    options = TraceOptions.from_args(args)
    assert options.stacktrace and options.make_session().stacktrace
    assert not TraceOptions.from_args(build_parser().parse_args([command, *extra])).stacktrace
