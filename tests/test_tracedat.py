"""A trace.dat trace-cmd recorded (v7, v6) imported as a recording gives what npu-trace's own recording of the
same run gives: the same events (times aside), no loss, the same findings (times within the instances' stamping
skew). The files are one real run (tests/data/tracedat/README.md; tests/make_tracedat.py rewrites them)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, List, Optional

import pytest
import zstandard

from npu_trace.recording import RecordingReader
from test_import_privileged import check, event_kinds, resets, same_findings

DATA = os.path.join(os.path.dirname(__file__), "data", "tracedat")
CLI = [sys.executable, "-m", "npu_trace"]


def tracedat(version: str, tmp_path: Any) -> str:
    if version == "7":
        return os.path.join(DATA, "trace-v7.dat")
    out = str(tmp_path / "trace-v6.dat")
    with open(os.path.join(DATA, "trace-v6.dat.zst"), "rb") as f, open(out, "wb") as dat:
        dat.write(zstandard.ZstdDecompressor().decompress(f.read()))
    return out


@pytest.mark.parametrize("version", ["7", "6"])
def test_a_tracedat_recorded_by_trace_cmd_gives_npu_traces_findings(tmp_path: Any, version: str) -> None:
    own, imported = os.path.join(DATA, "own.npt"), str(tmp_path / "imported.npt")
    proc = subprocess.run([*CLI, "import", tracedat(version, tmp_path), "-o", imported], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert RecordingReader(imported).checksum is not None  # an import's header carries its checksum
    mine, theirs = check(own, str(tmp_path / "own.json")), check(imported, str(tmp_path / "imp.json"))
    assert theirs["reading"]["lost"] == 0 and mine["reading"]["lost"] == 0
    assert theirs["reading"]["events"] == mine["reading"]["events"] > 0
    assert theirs["reading"]["kernel"] == mine["reading"]["kernel"]
    assert event_kinds(own) == event_kinds(imported)
    assert resets(mine) and same_findings(theirs["findings"], mine["findings"])


@pytest.mark.parametrize("damage", ["common_pid", "offset", "ID"])
def test_a_damaged_format_in_a_tracedat_is_refused_in_one_line_naming_it(tmp_path: Any, damage: str) -> None:
    """A bit flipped in an event format of a trace.dat (no checksum there: the check of the formats tells it):
    exit 2, one line naming the format and what is wrong, no recording written."""
    with open(tracedat("6", tmp_path), "rb") as f:
        blob = bytearray(f.read())
    start = blob.find(b"name: ascend_halMemAlloc\n")
    name = blob[start + 6 : blob.find(b"\n", start)].decode()
    if damage == "common_pid":
        at = blob.find(b"common_pid", start) + len("common_p")
        blob[at] ^= 0x01  # common_pid -> common_phd
        want = f"format of ascend:{name}: field 'common_pid' is missing"
    elif damage == "offset":
        at = blob.find(b"offset:4;", start) + len("offset:")
        blob[at] ^= 0x02  # the offset of common_pid, 4 -> 6
        want = f"format of ascend:{name}: field 'common_pid' at offset 6"
    else:
        at = blob.find(b"ID: ", start) + len("ID: ")
        blob[at] ^= 0x40  # a digit turned into a letter
        want = f"format of ascend:{name}: bad event ID line"
    bad, out = str(tmp_path / "bad.dat"), str(tmp_path / "bad.npt")
    with open(bad, "wb") as f:
        f.write(bytes(blob))
    proc = subprocess.run([*CLI, "import", bad, "-o", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "damaged trace.dat" in proc.stderr and want in proc.stderr, proc.stderr
    assert not os.path.exists(out)


# ---- the data, cut as it is taken ---------------------------------------------------------------------------
def _page(ts: int, fill: int, size: int = 4096) -> bytes:
    """A page as the ring buffer writes it (8-byte stamp, 8-byte commit, data): only the header matters here."""
    return ts.to_bytes(8, "little") + (64).to_bytes(8, "little") + bytes([fill]) * (size - 16)


def _chunked(pages_by_cpu: Any, cut: int) -> Any:
    """A file's bytes holding each CPU's pages as zstd chunks of `cut` bytes (not a whole number of pages: a page
    lies across two chunks), and the CpuData naming them."""
    from npu_trace.ftrace.tracedat import CpuData

    blob, data = bytearray(), {}
    for cpu, pages in pages_by_cpu.items():
        raw, pieces = b"".join(pages), []
        for at in range(0, len(raw), cut):
            part = zstandard.ZstdCompressor().compress(raw[at : at + cut])
            pieces.append((len(blob), len(part), len(raw[at : at + cut])))
            blob += part
        data[cpu] = CpuData(tuple(pieces), True)
    return bytes(blob), data


def test_the_pages_are_cut_from_the_file_one_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """pages_in_time_order() gives every page of every CPU in the order a sort of them all gives (by stamp, then
    CPU, then place), inflating a CPU's chunks only as its pages are taken: at most one chunk ahead per CPU."""
    from npu_trace.ftrace import tracedat as td_module

    pages = {cpu: [_page(1000 * i + 7 * cpu, (i + cpu) % 251) for i in range(300)] for cpu in (0, 1, 3)}
    blob, data = _chunked(pages, 4096 * 5 + 1000)  # chunks of 5.2 pages
    dat = td_module.TraceDat(7, "little", 8, 4096, "zstd", data=data, blob=blob)
    inflated: List[int] = []
    real = td_module._inflate
    monkeypatch.setattr(td_module, "_inflate", lambda *a: inflated.append(1) or real(*a))
    got = []
    for cpu, page in dat.pages_in_time_order():
        got.append((cpu, page))
        taken = {c: sum(1 for k, _ in got if k == c) for c in pages}
        ahead = len(inflated) - sum(-(-n * 4096 // (4096 * 5 + 1000)) for n in taken.values())
        assert ahead <= len(pages), (len(got), len(inflated), taken)  # a chunk ahead per CPU at most
    everything = sorted((int.from_bytes(p[:8], "little"), cpu, i, p) for cpu, ps in pages.items()
                        for i, p in enumerate(ps))  # fmt: skip
    assert got == [(cpu, p) for _, cpu, _, p in everything] and dat.page_count == 900


def test_a_damaged_chunk_s_pages_are_skipped_and_a_loss_given_in_their_place() -> None:
    """A compressed chunk that does not inflate (here the second of a CPU's, its bytes garbage): the pages that lie
    in it even in part are skipped (chunks of 5.2 pages: pages 5-10), a loss of an unknown number of events in
    their place at the last stamp before them, the chunk named in `damaged`; every other page given, the CPU's
    other pages and the other CPU's alike."""
    from npu_trace.events import Loss
    from npu_trace.ftrace.tracedat import TraceDat

    pages = {cpu: [_page(1000 * i + 7 * cpu, (i + cpu) % 251) for i in range(30)] for cpu in (0, 1)}
    blob, data = _chunked(pages, 4096 * 5 + 1000)
    offset, size, raw = data[1].pieces[1]
    blob = blob[:offset] + b"\x00" * size + blob[offset + size :]
    dat = TraceDat(7, "little", 8, 4096, "zstd", data=data, blob=blob)
    got = list(dat.pages_in_time_order())
    assert [p for cpu, p in got if cpu == 0] == pages[0] and dat.page_count == 30 + 24
    loss = Loss("trace.dat", 1, "damaged", 0, 4007)  # at cpu1's page 4's stamp
    assert [p for cpu, p in got if cpu == 1] == [*pages[1][:5], loss, *pages[1][11:]]
    assert dat.damaged == [f"cpu1: the chunk at byte {offset} ({raw} bytes inflated): corrupt zstd data (error "
                           "when determining content size): its 6 pages skipped"]  # fmt: skip


@pytest.mark.parametrize("declared", [64 << 20, 4095, None])
def test_a_zstd_chunk_is_never_inflated_past_the_size_the_file_gives_it(declared: Optional[int]) -> None:
    """A zstd frame of a few kB that declares 64 MiB (a bomb), or one byte too few: refused before it is inflated
    (python-zstandard sizes its output by the frame's declaration, not by the bound it is given); a frame that
    declares no size is inflated within the size the file gives."""
    import tracemalloc

    import zstandard

    from npu_trace.ftrace.tracedat import TraceDat, _inflated

    dat = TraceDat(7, "little", 8, 4096, "zstd")
    if declared is None:
        frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(range(256)) * 16)
    else:
        frame = zstandard.ZstdCompressor().compress(bytes(declared))
    tracemalloc.start()
    try:
        out, why = _inflated(dat, frame, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    if declared is None:
        assert (out, why) == (bytes(range(256)) * 16, "")
    else:
        assert (out, why) == (b"", f"zstd frame declares {declared} bytes, the file says 4096")


def test_import_reads_past_a_damaged_chunk(tmp_path: Any) -> None:
    """trace-v7.dat with cpu0's chunk damaged (its frame's magic): imported, cpu1's events kept, the chunk named,
    and the recording says the loss."""
    from npu_trace.ftrace import tracedat as td_module

    path = os.path.join(DATA, "trace-v7.dat")
    ((offset, _, raw),) = td_module.read(path).data[0].pieces
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    blob[offset] ^= 0xFF
    bad, out = str(tmp_path / "bad.dat"), str(tmp_path / "bad.npt")
    with open(bad, "wb") as f:
        f.write(bytes(blob))
    proc = subprocess.run([*CLI, "import", bad, "-o", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = f"npu-trace: bad.dat: damaged, skipped: cpu0: the chunk at byte {offset} ({raw} bytes inflated): "
    assert said in proc.stderr, proc.stderr
    proc = subprocess.run([*CLI, "replay", "--headless", "--max", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("\n") > 100 and " [001] " in proc.stdout and " [000] " not in \
        proc.stdout.replace("[000] !! LOST", ""), proc.stderr  # fmt: skip
    assert "loss: an unknown number of events lost (trace.dat/damaged/cpu0=unknown number (flagged))" in proc.stderr


@pytest.mark.parametrize("long_size", [8, 4])
def test_a_page_is_skipped_only_when_it_holds_nothing_and_tells_of_no_loss(long_size: int) -> None:
    """pages(): a page whose commit word (npu_trace.ftrace.framing.commit_reader, 8 or 4 bytes after the stamp)
    counts no data and no missed events is skipped; one that only tells of missed events is given (the walk
    counts the loss), whatever the top bits of a 4-byte commit; a tail too short for a page header is given at
    the last stamp (the walk counts it a short page), never dropped."""
    from npu_trace.ftrace.framing import MISSED_EVENTS
    from npu_trace.ftrace.tracedat import CpuData, TraceDat

    def page(ts: int, commit: int) -> bytes:
        return ts.to_bytes(8, "little") + commit.to_bytes(long_size, "little") + bytes(4096 - 8 - long_size)

    pages = [page(100, 64), page(200, 0), page(300, MISSED_EVENTS), page(400, 1 << 20), page(500, 64)]
    raw = b"".join(pages) + b"\x07" * (7 + long_size)  # one byte short of a header
    dat = TraceDat(7, "little", long_size, 4096, "none", data={0: CpuData(((0, len(raw), len(raw)),), False)},
                   blob=raw)  # fmt: skip
    got = list(dat.pages(0))
    assert [ts for ts, _ in got] == [100, 300, 400, 500, 500]
    assert [p for _, p in got] == [pages[0], pages[2], pages[3], pages[4], raw[-(7 + long_size) :]]
