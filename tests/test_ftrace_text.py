"""ftrace text import: captures other people recorded (tests/data/ftrace-text/public) read with every event line an
event, and texts whose records exist in binary too (a public trace.dat, runs traced here, the kernel-6.18 capture)
giving the fields the kernel wrote; every line counted; no traceback on any text."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import pytest
import zstandard

from goldens import kernel_dirs, load_formats
from npu_trace.cli import main
from npu_trace.events import TraceEvent
from npu_trace.recording.reader import RecordingReader
from npu_trace.recording.writer import RecordingWriter
from npu_trace.sources.importer import import_header
from reference.pages import iter_events
from test_ftrace_oracle import decode_all

DATA = os.path.join(os.path.dirname(__file__), "data", "ftrace-text")
PUBLIC = os.path.join(DATA, "public")
US = 1000

# file -> (events read with their fields, events kept as text, lines read as other): what each capture holds
EXPECTED = {
    "lisa-trace_txt.txt.zst": (2938, 3, 0),  # sched_overutilized: no format known
    "wikibook-rpi-sched-signal.txt.zst": (21434, 34, 0),  # function tracer lines and stacks: text
    "wikibook-rpi-function-stack.txt.zst": (697, 39, 0),
    "perfetto-bad_print.systrace": (2, 1, 2),  # a print cut over three lines: its two tails are other
    "perfetto-sched_blocked_systrace.systrace": (4, 2, 0),
    "perfetto-unknown_thread_name.systrace": (1, 1, 0),
    "perfetto-cpu_frequency_limits.systrace": (0, 12, 0),
    "perf-tools-tpoint_example.txt": (0, 23, 67),  # the prose, prompts and `[...]` of a paste
    "trappy-raw_trace.txt": (3, 0, 0),
    "trappy-trace_common_clk.txt": (0, 8, 0),
    "trappy-trace_empty.txt": (2, 49, 0),
    "trappy-trace_equals.txt": (0, 7, 0),
    "trappy-trace_failed_to_parse.txt": (0, 11, 0),
    "trappy-trace_filesystem.txt": (0, 69, 0),
    "trappy-trace_idle_unsorted.txt": (14, 1, 0),  # its last line is cut in the middle of a sched_switch
    "trappy-trace_no_trailing_line.txt": (10, 0, 0),
    "trappy-trace_sched.txt": (5, 6, 0),
}
# an event line, told by a regex of its own: `task-pid [(tgid)] [cpu] ... time: `
EVENT_LINE = re.compile(r"-\d+\s+(?:\(\s*(?:\d+|-+)\)\s+)?\[\d+\]\s+(?:\S+\s+)?\d+(?:\.\d+)?: ")


def text_of(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read()
    return (zstandard.ZstdDecompressor().decompress(raw) if path.endswith(".zst") else raw).decode("utf-8")


def plain(path: str, tmp_path: Any) -> str:
    """The file as a person has it (compressed ones uncompressed)."""
    if not path.endswith(".zst"):
        return path
    out = str(tmp_path / os.path.basename(path)[: -len(".zst")])
    with open(out, "w", encoding="utf-8") as f:
        f.write(text_of(path))
    return out


def import_text(path: str, tmp_path: Any, *options: str) -> Tuple[str, Dict[str, Any]]:
    rec = str(tmp_path / "text.npt")
    assert main(["import", plain(path, tmp_path), "-o", rec, "--overwrite", *options]) == 0
    return rec, RecordingReader(rec).header["extra"]["import"]["stats"]


# ---- public captures ------------------------------------------------------------------------------------------
def test_every_public_capture_is_listed_and_named_in_the_readme() -> None:
    with open(os.path.join(DATA, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert sorted(os.listdir(PUBLIC)) == sorted(EXPECTED)
    for name in EXPECTED:
        stem = name.split("-", 1)[0]
        assert stem in readme, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_public_capture_is_read_every_event_line_an_event_every_line_counted(name: str, tmp_path: Any) -> None:
    path = os.path.join(PUBLIC, name)
    lines = text_of(path).splitlines()
    rec, stats = import_text(path, tmp_path)
    assert stats["events"] == sum(bool(EVENT_LINE.search(line)) for line in lines) > 0
    assert (stats["with_fields"], stats["as_text"], stats["other"]) == EXPECTED[name]
    counted = ("events", "frames", "headers", "lost_lines", "other")
    assert sum(stats[k] for k in counted) == stats["lines"] == len(lines)
    report = str(tmp_path / "check.json")
    assert main(["check", rec, "--json", report, "-q"]) in (0, 1)
    with open(report) as f:
        reading = json.load(f)["reading"]
    assert reading["events"] == stats["events"] and reading["lost"] == 0 and not reading["truncated"]


def test_the_issues_two_captures_are_read(tmp_path: Any, capsys: Any) -> None:
    """The class of the issue's two captures, `cat trace` with its header and irq-flags columns (the Raspberry Pi's,
    above) and trace-cmd report text of 2,943 lines, read 0 lines before ("no known form")."""
    _, lisa = import_text(os.path.join(PUBLIC, "lisa-trace_txt.txt.zst"), tmp_path)
    assert (lisa["lines"], lisa["events"], lisa["headers"]) == (2943, 2941, 2)
    assert lisa["names"]["sched_switch"]["forms"] == {"raw": 1856}
    err = capsys.readouterr().err
    assert ("lisa-trace_txt.txt (ftrace text): 2943 lines: 2941 events (2938 with their fields: sched_switch 1856, "
            "sched_wakeup 1068, print 14; 3 as text: sched_overutilized 3)") in err


def test_a_paste_says_how_many_lines_it_could_not_read_with_examples(tmp_path: Any, capsys: Any) -> None:
    import_text(os.path.join(PUBLIC, "perf-tools-tpoint_example.txt"), tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "67 other" in err[0]
    assert err[1].startswith("npu-trace: 67 lines read as neither event nor header, e.g. line 1: 'Demonstrations")


# ---- the same records in binary: the text's fields are the kernel's --------------------------------------------
def golden_events(root: str) -> List[TraceEvent]:
    header, formats = load_formats(root)
    with open(os.path.join(root, "pages.json")) as f:
        index = json.load(f)["pages"]
    path = os.path.join(root, "pages.bin")
    if not os.path.exists(path):
        path += ".zst"
    with open(path, "rb") as f:
        blob = f.read()
    if path.endswith(".zst"):
        blob = zstandard.ZstdDecompressor().decompress(blob)
    pages = [(cpu, blob[off : off + size]) for cpu, off, size in index]
    return [x for x in decode_all(header, formats, pages) if isinstance(x, TraceEvent)]


def same_fields(ref: TraceEvent, got: TraceEvent, absent: List[str], plugin: bool) -> Optional[str]:
    """Why an imported event is not the recorded one (None: it is). Times within the text's 1 µs; the fields the
    import said the text did not give left out; a marker's text without its trailing newline (the kernel's text
    ends every marker's line, with or without one); trace-cmd's sched plugin prints prev_state's 8 low bits."""
    want, have = ref.fields(), got.fields()
    for name in absent:
        want.pop(name, None)
        have.pop(name, None)
    if "buf" in want:
        want["buf"] = want["buf"].rstrip("\n")
    if plugin and "prev_state" in want:
        want["prev_state"] &= 0xFF
    if abs(ref.ts_ns - got.ts_ns) >= US or ref.pid != got.pid or ref.fmt.full_name != got.fmt.full_name:
        return f"{ref} != {got}"
    return None if want == have else f"{ref.fmt.full_name} at {ref.ts_ns}: {want} != {have}"


