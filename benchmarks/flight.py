"""The flight recorder's memory over a long steady load: RSS flat at the stated bound (figures, never pass/fail).

A simulated live session (the generator's reads of the simulator's `steady` plan, pages laid out as the kernel
lays them out, `benchmarks.gen_recording.Run`) of --minutes of trace time is fed to `record --flight`'s sink
(`npu_trace.sinks.flight.live_flight.LiveFlight`: the ring, the columnar timeline, the live analysis), as fast as it
is made. Each run is a process of its own; the anchor, in the same invocation, is the same session through
the same timeline and analysis without the ring. Rows every --every seconds of trace time: the ring's bytes
and span, what it let go, and both processes' RSS; then the growth of each over the second half of the run
(flat: a few MiB of allocator noise at most) and the flight process's RSS above the anchor's, against the bound.

python -m benchmarks.flight [--minutes 2] [--rate 4000] [--flight-bytes 16M] [--flight 600]   (10 min: --minutes 10)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(args: argparse.Namespace) -> None:
    """One run: the session's reads into LiveFlight (with the ring) or into the timeline and analysis alone."""
    from benchmarks.gen_recording import T0_NS, Run, Spec, kernel_formats
    from npu_trace.detectors.analysis import Analysis
    from npu_trace.device.profiles import PROFILES
    from npu_trace.events import LossLedger
    from npu_trace.ftrace.decode import build_decoders
    from npu_trace.ftrace.format import parse_header_page
    from npu_trace.pipeline.blocktimeline import block_timeline
    from npu_trace.sinks.flight.flight_recorder import FlightRecorder, FlightSettings
    from npu_trace.sinks.flight.live_flight import LiveFlight

    profile = PROFILES["sim"]
    formats, texts, header_page = kernel_formats()
    page_header = parse_header_page(header_page)
    fmts, ledger, cpus = list(formats.values()), LossLedger(), (0, 1)
    session = SimpleNamespace(
        formats=fmts, header=page_header, selected=[f.full_name for f in fmts], clock="mono", cpus=cpus,
        format_texts=texts, header_page_text=header_page, ledger=ledger, update_loss=lambda: None,
        fs=SimpleNamespace(saved_cmdlines=dict), scope_header=lambda: None,
    )  # fmt: skip
    decoders = build_decoders(fmts, "little", profile.layouts)
    blocks = block_timeline(page_header, decoders, profile.layouts, "little", ledger=ledger, cpus=cpus)
    analysis = Analysis(profile)
    flight: Optional[FlightRecorder] = None
    if args.ring:
        settings = FlightSettings(args.flight, tempfile.mkdtemp(prefix="npu-flight-bench."), args.flight_bytes)
        flight = FlightRecorder(session, settings, "sim")  # type: ignore[arg-type]
        sink: Any = LiveFlight(flight, blocks, analysis)
    else:

        def sink(batch: Any) -> None:
            blocks.add(batch)
            analysis.feed_block(blocks.take(), blocks.now)
            analysis.findings.clear()

    run = Run(Spec("steady", 1, args.minutes * 60.0, args.rate, 2), formats, page_header)
    every_ns, next_ns, t0 = int(args.every * 1e9), T0_NS, time.monotonic()
    events = 0
    for batch in run.batches():
        sink(batch)
        events += sum(len(p) for _, p in batch.pages)
        stamp = batch.mark.read_ns if batch.mark is not None else next_ns
        if stamp >= next_ns:
            next_ns += every_ns
            row: Dict[str, Any] = {"t_s": (stamp - T0_NS) / 1e9, "rss": rss_bytes(), "wall_s": time.monotonic() - t0}
            if flight is not None:
                held = flight.ring.held()
                row.update(ring=held["bytes"], span_s=((held["newest_ns"] or 0) - (held["oldest_ns"] or 0)) / 1e9,
                           evicted=held["evicted"]["bytes"], early=held["evicted"]["early_segments"])  # fmt: skip
            print(json.dumps(row), flush=True)
    print(json.dumps({"done": True, "events": run.out.events, "page_bytes": events}), flush=True)


def run_child(argv: List[str], ring: bool) -> List[Dict[str, Any]]:
    cmd = [sys.executable, "-m", "benchmarks.flight", "--child", *(["--ring"] if ring else []), *argv]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def growth(rows: List[Dict[str, Any]]) -> int:
    """RSS growth over the run's second half."""
    half = [r for r in rows if r["t_s"] >= rows[-1]["t_s"] / 2]
    return int(half[-1]["rss"] - half[0]["rss"])


def main(argv: Optional[List[str]] = None) -> None:
    from npu_trace.commands.record import parse_size

    p = argparse.ArgumentParser(prog="python -m benchmarks.flight", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=2.0, help="trace time of steady load (default 2; 10: the long run)")
    p.add_argument("--rate", type=float, default=4000.0, help="HAL calls per second (default 4000)")
    p.add_argument("--flight", type=float, default=600.0, help="the ring's seconds (default 600: the bytes rule)")
    p.add_argument("--flight-bytes", type=parse_size, default=16 * MIB, help="the ring's bound (default 16M)")
    p.add_argument("--every", type=float, default=10.0, help="a row every S seconds of trace time (default 10)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ring", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return
    passed = [f"--minutes={args.minutes}", f"--rate={args.rate}", f"--flight={args.flight}",
              f"--flight-bytes={args.flight_bytes}", f"--every={args.every}"]  # fmt: skip
    anchor, flight = run_child(passed, ring=False), run_child(passed, ring=True)
    done, anchor, flight = flight[-1], anchor[:-1], flight[:-1]
    print(f"flight recorder memory: {args.minutes:g} min of steady load ({done['events']:,} events, "
          f"{done['page_bytes'] / MIB:.0f} MiB of pages), ring bounds {args.flight:g} s / "
          f"{args.flight_bytes / MIB:.0f} MiB")  # fmt: skip
    print(f"{'trace s':>8} {'ring MiB':>9} {'span s':>7} {'let go MiB':>10} {'RSS MiB':>8} {'anchor RSS':>10} "
          f"{'above anchor':>12}")  # fmt: skip
    for a, f in zip(anchor, flight):
        print(f"{f['t_s']:8.0f} {f['ring'] / MIB:9.1f} {f['span_s']:7.1f} {f['evicted'] / MIB:10.1f} "
              f"{f['rss'] / MIB:8.1f} {a['rss'] / MIB:10.1f} {(f['rss'] - a['rss']) / MIB:12.1f}")  # fmt: skip
    above = flight[-1]["rss"] - anchor[-1]["rss"]
    print(f"RSS growth over the second half: flight {growth(flight) / MIB:+.1f} MiB, anchor (no ring) "
          f"{growth(anchor) / MIB:+.1f} MiB; at the end the flight process holds {above / MIB:.1f} MiB above "
          f"the anchor = {above / args.flight_bytes:.2f} x the bound ({flight[-1]['wall_s']:.0f} s wall)")  # fmt: skip


if __name__ == "__main__":
    main()
