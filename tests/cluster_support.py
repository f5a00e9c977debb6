"""A simulated cluster's recordings made without a kernel: each host of a `ClusterPlan` written as its recorder
would write it (`npu-trace sim cluster` does it live).

Per host: its plan replayed on the executor's ideal timing (npu_trace.sim.timing), the probe events encoded as
the ring buffer lays them out with the captured kernel's formats, read every 5 ms as the live source reads
(benchmarks.gen_recording's reader and recorder); its application log (the job's reports and those of its own
driver errors, npu_trace.sim.side_channels.app_schedule) written as text with the host's true wall clock, read back
by the application-log parser and stamped on the trace clock as the live channel stamps it; the header with the
host's simulated identity, its clock anchor off by the host's offset, its declared uncertainty.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

from benchmarks.gen_recording import PID, REALTIME_NS, T0_NS, Keeper, Reader, Spec, header, kernel_formats
from npu_trace.device.applog import AppLogParser, app_event
from npu_trace.events import NpuEvent
from npu_trace.ftrace.encode import PageEncoder
from npu_trace.ftrace.format import parse_header_page
from npu_trace.pipeline.batch import Batch, Mark
from npu_trace.recording.writer import RecordingWriter
from npu_trace.sim.cluster_plan import ClusterHost, ClusterPlan
from npu_trace.sim.side_channels import app_schedule, wall_text
from npu_trace.sim.synth import probe_rows
from npu_trace.sim.threads import Host
from npu_trace.sim.timing import HostTiming

READ_NS = 5_000_000


def app_events(h: ClusterHost, t0_ns: int = T0_NS, real_ns: int = REALTIME_NS) -> List[NpuEvent]:
    """The host's application log as the app_log channel makes it: each report's text, stamped with the true wall
    clock when written, parsed, and put on the trace clock."""
    parser = AppLogParser()
    out: List[NpuEvent] = []
    for offset, dev, what, template in sorted([*app_schedule(h.actions), *h.reports]):
        wall = real_ns + offset
        text = template.format(pid=PID, t=wall_text(wall), t_s=wall_text(wall)[:19], dev=dev,
                               size=what.partition(":")[2] or 0)  # fmt: skip
        for line in text.splitlines():
            out += [_stamped(e, t0_ns, real_ns) for e in parser.feed(line)]
    return out + [_stamped(e, t0_ns, real_ns) for e in parser.flush()]


def _stamped(err, t0_ns: int, real_ns: int) -> NpuEvent:  # type: ignore[no-untyped-def]
    return app_event(err, err.wall_ns - real_ns + t0_ns, file="app.log", anchor="live", clock_error_ns=1)


def write_host(path: str, plan: ClusterPlan, h: ClusterHost, host: Host) -> None:
    formats, texts, header_page = kernel_formats()
    page_header = parse_header_page(header_page)
    spec = Spec("cluster", plan.seed, plan.duration_s, plan.rate, plan.devices, (0, 1), host)
    head = header(spec, texts, header_page, page_header.page_size)
    head.update(h.identity.header())
    head["clock_anchor"] = h.identity.anchor(head["clock_anchor"])
    head["extra"]["channels"] = {"asked": ["app_log"], "running": ["app_log"]}
    reader = Reader(spec, PageEncoder(page_header, "little"), formats)
    timing = HostTiming(host, spec.cpus, T0_NS, PID)
    for a in h.actions:
        reader.add(probe_rows(a, timing.run(a)))
    events = sorted(app_events(h), key=lambda e: e.ts_ns)
    with RecordingWriter(path, head) as w:
        keep = Keeper(w)
        for batch in _batches(reader, events, T0_NS + int(plan.duration_s * 1e9) + 3 * READ_NS):
            if batch.events:  # a read's channel events go before its pages, as the recorder writes them
                w.add_events(batch.events)
            keep(batch)


def _batches(reader: Reader, events: List[NpuEvent], end_ns: int):  # type: ignore[no-untyped-def]
    at, k = T0_NS + READ_NS, 0
    while at <= end_ns or reader.waiting() or k < len(events):
        pages = reader.read(at)
        due = []
        while k < len(events) and events[k].ts_ns < at:
            due.append(events[k])
            k += 1
        yield Batch(pages.pages, due, Mark(at, pages.mark.caught_up, at))
        at += READ_NS


def write_cluster(out_dir: str, plan: ClusterPlan, host: Host, skip: Tuple[int, ...] = ()) -> Dict[str, str]:
    """Every host's recording under out_dir/HOST/trace.npt (but the hosts in `skip`); host name -> path."""
    paths = {}
    for h in plan.hosts:
        if h.index in skip:
            continue
        os.makedirs(os.path.join(out_dir, h.name), exist_ok=True)
        paths[h.name] = os.path.join(out_dir, h.name, "trace.npt")
        write_host(paths[h.name], plan, h, host)
    return paths
