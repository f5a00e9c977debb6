"""A recording with a chunk damaged on disk, through every command that reads recordings: the chunk skipped and
named (its pages per CPU), a loss of an unknown number of events counted on each of its CPUs and shown, every other
chunk read. The recording: tests/data/hostctx/sim-ecc-reset.npt (a real one, 3 chunks), chunk 1's data with one
byte flipped, as a disk's bad sector or a bad copy leaves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, List, Tuple

import pytest

from npu_trace.recording import RecordingReader
from test_recording import damage

CLI = [sys.executable, "-m", "npu_trace"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHOLE = os.path.join(ROOT, "tests", "data", "hostctx", "sim-ecc-reset.npt")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: Any) -> Tuple[str, str]:
    """(the damaged copy, what the reader says of its chunk)."""
    reader = RecordingReader(WHOLE)
    list(reader.records())
    assert reader.trailer is not None and reader.chunks_read == 3
    offset = dict(reader.trailer["index"])[1]
    with open(WHOLE, "rb") as f:
        blob, _ = damage(f.read(), offset)
    path = str(tmp_path_factory.mktemp("damaged") / "damaged.npt")
    with open(path, "wb") as f:
        f.write(blob)
    bad = RecordingReader(path)
    list(bad.records())
    assert len(bad.damaged) == 1 and bad.damaged[0].startswith(f"chunk 1 at byte {offset}: ")
    return path, bad.damaged[0]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def ndjson(path: str) -> Tuple[List[str], List[str], str]:
    """replay --headless --max --format ndjson: (the events' lines, the losses' lines, its summary)."""
    proc = cli("replay", "--headless", "--max", "--format", "ndjson", path)
    assert proc.returncode == 0 and proc.stderr.count("\n") == 1, proc.stderr
    lines = proc.stdout.splitlines()
    lost = [line for line in lines if json.loads(line).get("event") == "npu_trace:lost"]
    return [line for line in lines if line not in lost], lost, proc.stderr


def test_replay_prints_every_other_chunk_and_the_loss_where_the_chunk_was(damaged: Tuple[str, str]) -> None:
    path, said = damaged
    events, lost, summary = ndjson(path)
    whole, whole_lost, _ = ndjson(WHOLE)
    assert not whole_lost and len(events) < len(whole)
    kept = iter(whole)  # the events printed are the whole recording's, in its order, but those of the chunk
    assert all(line in kept for line in events)
    assert [(e["cpu"], e["source"], e["kind"], e["count"]) for e in map(json.loads, lost)] == [
        (0, "recording", "damaged", None), (1, "recording", "damaged", None)]  # fmt: skip
    stamps = [json.loads(line)["ts_ns"] for line in events]
    at = json.loads(lost[0])["ts_ns"]
    assert min(stamps) < at < max(stamps)  # the last page stamp before the chunk: among the events, not at 0
    assert f"replayed {len(events)} events from " in summary
    assert "loss: an unknown number of events lost (recording/damaged/cpu0=unknown number (flagged), " in summary
    assert summary.rstrip().endswith(f"; 1 damaged part(s) skipped: {said}")


def test_check_fails_it_as_incomplete_and_names_the_chunk(damaged: Tuple[str, str], tmp_path: Any) -> None:
    path, said = damaged
    out = str(tmp_path / "check.json")
    proc = cli("check", path, "--json", out)
    assert proc.returncode == 1, proc.stderr
    with open(out) as f:
        report = json.load(f)
    assert report["reading"]["damaged"] == [said] and report["reading"]["incomplete"] is True
    assert {"rule": "loss", "message": "the trace is incomplete: an unknown number of events lost"}.items() <= next(
        v for v in report["violations"] if v["rule"] == "loss").items()  # fmt: skip
    assert f"  note: a damaged part was skipped: {said}\n" in proc.stdout
    proc = cli("check", WHOLE, path)  # several recordings: each one's line, then its notes
    assert proc.returncode == 1 and "FAIL damaged.npt: findings: " in proc.stdout, proc.stderr
    before, mine = proc.stdout.split("FAIL damaged.npt: ")
    assert mine.splitlines()[1] == f"  note: a damaged part was skipped: {said}" and "note:" not in before


def test_export_diff_and_cluster_say_so(damaged: Tuple[str, str], tmp_path: Any) -> None:
    path, said = damaged
    proc = cli("export", path, "-o", str(tmp_path / "out.json"))
    assert proc.returncode == 0 and proc.stderr.rstrip().endswith(f"; 1 damaged part(s) skipped: {said}"), proc.stderr
    proc = cli("diff", WHOLE, path)
    assert proc.returncode in (0, 1) and f"npu-trace: note: B ({path}) is incomplete: damaged part skipped: {said}\n" \
        in proc.stderr and f"A ({WHOLE})" not in proc.stderr, proc.stderr  # fmt: skip
    proc = cli("cluster", WHOLE, path)
    assert "1 recording(s) are incomplete (an origin may lie in what they lack): damaged.npt (1 damaged part(s) " \
        "skipped)" in proc.stdout, proc.stdout  # fmt: skip


def test_a_record_that_cannot_be_read_is_skipped_to_the_next_chunk(tmp_path: Any) -> None:
    """Chunk 1's record itself damaged (its map header: no CRC guards it): replay and check read on from chunk 2,
    one loss of an unknown number of events on no CPU in particular."""
    reader = RecordingReader(WHOLE)
    list(reader.records())
    assert reader.trailer is not None
    offsets = dict(reader.trailer["index"])
    with open(WHOLE, "rb") as f:
        blob = bytearray(f.read())
    blob[offsets[1]] = 0xC1  # a byte msgpack never uses
    path = str(tmp_path / "record.npt")
    with open(path, "wb") as f:
        f.write(bytes(blob))
    said = (f"the record at byte {offsets[1]} cannot be read (record at byte {offsets[1]}: not valid msgpack "
            f"(FormatError)): read on from chunk 2 at byte {offsets[2]}, 1 chunk lost (their CPUs unknown)")
    events, lost, summary = ndjson(path)
    whole, _, _ = ndjson(WHOLE)
    kept = iter(whole)
    assert 0 < len(events) < len(whole) and all(line in kept for line in events)
    assert [(e["cpu"], e["kind"]) for e in map(json.loads, lost)] == [(-1, "damaged")]
    assert "loss: an unknown number of events lost (recording/damaged/all=unknown number (flagged))" in summary
    assert summary.rstrip().endswith(f"; 1 damaged part(s) skipped: {said}")
    out = str(tmp_path / "check.json")
    assert cli("check", path, "--json", out).returncode == 1
    with open(out) as f:
        assert json.load(f)["reading"]["damaged"] == [said]


@pytest.mark.asyncio
async def test_the_tui_replays_it_with_the_loss_shown(damaged: Tuple[str, str]) -> None:
    """The TUI's replay reads past the chunk; its status bar says events were lost, how many unknown."""
    from test_tui_support import PROFILE, wait_for
    from tui.messages import SourceSpec
    from tui.ui.app import NpuTraceApp
    from tui.ui.widgets.status import StatusBar
    from tui.worker.replay_feed import ReplayFeedSource

    app = NpuTraceApp(SourceSpec(ReplayFeedSource, (damaged[0], None)), PROFILE)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.counters.ended, timeout=30)
        assert app.counters.events > 0 and app.counters.loss == 0 and app.counters.loss_flagged
        assert "recording/damaged/cpu0=unknown number (flagged)" in app.counters.loss_text
        bar = app.query_one(StatusBar)
        await wait_for(pilot, lambda: " LOST events (how many unknown) " in str(bar.render()), timeout=30)
        await pilot.press("q")


