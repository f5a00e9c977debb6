"""The agent's figures: what the live analysis found, as Prometheus metric families.

Two halves, so that a scrape never touches the analysis while the tracing thread changes it:
- `MetricsState` lives on the tracing thread. It counts the findings the analysis hands over (by kind and
  device, timeouts by operation, allocation failures by whether free memory would have fit them) and, when
  asked (`publish`), reads the analysis's views (latency histograms, device states, memory, health readings,
  event and loss counts) into one immutable `Snapshot`, swapped in as a whole.
- `SnapshotCollector` is a prometheus-client collector: each scrape (or textfile write) renders the latest
  snapshot. Rendering is pure: the same snapshot gives the same exposition.

Names and labels (fixed: dashboards and alert rules rely on them; docs/fleet.md lists them all):
`npu_trace_findings_total{kind, id}`, `npu_trace_op_latency_seconds{id, op}` (a histogram per device and
operation: the HAL function of a driver call, `task` for submit to completion), `npu_trace_events_total{kind}`,
`npu_trace_lost_events_total{source}`, `npu_trace_device_state{id, state}`, the health gauges with npu-exporter's
labels (`id`, `model_name`, `pcie_bus_info` where npu-smi printed them) and `npu_trace_device_info` to join on.
`id` is the device id the driver uses (npu-exporter's `id` on a bare-metal host), "" for a finding of no device.

Latency buckets come from the detector's log-linear histogram (npu_trace.detectors.histogram, buckets 1/128 of
a power of two wide): a bucket of it is counted under the first bound at or above its lowest value, so a
sample exactly on a bound is counted under it, and only one above it by less than 0.8% (a histogram bucket)
can be counted with it too; count and sum are exact.

No label carries free text from the host (kernel log lines, command lines, process names): label values are
the detectors' own names, device ids, and npu-smi's chip name, Bus-Id and health word, each checked against
a plain pattern (anything else becomes "other").
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.base import FINDING_KINDS, Finding
from npu_trace.detectors.histogram import Histogram, bucket_bounds
from npu_trace.detectors.states import STATES

NS = 1_000_000_000
MB = 1 << 20
# seconds: 1 us to 10 s in 1-2.5-5 steps (the le values a dashboard sees)
LATENCY_BUCKETS_S: Tuple[float, ...] = (
    1e-06, 2.5e-06, 5e-06, 1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
LATENCY_BUCKETS_NS: Tuple[int, ...] = tuple(round(b * NS) for b in LATENCY_BUCKETS_S)
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}$")
OTHER = "other"


def label(value: Any) -> str:
    """A label value from the host's data: kept when it is a plain short token, else "other"; None: ""."""
    if value is None:
        return ""
    text = str(value).strip()
    return text if _LABEL_RE.match(text) else OTHER


def device_id(dev: Optional[int]) -> str:
    return "" if dev is None else str(int(dev))


# ---- the snapshot: plain values, built on the tracing thread ---------------------------------------------------
@dataclass(frozen=True)
class LatencySeries:
    id: str
    op: str
    buckets: Tuple[int, ...]  # cumulative counts at LATENCY_BUCKETS_S, then +Inf (= count)
    sum_s: float


@dataclass(frozen=True)
class DeviceRow:
    """One device's labels and gauges (None: not known)."""

    id: str
    model_name: str = ""
    pcie_bus_info: str = ""
    state: str = "ok"
    entered: Tuple[Tuple[str, int], ...] = ()
    temp_c: Optional[int] = None
    ce_count: Optional[int] = None
    uce_count: Optional[int] = None
    link_speed_gts: Optional[float] = None
    link_max_speed_gts: Optional[float] = None
    link_width: Optional[int] = None
    link_max_width: Optional[int] = None
    link_degraded: Optional[bool] = None
    health: str = ""
    memory_used_bytes: Optional[int] = None
    memory_size_bytes: Optional[int] = None
    memory_kind: str = ""
    power_w: Optional[float] = None
    aicore_ratio: Optional[float] = None
    live_bytes: Optional[int] = None
    peak_bytes: Optional[int] = None

    @property
    def labels(self) -> Tuple[str, str, str]:
        return (self.id, self.model_name, self.pcie_bus_info)