def compare(ref: List[TraceEvent], rec: str, plugin: bool) -> int:
    reader = RecordingReader(rec)
    names = reader.header["extra"]["import"]["stats"]["names"]
    absent = {e["format"]: e.get("not_in_text", []) for e in names.values() if "format" in e}
    kinds = {e.fmt.full_name for e in ref}
    got = [e for e in iter_events(reader) if isinstance(e, TraceEvent) and e.fmt.full_name in kinds]
    for cpu in sorted({e.cpu for e in ref}):
        mine, theirs = [e for e in ref if e.cpu == cpu], [e for e in got if e.cpu == cpu]
        assert len(mine) == len(theirs), f"cpu{cpu}: {len(mine)} recorded, {len(theirs)} imported"
        for a, b in zip(mine, theirs):
            why = same_fields(a, b, absent.get(b.fmt.full_name, []), plugin)
            assert why is None, why
    return len(got)


GOLDEN = [(root, text) for root in ("own-local", "own-counter", "trappy-raw_trace")
          for text in ("trace.txt", "report.txt", "report-R.txt", "report-l.txt")
          if os.path.exists(os.path.join(DATA, root, text + ".zst"))]  # fmt: skip


@pytest.mark.parametrize("formats", [False, True], ids=["built-in formats", "--formats"])
@pytest.mark.parametrize(("root", "text"), GOLDEN, ids=[f"{r}/{t}" for r, t in GOLDEN])
def test_text_of_recorded_pages_gives_their_fields(root: str, text: str, formats: bool, tmp_path: Any) -> None:
    base = os.path.join(DATA, root)
    ref = golden_events(base)
    options = ["--formats", os.path.join(base, "events")] if formats else []
    rec, stats = import_text(os.path.join(base, text + ".zst"), tmp_path, *options)
    plugin = text in ("report.txt", "report-l.txt")
    assert compare(ref, rec, plugin) == len(ref) > 700
    absent = {e["format"]: e["not_in_text"] for e in stats["names"].values() if e.get("not_in_text")}
    assert absent in ({}, {"ftrace:print": ["ip"]})  # a marker's ip is printed as a symbol, or not at all


