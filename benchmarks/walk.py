"""Micro-benchmark of the page walker: ns per record, figures only (never pass/fail).

Two sets of pages, each tiled until there are --records records: the shipped demo recording's busiest CPU as
recorded (the simulator's events as this kernel wrote them; sparse pages, a few records each, as a quiet
host's reads make them), and the same events packed densely by PageEncoder (full pages, as under load).
Rows, each over the same pages:
  PageDecoder.decode   the tests' reference (tests/reference/pages.py): one TraceEvent per record
  walk (C) + gather    the compiled walk, then each event type's fixed part gathered into one buffer (what a
                       numpy structured view reads), records grouped by type with one stable argsort
  walk (C)             the walk alone
  walk (Python)        the pure-Python fallback (on at most --python-records records)

python -m benchmarks.walk [--records N] [--batch PAGES] [--python-records N]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from npu_trace.events import LossLedger, TraceEvent
from npu_trace.ftrace import walk as W
from npu_trace.ftrace.decode import RecordDecoder
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import TAIL, PageHeader
from npu_trace.recording.reader import RecordingReader, open_decoder
from tests.reference.pages import PageDecoder  # the per-record reference the walk is measured against

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "npu_trace", "data", "demo.npt")


def demo_pages(path: str) -> Tuple[PageHeader, Dict[int, RecordDecoder], List[bytes]]:
    """The recording's format table and the pages of its busiest CPU."""
    reader = RecordingReader(path)
    header, decoders = open_decoder(reader)
    by_cpu: Dict[int, List[bytes]] = {}
    for cpu, page in reader.pages():
        by_cpu.setdefault(cpu, []).append(page)
    return header, decoders, max(by_cpu.values(), key=len)


def dense(header: PageHeader, decoders: Mapping[int, RecordDecoder], pages: List[bytes]) -> List[bytes]:
    """The pages' events packed into full pages (events of formats the encoder cannot write are left out)."""
    out: List[Any] = []
    dec = PageDecoder(header, decoders, 0, ledger=LossLedger())
    for page in pages:
        dec.decode(page, out)
    rows = [(e.ts_ns, e.pid, e.fmt, e.values) for e in out
            if isinstance(e, TraceEvent) and all(f.kind != TAIL for f in e.fmt.fields)]  # fmt: skip
    return PageEncoder(header).pages(rows)


def events_in(header: PageHeader, decoders: Mapping[int, RecordDecoder], pages: List[bytes]) -> int:
    out: List[Any] = []
    dec = PageDecoder(header, decoders, 0, ledger=LossLedger())
    for page in pages:
        dec.decode(page, out)
    return len(out)


def tiled(pages: List[bytes], per_copy: int, records: int) -> List[bytes]:
    return pages * max(1, -(-records // max(per_copy, 1)))


def time_decoder(header: PageHeader, decoders: Mapping[int, RecordDecoder], pages: List[bytes]) -> Tuple[float, int]:
    dec = PageDecoder(header, decoders, 0, ledger=LossLedger())
    out: List[Any] = []
    start = time.perf_counter()
    for page in pages:
        dec.decode(page, out)
        if len(out) > 1 << 16:  # a consumer takes them away, as the timeline does
            out.clear()
    return time.perf_counter() - start, dec.pages


def gather_by_type(buf: bytes, walk: W.Walk, wanted: Mapping[int, W.Want]) -> int:
    """Each event type's fixed part, gathered: the bytes a structured view of every type would read."""
    order = np.argsort(walk.etype, kind="stable")
    types = walk.etype[order]
    cuts = np.flatnonzero(np.diff(types)) + 1
    total = 0
    for group in np.split(order, cuts):
        if len(group):
            total += len(W.gather(buf, walk.offset[group], wanted[int(walk.etype[group[0]])].size))
    return total


def time_walk(fn: Callable[..., W.Walk], header: PageHeader, wanted: Mapping[int, W.Want], pages: List[bytes],
              batch: int, gather: bool) -> Tuple[float, int]:  # fmt: skip
    size = header.page_size
    chunks = [pages[i : i + batch] for i in range(0, len(pages), batch)]
    bufs = [(b"".join(chunk), [(k * size, len(p)) for k, p in enumerate(chunk)]) for chunk in chunks]
    state, records = W.WalkState(), 0
    start = time.perf_counter()
    for buf, index in bufs:
        walk = fn(buf, index, header, 0, state, wanted)
        records += len(walk.ts)
        if gather:
            gather_by_type(buf, walk, wanted)
    return time.perf_counter() - start, records


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--batch", type=int, default=256, help="pages per walk call (256: 1 MiB)")
    ap.add_argument("--python-records", type=int, default=300_000)
    args = ap.parse_args(argv)
    header, decoders, recorded = demo_pages(DEMO)
    print(f"walker: {W.IMPLEMENTATION}")
    for pages in (recorded, dense(header, decoders, recorded)):
        bench(header, decoders, pages, args)


def bench(header: PageHeader, decoders: Mapping[int, RecordDecoder], pages: List[bytes], args: Any) -> None:
    per_copy = events_in(header, decoders, pages)
    many = tiled(pages, per_copy, args.records)
    few = tiled(pages, per_copy, min(args.records, args.python_records))
    n_many, n_few = per_copy * (len(many) // len(pages)), per_copy * (len(few) // len(pages))
    wanted = W.wants(decoders)
    print(f"\n{n_many:,} records in {len(many):,} pages of {header.page_size} bytes ({n_many / len(many):.1f} a page)")
    rows = [
        ("PageDecoder.decode", lambda: time_decoder(header, decoders, many), n_many),
        ("walk (C) + gather", lambda: time_walk(W.walk, header, wanted, many, args.batch, True), n_many),
        ("walk (C)", lambda: time_walk(W.walk, header, wanted, many, args.batch, False), n_many),
        ("walk (Python)", lambda: time_walk(W.walk_py, header, wanted, few, args.batch, False), n_few),
    ]
    for name, run, n in rows:
        seconds, _ = run()
        print(f"{name:<20} {seconds * 1e9 / n:8.1f} ns/record  ({n / seconds / 1e6:6.2f} M records/s)")


if __name__ == "__main__":
    main()
