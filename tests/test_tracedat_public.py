"""trace.dat files recorded by other people (tests/data/tracedat-public/README.md), imported with `npu-trace
import` and printed with `replay --headless`: per event name, the events equal `trace-cmd report`'s (its
output stored beside each file, and produced again where trace-cmd is installed) — the same times, CPUs,
tasks, trace_printk and trace_marker messages word for word, the same stack frames by name and address, the
same values of the fields trace-cmd prints as `key=value` — and the text output carries the same messages and
stack symbols. Every event is printed: none is dropped or left unformatted."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any, Dict, List, Tuple

import pytest
import zstandard

import tracecmd_report
from npu_trace.ftrace import tracedat
from npu_trace.ftrace.tracefs import parse_saved_cmdlines

DATA = os.path.join(os.path.dirname(__file__), "data", "tracedat-public")
CLI = [sys.executable, "-m", "npu_trace"]
FILES = {"langraph-stacks": "langraph-stacks.dat", "lisa-rtapp": "lisa-rtapp.dat.zst",
         "trappy-trace": "trappy-trace.dat.zst"}
MESSAGES = ("print", "bprint", "bputs")
# trace-cmd's sched_switch (its plugin): "prev_comm:prev_pid [prev_prio] S ==> next_comm:next_pid [next_prio]"
SWITCH = re.compile(r"^(?P<prev_comm>.+):(?P<prev_pid>\d+) \[(?P<prev_prio>-?\d+)\] \S+ ==> "
                    r"(?P<next_comm>.+):(?P<next_pid>\d+) \[(?P<next_prio>-?\d+)\]$")  # fmt: skip
pytestmark = pytest.mark.xdist_group("tracedat-public")  # one worker imports and replays each file once


def unzstd(path: str) -> bytes:
    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read()


@pytest.fixture(scope="module", params=sorted(FILES))
def replayed(request: Any, tmp_path_factory: Any) -> Dict[str, Any]:
    """One file imported and replayed: its trace.dat path, trace-cmd's report, the NDJSON and text output."""
    name, tmp = request.param, tmp_path_factory.mktemp(request.param)
    dat = os.path.join(DATA, FILES[name])
    if dat.endswith(".zst"):
        dat = str(tmp / "trace.dat")
        with open(dat, "wb") as f:
            f.write(unzstd(os.path.join(DATA, FILES[name])))
    rec = str(tmp / "rec.npt")
    imported = subprocess.run([*CLI, "import", dat, "-o", rec], capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    out: Dict[str, Any] = {"dat": dat, "import": imported.stderr}
    for fmt in ("ndjson", "text"):
        proc = subprocess.run([*CLI, "replay", "--headless", "--max", "--format", fmt, rec], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out[fmt], out[fmt + "_summary"] = proc.stdout.splitlines(), proc.stderr
    report = unzstd(os.path.join(DATA, name + ".report.zst")).decode()
    out["report_text"], out["report"] = report, tracecmd_report.parse(report.splitlines())
    out["cmdlines"] = set(parse_saved_cmdlines(tracedat.read(dat).cmdlines))  # the pids trace-cmd names from it
    return out


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed (scripts/setup installs it)")
def test_the_stored_report_is_what_trace_cmd_prints(replayed: Dict[str, Any]) -> None:
    proc = subprocess.run(["trace-cmd", "report", "-i", replayed["dat"]], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    stored = replayed["report_text"].encode()  # bytes against bytes: no decoding or newline translation between
    assert proc.stdout == stored, first_difference(proc.stdout.decode(errors="replace"), replayed["report_text"])


def first_difference(got: str, want: str) -> str:
    """Where two long texts part (pytest's own diff of megabytes of text takes minutes)."""
    a, b = got.splitlines(keepends=True), want.splitlines(keepends=True)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i + 1} of {len(a)} (stored: {len(b)} lines): {x!r} where the stored report has {y!r}"
    return f"{len(a)} lines where the stored report has {len(b)}: {len(got)} and {len(want)} characters"


def _by_name(events: List[Dict[str, Any]], key: str) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for ev in events:
        out[ev[key]].append(ev)
    return out


def test_every_event_is_printed_and_formatted(replayed: Dict[str, Any]) -> None:
    """The printed count is the summary's, trace-cmd's, and no event is shown by its raw fields."""
    summary = replayed["ndjson_summary"]
    count = int(re.search(r"replayed (\d+) events", summary).group(1))  # type: ignore[union-attr]
    assert len(replayed["ndjson"]) == len(replayed["text"]) == count == len(replayed["report"]), summary
    assert "shown by their fields" not in summary + replayed["text_summary"]


def test_per_event_name_the_ndjson_events_equal_trace_cmds(replayed: Dict[str, Any]) -> None:
    mine = _by_name([json.loads(line) for line in replayed["ndjson"]], "event")
    theirs = _by_name(replayed["report"], "name")
    assert sorted(name.split(":", 1)[1] for name in mine) == sorted(theirs)
    compared = Counter()
    for full, events in mine.items():
        name = full.split(":", 1)[1]
        ours = sorted(events, key=lambda e: ((e["ts_ns"] + 500) // 1000, e["cpu"]))
        want = sorted(theirs[name], key=lambda e: (e["us"], e["cpu"]))
        assert len(ours) == len(want), name
        for me, it in zip(ours, want):
            where = f"{name} at {it['us']} us on cpu {it['cpu']}"
            assert ((me["ts_ns"] + 500) // 1000, me["cpu"], me["pid"]) == (it["us"], it["cpu"], it["pid"]), where
            if it["pid"] in replayed["cmdlines"]:
                assert me["comm"] == it["comm"], where
            compared[name] += _same_body(name, me, it, where)
    assert all(compared[name] == len(events) for name, events in theirs.items()), (compared, Counter(
        {name: len(events) for name, events in theirs.items()}))  # every event compared on its content


def _same_body(name: str, me: Dict[str, Any], it: Dict[str, Any], where: str) -> int:
    """Compare one event's content with trace-cmd's; 1 when something was compared."""
    if name in MESSAGES:
        assert me["text"] == it["body"], where
        return 1
    if name == "kernel_stack":
        assert it["body"] == "<stack trace >" and _frames(me) == it["frames"], where
        return 1
    switch = SWITCH.match(it["body"]) if name == "sched_switch" else None
    body = " ".join(f"{k}={v}" for k, v in switch.groupdict().items()) if switch else it["body"]
    compared, wrong = tracecmd_report.fields_agree(body, me["fields"])
    assert not wrong, f"{where}: {wrong}"
    return 1 if compared else 0


def _frames(ev: Dict[str, Any]) -> List[Tuple[Any, int]]:
    """(name, address) of each frame: names from the event's text, addresses from its fields."""
    shown = ev["text"].split(" => ")
    assert shown[0] == "<stack trace>"
    names = [None if text.startswith("0x") else re.sub(r"\+0x[0-9a-f]+(/0x[0-9a-f]+)?( \[.*\])?$", "", text)
             for text in shown[1:]]  # fmt: skip
    return list(zip(names, ev["fields"]["caller"][: len(names)]))


def test_the_text_output_carries_the_messages_and_the_stack_symbols(replayed: Dict[str, Any]) -> None:
    want: Counter = Counter()
    for it in replayed["report"]:
        if it["name"] in MESSAGES:
            want[f"ftrace:{it['name']}: {it['body']}"] += 1
        elif it["name"] == "kernel_stack":
            want["ftrace:kernel_stack: " + " ".join(name or hex(addr) for name, addr in it["frames"])] += 1
    got: Counter = Counter()
    for line in replayed["text"]:
        m = re.search(r" (ftrace:(?:print|bprint|bputs): .*)$", line)
        if m:
            got[m.group(1)] += 1
        elif " ftrace:kernel_stack: <stack trace>" in line:
            frames = line.split(" => ")[1:]
            names = [f if f.startswith("0x") else re.sub(r"\+0x.*$", "", f) for f in frames]
            got["ftrace:kernel_stack: " + " ".join(names)] += 1
    assert want and got == want


def test_the_import_keeps_the_files_own_tables(replayed: Dict[str, Any]) -> None:
    assert "with its kallsyms and its printk formats" in replayed["import"], replayed["import"]


@pytest.mark.parametrize("name", ["lisa-rtapp.dat.zst", "trappy-trace.dat.zst"])
def test_every_format_a_real_kernel_wrote_is_kept(name: str, tmp_path: Any) -> None:
    """What real kernels wrote reads, each field apart, none left out: LISA's `regmap:regcache_sync` (two fields
    `type`), trappy's `sys_enter_io_submit` (two `nr`) and `task_rename` (`char oldcomm[32]` of size 16)."""
    dat = tmp_path / "trace.dat"
    dat.write_bytes(unzstd(os.path.join(DATA, name)))
    td = tracedat.read(str(dat))
    assert td.left_out == [] and len(td.used_formats()) == len(td.formats) > 400, td.left_out