@dataclass(frozen=True)
class Snapshot:
    findings: Tuple[Tuple[str, str, int], ...] = ()  # (kind, id, count)
    timeouts: Tuple[Tuple[str, str, int], ...] = ()  # (id, op, count)
    alloc_failures: Tuple[Tuple[str, str, int], ...] = ()  # (id, fragmentation: true/false/unknown, count)
    latency: Tuple[LatencySeries, ...] = ()
    events: Tuple[Tuple[str, int], ...] = ()  # (kind, count)
    lost: Tuple[Tuple[str, int], ...] = ()  # (source, count)
    devices: Tuple[DeviceRow, ...] = ()
    rules: Tuple[Tuple[str, bool], ...] = ()  # (rule, violated)
    agent: Mapping[str, float] = field(default_factory=dict)  # the agent's own figures (AGENT_FIGURES)
    info: Tuple[Tuple[str, str], ...] = ()  # npu_trace_agent_info labels


class LatencyCache:
    """Cumulative Prometheus buckets of each (device, op) histogram, recomputed only when its count moved."""

    def __init__(self) -> None:
        self._done: Dict[Tuple[Optional[int], str], Tuple[int, Tuple[int, ...]]] = {}

    def buckets(self, key: Tuple[Optional[int], str], hist: Histogram) -> Tuple[int, ...]:
        got = self._done.get(key)
        if got is not None and got[0] == hist.count:
            return got[1]
        out = cumulative_buckets(hist)
        self._done[key] = (hist.count, out)
        return out


def cumulative_buckets(hist: Histogram) -> Tuple[int, ...]:
    """The histogram's samples at LATENCY_BUCKETS_NS (cumulative), then +Inf: each of its buckets counted under
    the first bound at or above its lowest value."""
    per = [0] * (len(LATENCY_BUCKETS_NS) + 1)
    for idx, n in hist.buckets.items():
        per[bisect_left(LATENCY_BUCKETS_NS, bucket_bounds(idx)[0])] += n
    out, seen = [], 0
    for n in per:
        seen += n
        out.append(seen)
    return tuple(out)


class MetricsState:
    """The tracing thread's side: findings counted as they come, snapshots made from the analysis's views."""

    def __init__(self) -> None:
        self.findings: Counter[Tuple[str, str]] = Counter()
        self.timeouts: Counter[Tuple[str, str]] = Counter()
        self.alloc_failures: Counter[Tuple[str, str]] = Counter()
        self.by_op: Counter[Tuple[str, str]] = Counter()  # (kind, op): the rules' max_by_op
        self.latency = LatencyCache()
        self.latest = Snapshot()

    def count(self, findings: Iterable[Finding]) -> None:
        for f in findings:
            dev = device_id(f.device)
            self.findings[(f.kind, dev)] += 1
            self.by_op[(f.kind, str(f.op or ""))] += 1
            if f.kind == "timeout":
                self.timeouts[(dev, label(f.op))] += 1
            elif f.kind == "alloc_fail":
                frag = f.details.get("fragmentation")
                self.alloc_failures[(dev, "unknown" if frag is None else str(bool(frag)).lower())] += 1

    def publish(self, analysis: Analysis, lost: Mapping[str, int], rules: Sequence[Tuple[str, bool]] = (),
                agent: Optional[Mapping[str, float]] = None,
                info: Sequence[Tuple[str, str]] = ()) -> Snapshot:  # fmt: skip
        """A new snapshot of everything (swapped in as `latest`); `lost`: events lost per source."""
        snap = Snapshot(
            findings=tuple(sorted((k, d, n) for (k, d), n in self.findings.items())),
            timeouts=tuple(sorted((d, op, n) for (d, op), n in self.timeouts.items())),
            alloc_failures=tuple(sorted((d, frag, n) for (d, frag), n in self.alloc_failures.items())),
            latency=self._latency(analysis),
            events=tuple(sorted(analysis.kind_counts.items())),
            lost=tuple(sorted(lost.items())),
            devices=device_rows(analysis),
            rules=tuple(rules),
            agent=dict(agent or {}),
            info=tuple(info),
        )
        self.latest = snap
        return snap

    def _latency(self, analysis: Analysis) -> Tuple[LatencySeries, ...]:
        out = []
        for (dev, op), hist in analysis.latency.histograms().items():
            if hist.count:
                buckets = self.latency.buckets((dev, op), hist)
                out.append(LatencySeries(device_id(dev), label(op), buckets, hist.total / NS))
        return tuple(sorted(out, key=lambda s: (s.id, s.op)))