def test_the_kernels_own_text_of_the_golden_capture_gives_its_pages_fields(tmp_path: Any) -> None:
    """tests/data/kernel-6.18.44-x86_64: the `trace` text the kernel printed beside the raw pages (uprobe events,
    syscalls printed by their own routine, arrays, markers with control characters)."""
    root = kernel_dirs()[0]
    rec, stats = import_text(os.path.join(root, "trace.txt"), tmp_path, "--formats", os.path.join(root, "events"))
    assert stats["as_text"] == 0 and compare(golden_events(root), rec, plugin=False) == stats["events"] == 940


def recording_of_pages(root: str, path: str) -> None:
    """The golden pages as a recording (what `npu-trace import` makes of the trace.dat they came from)."""
    from goldens import read

    formats = []
    for system in sorted(os.listdir(os.path.join(root, "events"))):
        for name in sorted(os.listdir(os.path.join(root, "events", system))):
            formats.append({"system": system, "name": name, "text": read(os.path.join(root, "events", system, name,
                                                                                       "format"))})  # fmt: skip
    with open(os.path.join(root, "pages.json")) as f:
        index = json.load(f)["pages"]
    with open(os.path.join(root, "pages.bin.zst"), "rb") as f:
        blob = zstandard.ZstdDecompressor().decompress(f.read())
    fields = {"formats": formats, "header_page": read(os.path.join(root, "header_page")),
              "trace_cpus": sorted({c for c, _, _ in index}), "events": [f"{f['system']}:{f['name']}" for f in formats]}
    header = import_header("sim", "local", None, {}, **fields)
    with RecordingWriter(path, header) as writer:
        for cpu, off, size in index:
            writer.add_page(cpu, blob[off : off + size])
        writer.close()


def check_report(rec: str, tmp_path: Any, name: str) -> Dict[str, Any]:
    out = str(tmp_path / f"{name}.json")
    assert main(["check", rec, "--json", out, "-q"]) in (0, 1)
    with open(out) as f:
        return dict(json.load(f))


@pytest.mark.parametrize("text", ["trace.txt", "report.txt"])
def test_check_finds_in_the_text_what_it_finds_in_the_pages(text: str, tmp_path: Any) -> None:
    """The simulator's run, from its kernel text or trace-cmd's report, through check: the same events by kind,
    the same memory and task accounting, the same kinds of findings as from the pages themselves."""
    root = os.path.join(DATA, "own-local")
    binary = str(tmp_path / "pages.npt")
    recording_of_pages(root, binary)
    rec, _ = import_text(os.path.join(root, text + ".zst"), tmp_path, "--profile", "sim")
    mine, theirs = check_report(binary, tmp_path, "pages"), check_report(rec, tmp_path, "text")
    assert theirs["summary"]["events"]["by_kind"] == mine["summary"]["events"]["by_kind"]
    assert mine["summary"]["events"]["by_kind"]["call"] > 20 and mine["summary"]["memory"]["allocs"] > 0
    for part in ("memory", "processes"):
        assert theirs["summary"].get(part) == mine["summary"].get(part), part
    kinds = sorted(f["kind"] for f in mine["findings"])
    assert sorted(f["kind"] for f in theirs["findings"]) == kinds