def test_a_recording_with_bytes_after_its_trailer_is_read_and_said_incomplete(tmp_path: Any) -> None:
    """Another recording appended to this one: this one read whole, the bytes after its trailer named, a loss of
    an unknown number of events printed where they lie (after the last chunk's pages), the check failed."""
    with open(WHOLE, "rb") as f:
        blob = f.read()
    path = str(tmp_path / "appended.npt")
    with open(path, "wb") as f:
        f.write(blob + blob)
    events, lost, summary = ndjson(path)
    whole, _, _ = ndjson(WHOLE)
    assert events == whole
    assert [(e["cpu"], e["source"], e["kind"], e["count"]) for e in map(json.loads, lost)] == [
        (-1, "recording", "damaged", None)]  # fmt: skip
    said = f"{len(blob)} bytes after the trailer (at byte {len(blob)}) not read"
    assert summary.rstrip().endswith(f"loss: an unknown number of events lost (recording/damaged/all=unknown number "
                                     f"(flagged)); 1 damaged part(s) skipped: {said}")  # fmt: skip
    proc = cli("check", path)
    assert proc.returncode == 1 and f"  note: a damaged part was skipped: {said}\n" in proc.stdout, proc.stdout


def test_replay_says_as_many_events_as_it_prints_when_a_page_stamp_is_damaged(tmp_path: Any) -> None:
    """One page's stamp hit (9,000 s ahead: a bit flip with the chunk's CRC made after it, as a bad sensor of a
    host's clock or a driver can write one): what comes after it on the other CPUs is behind what was released,
    dropped as late and counted lost. The summary's count is the events printed (before: every event read, 16x
    the lines printed on the helper's file)."""
    import random

    from npu_trace.ftrace.encode import PageEncoder
    from npu_trace.recording import RecordingWriter
    from npu_trace.sim.scenarios import plan
    from npu_trace.sim.synth import synth_events
    from test_timeline import HEADER, reads, spread, synth_header

    events = synth_events(plan("ecc-reset", 3, 0.3, 3000, 2))
    enc = PageEncoder(HEADER)
    per_cpu = spread(events, 2, 3)
    pages = {cpu: enc.pages((e.ts_ns, e.pid, e.fmt, e.values) for e in evs) for cpu, evs in per_cpu.items()}
    hit = bytearray(pages[0][3])
    hit[:8] = (int.from_bytes(hit[:8], "little") + 9_000 * 10**9).to_bytes(8, "little")
    pages[0][3] = bytes(hit)
    path = str(tmp_path / "late.npt")
    with RecordingWriter(path, synth_header(2), chunk_bytes=6 << 10) as w:
        for batch in reads(pages, [], random.Random(3), events[-1].ts_ns + 1):
            for cpu, page in batch.pages:
                w.add_page(cpu, page)
            if batch.mark is not None:
                w.add_mark(batch.mark)
    printed, _, summary = ndjson(path)
    assert "tracefs/late/" in summary and len(printed) < len(events)
    assert f"replayed {len(printed)} events from " in summary