def device_rows(analysis: Analysis) -> Tuple[DeviceRow, ...]:
    """Every device any view knows: its state, health readings and traced memory."""
    states = analysis.states.states()
    readings = analysis.detectors["health"].readings()  # type: ignore[attr-defined]
    memory = {dev: (live, peak) for dev, live, peak in analysis.memory.devices() if dev >= 0}
    out = []
    for dev in sorted(set(states) | set(readings) | set(memory)):
        st, reading = states.get(dev), readings.get(dev, {})
        live, peak = memory.get(dev, (None, None))
        out.append(_row(dev, st.state if st else "ok", dict(st.entered) if st else {}, reading, live, peak))
    return tuple(out)


def _row(dev: int, state: str, entered: Dict[str, int], r: Mapping[str, Any], live: Optional[int],
         peak: Optional[int]) -> DeviceRow:  # fmt: skip
    link = r.get("link") or {}
    bus = r.get("bus_id") or link.get("bdf")
    return DeviceRow(
        id=str(dev), model_name=label(r.get("name")), pcie_bus_info=label(bus), state=state,
        entered=tuple(sorted(entered.items())), temp_c=_num(r.get("temp_c")), ce_count=_num(r.get("ce_count")),
        uce_count=_num(r.get("uce_count")), link_speed_gts=_gts(link.get("speed")),
        link_max_speed_gts=_gts(link.get("max_speed")), link_width=_num(link.get("width")),
        link_max_width=_num(link.get("max_width")), link_degraded=bool(r.get("link_degraded")) if link else None,
        health=label(r.get("health")), memory_used_bytes=_mb(r.get("used_mb")),
        memory_size_bytes=_mb(r.get("total_mb")), memory_kind=label(r.get("memory")),
        power_w=_num(r.get("power_w")), aicore_ratio=_ratio(r.get("aicore_pct")), live_bytes=live, peak_bytes=peak,
    )  # fmt: skip


def _num(value: Any) -> Any:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mb(value: Any) -> Optional[int]:
    v = _num(value)
    return None if v is None else int(v * MB)


def _ratio(pct: Any) -> Optional[float]:
    v = _num(pct)
    return None if v is None else v / 100.0


def _gts(speed: Any) -> Optional[float]:
    """sysfs's "16.0 GT/s PCIe" -> 16.0."""
    if speed is None:
        return None
    try:
        return float(str(speed).split()[0])
    except (ValueError, IndexError):
        return None


# ---- rendering: the snapshot as metric families (on the scraping thread) ----------------------------------------
DEVICE_LABELS = ("id", "model_name", "pcie_bus_info")
AGENT_FIGURES: Dict[str, Tuple[str, str]] = {  # key -> (metric, help); counters end in _total
    "start_time_seconds": ("npu_trace_agent_start_time_seconds", "When the agent started (Unix time)"),
    "analysed_until_seconds": ("npu_trace_agent_analysed_until_seconds",
                               "The trace time the analysis has reached (CLOCK_MONOTONIC seconds)"),
    "analysis_lag_seconds": ("npu_trace_agent_analysis_lag_seconds",
                             "How far the analysis clock is behind the host's monotonic clock"),
    "rules_reloads_total": ("npu_trace_agent_rules_reloads_total", "Times the rules file was read again (SIGHUP)"),
    "rules_reload_errors_total": ("npu_trace_agent_rules_reload_errors_total",
                                  "SIGHUP re-reads of the rules file that failed (the previous rules stay)"),
    "textfile_writes_total": ("npu_trace_agent_textfile_writes_total", "Textfile collector files written"),
    "textfile_errors_total": ("npu_trace_agent_textfile_errors_total", "Textfile collector writes that failed"),
    "spool_dumps_total": ("npu_trace_agent_spool_dumps_total", "Flight-recorder dumps written to the spool"),
    "spool_errors_total": ("npu_trace_agent_spool_errors_total", "Flight-recorder dumps that could not be written"),
    "spool_removed_total": ("npu_trace_agent_spool_removed_total", "Dumps removed by the spool's retention bound"),
    "shipped_total": ("npu_trace_agent_shipped_total", "Flight-recorder dumps shipped to the object store (--ship)"),
    "ship_errors_total": ("npu_trace_agent_ship_errors_total",
                          "Uploads to the object store that failed (each dump is retried until it is shipped)"),
    "ship_pending": ("npu_trace_agent_ship_pending", "Dumps in the spool not shipped yet"),
}  # fmt: skip


