"""Record and replay figures of the ingest benchmark (workload A), measured in the same run as the ingest figures.

`npu-trace record` is measured in-process, exactly as the CLI records: a `TracefsSession([EVENT])` (same buffer
size) with a `Recorder` as the sink of the one pump (its default poll interval), the reader on
the tracer CPU, the generator pinned to the generator CPU. Its runs go through the ingest bench's own full-speed
then paced-steps logic (tool "npu-record"); the generator's events are counted by decoding each recording
afterwards (outside the timed part), and the losses come from the recording (kernel counters written by the
recorder, page-missed flags in the pages).

On the first full-speed recording (and the first full-speed trace-cmd .dat, kept for it) this module then
measures:
  * file sizes: whole files as each tool writes them by default (.npt zstd chunks; trace-cmd 3.1.6 writes a
    v7 file, zstd-compressed, by default), the event data alone (compressed), and the raw page bytes;
  * replay (walk and order only): `ReplaySource(path).parts()` -> events/s and CPU per event, against
    `trace-cmd report -i FILE > /dev/null` on the trace-cmd file of the same workload;
  * check: `analyze(path, "sim")` (what `npu-trace check` runs). The getpid events are not in the sim
    profile's mapping, so check counts them without decoding them; the other extreme, recordings where every
    event is decoded, paired and analysed, is measured by benchmarks.checks.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.recording.writer import ZSTD_LEVEL

if TYPE_CHECKING:  # pragma: no cover
    from benchmarks.common import Run
    from benchmarks.ingest import Bench  # annotations only: record never imports ingest at run time

REC = "npu-record"
RECORD_MODE = "in-process: LiveTrace + Recorder as the sink of the pump, reader on the tracer CPU"
CHECK_PROFILE = "sim"
TARGET_RATE = 1_000_000.0


def record_run(bench: Bench, n: int, rate: float) -> Run:
    """One traced generator run recorded to an .npt file (kept when it is the first full-speed run)."""
    from benchmarks.common import EVENT, BenchError, Run, cpu_self, parse_gen
    from npu_trace.pipeline import pump
    from npu_trace.sinks.npt_sink import Recorder
    from npu_trace.sources.live_trace import LiveTrace
    from npu_trace.sources.tracefs_source import TracefsSession

    run = Run(REC, n, rate)
    bench.rec_count += 1
    path = os.path.join(bench.tmp, f"rec-{bench.rec_count}.npt")
    argv = bench.gen_argv(n, rate)
    session = TracefsSession([EVENT], buffer_kb=bench.args.buffer_kb, tag="benchrec", companions=())
    with LiveTrace(session) as source:
        recorder = Recorder(session, path, "bench")
        t0, c0 = time.monotonic(), cpu_self()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        try:
            pump(source, recorder, until=lambda: proc.poll() is not None)
        finally:
            recorder.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        run.reader_cpu_s = cpu_self() - c0
        run.wall_s = time.monotonic() - t0
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        kernel_lost = session.ledger.total
    if proc.returncode:
        raise BenchError(f"{argv[0]} exited with {proc.returncode}")
    run.gen_pid, _, run.gen_elapsed_ns, run.gen_cpu_ns = parse_gen(out)
    run.dat_bytes = os.path.getsize(path)
    mine, total, lost, incomplete = count_recording(path, run.gen_pid)
    run.events, run.other_events = mine, total - mine
    run.lost, run.incomplete = lost, incomplete
    if lost != kernel_lost:
        run.notes.append(f"recording says {lost} lost, the live session {kernel_lost}")
    if rate == 0 and bench.rec_kept is None:
        bench.rec_kept, bench.rec_kept_run = path, run
    else:
        os.unlink(path)
    return run


def count_recording(path: str, pid: int) -> Tuple[int, int, int, bool]:
    """(events of `pid`, all events, events lost, incomplete) of a recording, by decoding it."""
    from npu_trace.sources.replay_source import ReplaySource

    src = ReplaySource(path)
    timeline = src.block_timeline()
    mine = 0
    for batch in src.batches():
        mine += int((timeline.push(batch).pid == pid).sum())
    return mine, src.events_read, src.ledger.total, src.ledger.incomplete()


# ---- the measurements on the kept files ---------------------------------------------------------------
def npt_sizes(path: str) -> Dict[str, int]:
    """Whole file, event data as stored (chunks + loss records + trailer, i.e. the file minus its header) and
    the raw page bytes (uncompressed), of a recording."""
    from npu_trace.recording.reader import RecordingReader

    reader = RecordingReader(path)
    for _ in reader.records():
        pass
    trailer = reader.trailer or {}
    size = os.path.getsize(path)
    return {"file": size, "header": reader.data_offset, "data": size - reader.data_offset,
            "raw_pages": int(trailer.get("bytes_raw", 0))}  # fmt: skip


def dat_sizes(bench: Bench, dat: str) -> Dict[str, Any]:
    """Whole file, flyrecord (event data) bytes as stored and uncompressed, and the format, of a trace-cmd file."""
    from benchmarks.common import ANCHOR_INSTANCE

    out: Dict[str, Any] = {"file": os.path.getsize(dat)}
    with open(dat, "rb") as f:
        head = f.read(64)
    m = re.match(rb"\x17\x08\x44tracing(\d+)\x00", head)
    out["version"] = int(m.group(1)) if m else None
    summary = subprocess.run([bench.trace_cmd, "dump", "--summary", "-i", dat], capture_output=True, text=True,
                             check=False).stdout  # fmt: skip
    m2 = re.search(r"^\s*(\S+)\s+\[Compression algorithm\]", summary, re.M)
    out["compression"] = m2.group(1) if m2 else "none"
    m3 = re.search(rf'\[buffer "{ANCHOR_INSTANCE}".*?(\d+) bytes flyrecord data\]', summary)
    out["data"] = int(m3.group(1)) if m3 else None
    # The uncompressed size of the event data: trace-cmd convert prints "N bytes in size (M uncompressed)".
    conv = os.path.join(bench.tmp, "convert.dat")
    proc = subprocess.run([bench.trace_cmd, "convert", "-i", dat, "-o", conv, "--compression", "zstd"],
                          capture_output=True, text=True, check=False, cwd=bench.tmp)  # fmt: skip
    if os.path.exists(conv):
        os.unlink(conv)
    raw = [int(x) for x in re.findall(r"\((\d+) uncompressed\)", proc.stdout + proc.stderr)]
    out["raw_pages"] = sum(raw) if raw else None
    return out


def time_replay(path: str, repeat: int) -> Dict[str, Any]:
    """Replay without output: every part of ReplaySource(path).parts() through its block timeline (the walk
    and the ordered merge, blocks taken as check takes them), events counted; median of `repeat`."""
    from benchmarks.common import cpu_self, median
    from npu_trace.pipeline.batch import Batch
    from npu_trace.sources.replay_source import ReplaySource

    walls, cpus, events = [], [], 0
    for _ in range(repeat):
        t0, c0 = time.monotonic(), cpu_self()
        src = ReplaySource(path)
        timeline = src.block_timeline()
        for part in src.parts():
            if isinstance(part, Batch):
                timeline.add(part)
            else:
                timeline.add_chunk(part)
            if timeline.pending_rows >= 1 << 16:
                timeline.take()
        timeline.take()
        cpus.append(cpu_self() - c0)
        walls.append(time.monotonic() - t0)
        events = src.events_read
    return rate_figures(events, median(walls), median(cpus))


def time_output(path: str, fmt: str, events: int, repeat: int) -> Dict[str, Any]:
    """`npu-trace replay --headless --max --format FMT PATH > /dev/null` (every event printed, as `trace-cmd
    report` prints them), in a child process: its wall time and CPU; median of `repeat`."""
    import sys

    from benchmarks.checks import timed

    argv = [sys.executable, "-m", "npu_trace", "replay", "--headless", "--max", "--format", fmt, path]
    fig = timed(argv, repeat)
    return rate_figures(events, fig["wall_s"], fig["cpu_s"])


def time_check(path: str, repeat: int) -> Dict[str, Any]:
    """analyze(path, "sim") as `npu-trace check` runs it (no progress bar); median of `repeat`."""
    from benchmarks.common import cpu_self, median
    from npu_trace.ci.recording_analysis import analyze

    walls, cpus = [], []
    result: Dict[str, Any] = {}
    for _ in range(repeat):
        t0, c0 = time.monotonic(), cpu_self()
        result = analyze(path, CHECK_PROFILE, progress=False)
        cpus.append(cpu_self() - c0)
        walls.append(time.monotonic() - t0)
    fig = rate_figures(int(result["reading"]["events"]), median(walls), median(cpus))
    fig["normalized_events"] = int(result["analysis"]["summary"]["events"]["total"])
    fig["normalized_by_kind"] = dict(result["analysis"]["summary"]["events"]["by_kind"])
    fig["findings"] = len(result["analysis"]["findings"])
    return fig


def time_report(bench: Bench, dat: str, events: int, repeat: int) -> Dict[str, Any]:
    """`trace-cmd report -q -i DAT > /dev/null` (text formatting included: that is what it does)."""
    from benchmarks.common import BenchError, cpu_children, median

    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.monotonic(), cpu_children()
        rc = subprocess.run([bench.trace_cmd, "report", "-q", "-i", dat], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, check=False).returncode  # fmt: skip
        cpus.append(cpu_children() - c0)
        walls.append(time.monotonic() - t0)
        if rc:
            raise BenchError(f"trace-cmd report exited with {rc}")
    return rate_figures(events, median(walls), median(cpus))


def rate_figures(events: int, wall: float, cpu: float) -> Dict[str, Any]:
    return {"events": events, "wall_s": wall, "cpu_s": cpu, "events_per_s": events / wall if wall else 0.0,
            "cpu_ns_per_event": cpu / events * 1e9 if events else 0.0}  # fmt: skip


# ---- reporting --------------------------------------------------------------------------------------
def table(rows: Sequence[Sequence[str]]) -> None:
    from benchmarks.common import log

    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        log("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            log("  ".join("-" * w for w in widths))


def per_event(v: Optional[int], n: int) -> Optional[float]:
    return v / n if v is not None and n else None


def fmt_bpe(v: Optional[float]) -> str:
    return f"{v:.2f}" if v is not None else "n/a"


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def fmt_ratio(name: str, v: Optional[float]) -> str:
    return f"{name} {v:.2f}x" if v is not None else f"{name} n/a"


def report(args: Any, bench: Bench, by_tool: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Measure replay/check/report on the kept files, print the tables, ratios and targets; the JSON part."""
    from benchmarks.common import ANCHOR, log

    rec = by_tool.get(REC, {})
    anchor = by_tool.get(ANCHOR)
    out: Dict[str, Any] = {"mode": RECORD_MODE, "poll": "pump default", "check_profile": CHECK_PROFILE}
    path, kept = bench.rec_kept, bench.rec_kept_run
    if path is None or kept is None:
        log("record: no full-speed recording was kept: no replay figures")
        return out
    n = kept.n
    dat, dat_run = bench.dat_kept, bench.dat_kept_run

    # -- sizes --
    npt = npt_sizes(path)
    out["npt"] = dict(npt, format=f"npt, zstd level-{ZSTD_LEVEL} chunks (npu-trace default)", events=n)
    tc: Optional[Dict[str, Any]] = None
    if dat is not None and dat_run is not None:
        tc = dat_sizes(bench, dat)
        tc["format"] = (f"trace-cmd file v{tc['version']}, {tc['compression']}"
                        + (" (trace-cmd 3.1.6 default)" if tc["version"] == 7 else ""))  # fmt: skip
        tc["events"] = dat_run.n
        out["trace_cmd_dat"] = tc
    log("")
    log(f"record: npu-trace record measured {RECORD_MODE}; file sizes of one full-speed run of each tool (N={n:,})")
    rows: List[Tuple[str, ...]] = [("file", "format", "bytes", "B/event", "event data B/event",
                                    "raw pages B/event", "metadata B")]  # fmt: skip
    rows.append(
        (
            "npu-trace .npt",
            out["npt"]["format"],
            f"{npt['file']:,}",
            fmt_bpe(per_event(npt["file"], n)),
            fmt_bpe(per_event(npt["data"], n)),
            fmt_bpe(per_event(npt["raw_pages"], n)),
            f"{npt['header']:,}",
        )
    )
    if tc is not None:
        meta = tc["file"] - tc["data"] if tc["data"] is not None else None
        rows.append(("trace-cmd .dat", tc["format"], f"{tc['file']:,}", fmt_bpe(per_event(tc["file"], n)),
                     fmt_bpe(per_event(tc["data"], n)), fmt_bpe(per_event(tc["raw_pages"], n)),
                     f"{meta:,}" if meta is not None else "n/a"))  # fmt: skip
    table(rows)
    log(
        "  (event data: the file minus its header (.npt) / the instance's flyrecord section (.dat), compressed as "
        "stored; raw pages: the same pages uncompressed; trace-cmd's metadata includes kallsyms)"
    )

    # -- replay, check, trace-cmd report --
    log("")
    repeat = args.repeat
    replay = out["replay"] = time_replay(path, repeat)
    check = out["check"] = time_check(path, repeat)
    check["note"] = (
        "getpid events are not in the sim profile's mapping: check counts them as 'log' events without "
        "decoding them (runs of them are stepped over); benchmarks.checks measures the other extreme"
    )
    text = out["replay_text"] = time_output(path, "text", replay["events"], repeat)
    ndjson = out["replay_ndjson"] = time_output(path, "ndjson", replay["events"], repeat)
    rep = None
    if dat is not None and dat_run is not None:
        rep = out["trace_cmd_report"] = time_report(bench, dat, dat_run.events + dat_run.other_events, repeat)
    log(f"replay/check on that recording (in-process, reader CPU; printing ones: a child process; median of {repeat})")
    rows = [("reader", "events", "wall s", "CPU s", "events/s", "CPU ns/event")]
    items = [("npu-trace replay (decode only)", replay),
             ("npu-trace replay --headless --max (text) > /dev/null", text),
             ("npu-trace replay --headless --max --format ndjson > /dev/null", ndjson),
             (f"npu-trace check (analyze, {CHECK_PROFILE} profile)", check)]  # fmt: skip
    if rep is not None:
        items.append(("trace-cmd report > /dev/null", rep))
    for name, fig in items:
        rows.append((name, f"{fig['events']:,}", f"{fig['wall_s']:.3f}", f"{fig['cpu_s']:.3f}",
                     f"{fig['events_per_s'] / 1e6:.3f} M/s", f"{fig['cpu_ns_per_event']:.0f}"))  # fmt: skip
    table(rows)
    kinds = ", ".join(f"{k} {v:,}" for k, v in check["normalized_by_kind"].items()) or "none"
    log(
        f"  check: {check['events']:,} events read, by kind: {kinds} (getpid is not in the {CHECK_PROFILE} "
        f"mapping: counted as 'log' without being decoded); {check['findings']} findings."
    )
    if rep is not None:
        log("  trace-cmd report formats every event as text; npu-trace replay (decode only) builds event tuples "
            "(no text); the --headless ones print every event (start-up included)")

    # -- ratios --
    r: Dict[str, Optional[float]] = {}
    if anchor is not None:
        r["lossless_rate"] = ratio(rec.get("lossless_rate"), anchor.get("lossless_rate"))
        r["reader_cpu_per_event"] = ratio(rec.get("reader_cpu_s_per_m"), anchor.get("reader_cpu_s_per_m"))
        r["gen_slowdown"] = ratio(rec.get("gen_slowdown"), anchor.get("gen_slowdown"))
        r["bytes_per_event"] = ratio(rec.get("bytes_per_event"), anchor.get("bytes_per_event"))
    if tc is not None:
        r["event_data_bytes"] = ratio(per_event(npt["data"], n), per_event(tc["data"], n))
        r["raw_page_bytes"] = ratio(per_event(npt["raw_pages"], n), per_event(tc["raw_pages"], n))
    if rep is not None:
        r["replay_rate_vs_report"] = ratio(replay["events_per_s"], rep["events_per_s"])
        r["replay_cpu_per_event_vs_report"] = ratio(replay["cpu_ns_per_event"], rep["cpu_ns_per_event"])
        r["text_rate_vs_report"] = ratio(text["events_per_s"], rep["events_per_s"])
        r["ndjson_rate_vs_report"] = ratio(ndjson["events_per_s"], rep["events_per_s"])
        r["check_rate_vs_report"] = ratio(check["events_per_s"], rep["events_per_s"])
    out["ratios"] = r
    if r:
        log("npu-trace record / trace-cmd: " + ", ".join(fmt_ratio(k, v) for k, v in r.items()))

    # -- targets --
    targets: List[Dict[str, Any]] = []
    lr = rec.get("lossless_rate") or 0.0
    targets.append({"name": "record lossless rate", "value": lr, "target": TARGET_RATE, "met": lr >= TARGET_RATE,
                    "text": f"npu-trace record lossless {lr / 1e6:.3f} M ev/s (at {rec.get('lossless_at') or '-'}) "
                            f"vs target 1.0 M ev/s"})  # fmt: skip
    ours, theirs = rec.get("bytes_per_event"), (anchor or {}).get("bytes_per_event")
    if ours is not None and theirs is not None:
        fmt = tc["format"] if tc is not None else "trace-cmd default"
        targets.append({"name": "record bytes/event <= trace-cmd's", "value": ours, "target": theirs,
                        "met": ours <= theirs,
                        "text": f"record {ours:.2f} B/event (.npt zstd) vs trace-cmd {theirs:.2f} B/event ({fmt}), "
                                "whole files, median of the full-speed runs"})  # fmt: skip
    else:
        targets.append({"name": "record bytes/event <= trace-cmd's", "value": ours, "target": None, "met": None,
                        "text": "record bytes/event vs trace-cmd: not measured (--no-anchor)"})  # fmt: skip
    cr = check["events_per_s"]
    targets.append({"name": "check rate", "value": cr, "target": TARGET_RATE, "met": cr >= TARGET_RATE,
                    "text": f"check (analyze, {CHECK_PROFILE} profile, getpid counted as 'log' events) "
                            f"{cr / 1e6:.3f} M ev/s vs target 1.0 M ev/s"})  # fmt: skip
    for t in targets:
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
        log(f"targets: {t['text']}: {verdict}")
    out["targets"] = targets
    return out
