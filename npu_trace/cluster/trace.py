"""`cluster -o FILE.pftrace|.json`: one trace of every host, each host's tracks as `export` draws them, under a
top-level group of its own (a process in Chrome JSON), on one time axis, with flows from each incident's origin
to each consequence.

Built on export's public entry points: every recording goes through `npu_trace.export.run.Exporter` (check's
reading and analysis, drawn by the timeline mapper) into one shared writer (`PerfettoWriter` or
`ChromeJsonWriter`) through a `HostWriter`, which puts the host's tracks under its group (track and flow ids
made the host's own: two hosts' NPU 0 are two tracks) and moves its times from its trace clock to the cluster's
axis: its wall clock by its clock anchor, the axis the incidents are judged on. The file's clock is that axis
(a CLOCK_MONOTONIC snapshot equal to CLOCK_REALTIME: the UI shows wall time). A host's recordings (several
dumps) are drawn one after another under its one group.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npu_trace import __version__
from npu_trace.cluster.read import RecordingView, host_groups
from npu_trace.errors import InputError
from npu_trace.export.beside import written_beside
from npu_trace.export.chrome_json import ChromeJsonWriter
from npu_trace.export.run import Exporter, Request
from npu_trace.export.tracks import GROUP, SLICES, TraceWriter, Track, Value, flow_id, tally, track_uuid

MARK_NS = 1_000  # a consequence's mark on its host's incident track


class HostWriter:
    """A TraceWriter drawing one recording of one host into the shared writer (see the module docstring)."""

    def __init__(self, out: TraceWriter, group: Track, shift_ns: int) -> None:
        self.out, self.group, self.shift = out, group, shift_ns
        self.mapped: Dict[int, Track] = {}

    def header(self, info: Mapping[str, Any]) -> None:
        """The shared file's header is written once, by `write_trace`."""

    def track(self, track: Track) -> None:
        uuid = track_uuid("cluster", self.group.name, track.uuid)
        parent = self.mapped[track.parent].uuid if track.parent else self.group.uuid
        mine = track._replace(uuid=uuid, parent=parent, top=self.group.uuid)
        self.mapped[track.uuid] = mine
        self.out.track(mine)

    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        self.out.begin(self.mapped[track.uuid], ts + self.shift, name, args, self._flows(flow_out),
                       self._flows(flow_in))  # fmt: skip

    def end(self, track: Track, ts: int) -> None:
        self.out.end(self.mapped[track.uuid], ts + self.shift)

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        self.out.instant(self.mapped[track.uuid], ts + self.shift, name, args, self._flows(flow_out))

    def counter(self, track: Track, ts: int, value: Value) -> None:
        self.out.counter(self.mapped[track.uuid], ts + self.shift, value)

    def close(self) -> Dict[str, int]:
        return tally()  # the shared writer is closed once, by write_trace

    def _flows(self, ids: Sequence[int]) -> List[int]:
        return [flow_id("cluster", self.group.name, f) for f in ids]


def _groups(views: Sequence[RecordingView]) -> List[Tuple[Track, List[RecordingView]]]:
    """Each host's group (ordered by host name) and its recordings."""
    hosts = sorted(host_groups(views).items(), key=lambda kv: (kv[1][0].host.name, kv[0]))
    return [(Track(track_uuid("cluster-host", key), group[0].host.name, GROUP, 0, rank), group)
            for rank, (key, group) in enumerate(hosts)]  # fmt: skip


def _draw_host(out: TraceWriter, group: Track, views: Sequence[RecordingView], profile: Optional[str]) -> int:
    """Every recording of one host under its group; how many could be drawn (one without events is left out)."""
    drawn = 0
    for v in views:
        shift = (v.host.realtime_ns - v.host.mono_ns) if v.host.mono_ns is not None and v.host.realtime_ns else 0
        request = Request(v.path, "", "perfetto", profile=profile, progress=False)
        try:
            Exporter(request, HostWriter(out, group, int(shift))).run()
            drawn += 1
        except InputError:  # nothing to draw in it (no event): its host's group stays
            continue
    return drawn


def _incident_tracks(out: TraceWriter, groups: Sequence[Tuple[Track, Any]]) -> Dict[str, Track]:
    tracks = {}
    for group, _ in groups:
        t = Track(track_uuid("cluster-incidents", group.name), "cluster incidents", SLICES, group.uuid, -1, "",
                  group.uuid)  # fmt: skip
        out.track(t)
        tracks[group.name] = t
    return tracks


def _draw_incidents(out: TraceWriter, tracks: Dict[str, Track], findings: Sequence[Mapping[str, Any]]) -> int:
    """Per incident: the origin's span (first evidence to strongest) with a flow to each consequence's mark."""
    flows = 0
    for k, f in enumerate(findings, 1):
        d = f["details"]
        ids = [flow_id("cluster-incident", k, c["host"], c["device"]) for c in d["consequences"]]
        start = d["origin"]["first_evidence"] if d["origin"] else d["earliest"]
        end = d["origin"]["strongest"]["at_ns"] if d["origin"] else start["at_ns"]
        name = f"incident {k}: origin {start['host']} dev{start['device']}" if d["origin"] else \
            f"incident {k}: origin not among the inputs (earliest {start['host']} dev{start['device']})"  # fmt: skip
        out.begin(tracks[start["host"]], start["at_ns"], name, {"what": start["what"]}, flow_out=ids)
        out.end(tracks[start["host"]], max(end, start["at_ns"] + MARK_NS))
        for fid, c in zip(ids, d["consequences"]):
            at = c["first"]["at_ns"]
            out.begin(tracks[c["host"]], at, f"incident {k}: consequence dev{c['device']}",
                      {"what": c["first"]["what"], "after_origin_ns": c["after_origin_ns"],
                       "uncertainty_ns": c["uncertainty_ns"]}, flow_in=[fid])  # fmt: skip
            out.end(tracks[c["host"]], at + MARK_NS)
            flows += 1
    return flows


def _writer(stream: Any, fmt: str) -> TraceWriter:
    if fmt == "perfetto":
        from npu_trace.export.perfetto import PerfettoWriter

        return PerfettoWriter(stream)
    return ChromeJsonWriter(stream)


def write_trace(views: Sequence[RecordingView], report: Mapping[str, Any], path: str, fmt: str,
                profile: Optional[str] = None) -> Dict[str, Any]:  # fmt: skip
    """Write the cluster's trace to `path` (beside it first, moved there once whole); what was drawn. A write
    that fails (a full disk) is one line naming the trace (an error of a file opened by name is that file's)."""
    try:
        with written_beside(path, fmt == "perfetto") as stream:
            return _write_all(_writer(stream, fmt), views, report, profile)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_all(out: TraceWriter, views: Sequence[RecordingView], report: Mapping[str, Any],
               profile: Optional[str]) -> Dict[str, Any]:  # fmt: skip
    zero = min((i["at_ns"] for i in report["timeline"]), default=0)
    out.header({"clock": "mono", "mono_ns": zero, "realtime_ns": zero, "hosts": [h["host"] for h in report["hosts"]],
                "exported_by": f"npu-trace {__version__} (cluster)"})  # fmt: skip
    groups = _groups(views)
    drawn = 0
    for group, host_views in groups:
        out.track(group)
        drawn += _draw_host(out, group, host_views, profile)
    flows = _draw_incidents(out, _incident_tracks(out, groups), report["findings"])
    written = out.close()
    return {"hosts": len(groups), "recordings_drawn": drawn, "incident_flows": flows, "written": written}