class SnapshotCollector(Collector):
    """A prometheus-client collector over the latest snapshot of a MetricsState (read once per collect)."""

    def __init__(self, state: MetricsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        return iter(families(self.state.latest))


def families(s: Snapshot) -> List[Metric]:
    return [*_findings(s), _latency(s), *_counts(s), *_states(s), *_health(s), *_memory(s), *_rules(s), *_agent(s)]


def _findings(s: Snapshot) -> List[Metric]:
    f = CounterMetricFamily("npu_trace_findings", "Findings of the detectors, by kind and device",
                            labels=("kind", "id"))  # fmt: skip
    seen = {k for k, _, _ in s.findings}
    for kind in FINDING_KINDS:  # every kind present from the start: increase() sees the first one
        if kind not in seen:
            f.add_metric((kind, ""), 0)
    for kind, dev, n in s.findings:
        f.add_metric((kind, dev), n)
    t = CounterMetricFamily("npu_trace_timeouts", "Timeout findings by device and kind of wait (heartbeat, ...)",
                            labels=("id", "op"))  # fmt: skip
    for dev, op, n in s.timeouts:
        t.add_metric((dev, op), n)
    a = CounterMetricFamily("npu_trace_alloc_failures", "Allocation failures by device, and whether the free memory "
                            "would have held the request (fragmentation)", labels=("id", "fragmentation"))  # fmt: skip
    for dev, frag, n in s.alloc_failures:
        a.add_metric((dev, frag), n)
    return [f, t, a]


def _latency(s: Snapshot) -> Metric:
    h = HistogramMetricFamily("npu_trace_op_latency_seconds", "Latency of driver calls (op: the HAL function) and "
                              "of tasks from submit to completion (op: task)", labels=("id", "op"))  # fmt: skip
    bounds = [*(repr(b) for b in LATENCY_BUCKETS_S), "+Inf"]
    for series in s.latency:
        h.add_metric((series.id, series.op), list(zip(bounds, series.buckets)), series.sum_s)
    return h


def _counts(s: Snapshot) -> List[Metric]:
    e = CounterMetricFamily("npu_trace_events", "Events analysed, by kind", labels=("kind",))
    for kind, n in s.events:
        e.add_metric((kind,), n)
    lost = CounterMetricFamily("npu_trace_lost_events", "Events lost before analysis, by source (tracefs ring "
                               "buffer, kmsg, uevent, bpf, the ordered merge)", labels=("source",))  # fmt: skip
    for source, n in s.lost:
        lost.add_metric((source,), n)
    if not s.lost:
        lost.add_metric(("tracefs",), 0)
    return [e, lost]


def _states(s: Snapshot) -> List[Metric]:
    g = GaugeMetricFamily("npu_trace_device_state", "1 for the current state of each device (ok, degraded, "
                          "resetting, offline)", labels=("id", "state"))  # fmt: skip
    c = CounterMetricFamily("npu_trace_device_state_entered", "Times each device entered each state",
                            labels=("id", "state"))  # fmt: skip
    info = GaugeMetricFamily("npu_trace_device_info", "A device's names, to join on (npu-exporter's labels)",
                             labels=DEVICE_LABELS)  # fmt: skip
    for d in s.devices:
        entered = dict(d.entered)
        for state in STATES:
            g.add_metric((d.id, state), 1 if d.state == state else 0)
            c.add_metric((d.id, state), entered.get(state, 0))
        info.add_metric(d.labels, 1)
    return [g, c, info]


_HEALTH_GAUGES: Tuple[Tuple[str, str, str], ...] = (
    ("temp_c", "npu_trace_device_temperature_celsius", "Chip temperature (npu-smi, the driver's DMS reports)"),
    ("ce_count", "npu_trace_device_ecc_corrected_errors", "Correctable (single-bit) ECC errors the device counts"),
    ("uce_count", "npu_trace_device_ecc_uncorrected_errors", "Uncorrectable (multi-bit) ECC errors the device counts"),
    ("link_speed_gts", "npu_trace_device_pcie_link_speed_gigatransfers", "PCIe link speed now (GT/s)"),
    ("link_max_speed_gts", "npu_trace_device_pcie_link_max_speed_gigatransfers", "PCIe link speed it can train to"),
    ("link_width", "npu_trace_device_pcie_link_width_lanes", "PCIe link width now (lanes)"),
    ("link_max_width", "npu_trace_device_pcie_link_max_width_lanes", "PCIe link width it can train to (lanes)"),
    ("link_degraded", "npu_trace_device_pcie_link_degraded", "1 while the link runs below its speed or width"),
    ("power_w", "npu_trace_device_power_watts", "Chip power (npu-smi)"),
    ("aicore_ratio", "npu_trace_device_aicore_utilization_ratio", "AI Core use, 0 to 1 (npu-smi)"),
)  # fmt: skip


def _health(s: Snapshot) -> List[Metric]:
    out = []
    for key, name, doc in _HEALTH_GAUGES:
        g = GaugeMetricFamily(name, doc, labels=DEVICE_LABELS)
        for d in s.devices:
            value = getattr(d, key)
            if value is not None:
                g.add_metric(d.labels, float(value))
        out.append(g)
    h = GaugeMetricFamily("npu_trace_device_health", "1 for the health npu-smi reports now (OK, Warning, Alarm, "
                          "Critical, ...)", labels=(*DEVICE_LABELS, "health"))  # fmt: skip
    for d in s.devices:
        if d.health:
            h.add_metric((*d.labels, d.health), 1)
    return [*out, h]


def _memory(s: Snapshot) -> List[Metric]:
    used = GaugeMetricFamily("npu_trace_device_memory_used_bytes", "Device memory in use, as npu-smi prints it "
                             "(memory: hbm or the device's own)", labels=(*DEVICE_LABELS, "memory"))  # fmt: skip
    size = GaugeMetricFamily("npu_trace_device_memory_size_bytes", "Device memory size, as npu-smi prints it",
                             labels=(*DEVICE_LABELS, "memory"))  # fmt: skip
    live = GaugeMetricFamily("npu_trace_device_memory_traced_bytes", "Device memory the traced allocations hold "
                             "now (allocations less frees seen)", labels=("id",))  # fmt: skip
    peak = GaugeMetricFamily("npu_trace_device_memory_traced_peak_bytes", "The most the traced allocations held",
                             labels=("id",))  # fmt: skip
    for d in s.devices:
        kind = d.memory_kind or "hbm"
        if d.memory_used_bytes is not None:
            used.add_metric((*d.labels, kind), d.memory_used_bytes)
        if d.memory_size_bytes is not None:
            size.add_metric((*d.labels, kind), d.memory_size_bytes)
        if d.live_bytes is not None:
            live.add_metric((d.id,), d.live_bytes)
            peak.add_metric((d.id,), d.peak_bytes or 0)
    return [used, size, live, peak]


def _rules(s: Snapshot) -> List[Metric]:
    g = GaugeMetricFamily("npu_trace_rule_violated", "1 while a rule of the --rules file (check's rules) is "
                          "violated by what this agent saw since it started", labels=("rule",))  # fmt: skip
    for rule, violated in s.rules:
        g.add_metric((label(rule),), 1 if violated else 0)
    return [g]


def _agent(s: Snapshot) -> List[Metric]:
    out: List[Metric] = []
    info = GaugeMetricFamily("npu_trace_agent_info", "The agent's version and what it traces",
                             labels=[k for k, _ in s.info])  # fmt: skip
    info.add_metric([v for _, v in s.info], 1)
    out.append(info)
    for key, (name, doc) in AGENT_FIGURES.items():
        if key not in s.agent:
            continue
        if name.endswith("_total"):
            out.append(CounterMetricFamily(name[: -len("_total")], doc, value=s.agent[key]))
        else:
            out.append(GaugeMetricFamily(name, doc, value=s.agent[key]))
    return out
