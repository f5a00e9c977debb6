"""`npu-trace agent`: the fleet service. The live pipeline of `live` (tracefs, the channels, optional --bpf), no
UI, its findings and figures on a Prometheus endpoint (`--metrics-addr`) and/or in node-exporter's textfile
collector (`--textfile`).

Process protocol (what systemd sees; deploy/npu-trace-agent.service):
- start: options checked, the rules read, the endpoint bound, the textfile's directory checked (each failure
  one line and exit 2, before anything touches the kernel); then the tracefs session (a stale instance of a
  killed agent is removed first) and the channels (exit 3 when the kernel lacks what is needed).
- SIGTERM / SIGINT: tracing stops, the last events are analysed, the findings only the end decides counted,
  the textfile written a last time, the instance and probes removed; exit 0.
- SIGHUP: the log file opened again (logrotate) and the --rules file read again (a bad one is said and the
  previous rules stay).
- SIGKILL: nothing runs; the next start removes the instance left behind (as `npu-trace cleanup` does) and
  the textfile's temporary file; the textfile itself always holds a whole, earlier write.
Logs go to stderr, one line each, with journald's "<N>" priority prefixes when stderr is the journal.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, List, Optional, Tuple

from prometheus_client import ProcessCollector

from npu_trace import __version__
from npu_trace.cluster.ship import Shipper
from npu_trace.cluster.store import Location, client, parse_url
from npu_trace.commands.record import add_flight_options, flight_settings
from npu_trace.commands.session_text import announce, channel_summary
from npu_trace.commands.trace_options import add_trace_options, options_from_args
from npu_trace.detectors.analysis import Analysis
from npu_trace.detectors.rules import Rules, load_rules
from npu_trace.detectors.states import Transition
from npu_trace.errors import NpuTraceError, UsageError
from npu_trace.pipeline import Batch, pump
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.process import HupFlag, ServiceLog, pid_alive, prepare_process
from npu_trace.recording.host import read_identity
from npu_trace.sinks.exposition import (
    EndpointCollector,
    MetricsServer,
    TextfileWriter,
    check_textfile_path,
    registry_of,
    stale_temporaries,
)
from npu_trace.sinks.flight.flight_recorder import FlightRecorder, FlightSettings
from npu_trace.sinks.flight.live_flight import analysis_tasks, judge_analysis
from npu_trace.sinks.live_metrics import AgentFigures, Listeners, LiveMetrics
from npu_trace.sinks.metrics import MetricsState, SnapshotCollector
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.options import MAX_INTERVAL_S, TraceOptions

DEFAULT_METRICS_ADDR = "127.0.0.1:9834"
DEFAULT_TEXTFILE_INTERVAL_S = 15.0
DEFAULT_SPOOL_SECONDS = 120.0  # the flight recorder's window when --spool is given without --flight


def add_parser(sub: Any) -> None:
    p = sub.add_parser("agent", help="run as a service: findings and figures for Prometheus (fleet monitoring)",
                       description="Trace this host without a UI for as long as it runs, and publish what the "
                       "detectors find as Prometheus metrics (--metrics-addr) and/or node-exporter textfile "
                       "metrics (--textfile). SIGTERM/SIGINT stop it (exit 0), SIGHUP reopens --log-file and "
                       "re-reads --rules. docs/fleet.md: install, scrape config, alerts.")  # fmt: skip
    add_trace_options(p)
    g = p.add_argument_group("agent")
    g.add_argument("--metrics-addr", default=DEFAULT_METRICS_ADDR, metavar="HOST:PORT",
                   help=f"serve /metrics there (default {DEFAULT_METRICS_ADDR}: this host only); off: no "
                   "endpoint")  # fmt: skip
    g.add_argument("--textfile", metavar="PATH",
                   help="also write the metrics to PATH (a .prom file in node-exporter's textfile directory), "
                   "atomically")  # fmt: skip
    g.add_argument("--textfile-interval", type=float, default=DEFAULT_TEXTFILE_INTERVAL_S, metavar="S",
                   help=f"how often --textfile is written (default {DEFAULT_TEXTFILE_INTERVAL_S:g} s; and at exit)")
    g.add_argument("--rules", metavar="RULES.toml",
                   help="check's rules: npu_trace_rule_violated says which ones what the agent saw breaks "
                   "(re-read on SIGHUP)")  # fmt: skip
    g.add_argument("--spool", metavar="DIR",
                   help="keep the flight recorder's dumps there (created 0700): the last minutes in memory, "
                   "written around each incident, retention by --keep and --keep-bytes")  # fmt: skip
    g.add_argument("--ship", metavar="s3://BUCKET/PREFIX",
                   help="upload each finished dump to PREFIX/HOST/DUMP in an S3-compatible store (boto3's standard "
                   "credential chain and endpoint settings), retried with backoff; the spool holds what is not "
                   "shipped yet, and its retention removes only shipped dumps")  # fmt: skip
    g.add_argument("--log-file", metavar="PATH", help="log there instead of stderr (reopened on SIGHUP)")
    g.add_argument("--log-prefix", choices=("auto", "journald", "plain"), default="auto",
                   help="journald: '<N>' priority prefixes; auto: when stderr is the journal (default)")
    add_flight_options(p)  # --flight SECONDS: the window with --spool (default DEFAULT_SPOOL_SECONDS)
    p.set_defaults(func=run)


class AgentSettings:
    """The agent's own options, checked before anything starts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.metrics_addr: Optional[str] = None if args.metrics_addr == "off" else args.metrics_addr
        self.textfile: Optional[str] = args.textfile
        self.textfile_interval = float(args.textfile_interval)
        self.rules_path: Optional[str] = args.rules
        if not 0 < self.textfile_interval <= MAX_INTERVAL_S:  # NaN too (it waited forever: written only at exit)
            raise UsageError(f"--textfile-interval must be positive, at most {MAX_INTERVAL_S} s (a day)")
        if self.metrics_addr is None and self.textfile is None:
            raise UsageError("--metrics-addr off needs --textfile PATH: the figures must go somewhere")
        if self.textfile is not None:
            check_textfile_path(self.textfile)
        self.flight: Optional[FlightSettings] = None
        self.ship: Optional[Location] = None
        if args.ship is not None:
            if args.spool is None:
                raise UsageError("--ship needs --spool DIR: the dumps it ships, and its buffer while the store is down")
            self.ship = parse_url(args.ship)
        if args.spool is not None:
            args.flight = DEFAULT_SPOOL_SECONDS if args.flight is None else args.flight
            self.flight = flight_settings(args, args.spool)
        elif args.flight is not None:
            raise UsageError("--flight needs --spool DIR: where the agent keeps its dumps")


class Agent:
    """The parts of one run: log, rules, metrics (state, endpoint, textfile), the live sink; `sink` is what
    the pump calls."""

    def __init__(self, settings: AgentSettings, options: TraceOptions, log: ServiceLog) -> None:
        self.settings = settings
        self.options = options
        self.log = log
        self.rules: Rules = load_rules(settings.rules_path)
        self.hup = HupFlag()
        self.state = MetricsState()
        self.figures = AgentFigures({"start_time_seconds": time.time()})
        self.registry = registry_of([SnapshotCollector(self.state), ProcessCollector(registry=None)])
        self.server = MetricsServer(settings.metrics_addr, self.registry) if settings.metrics_addr else None
        if self.server is not None:  # what the endpoint dropped (slow or too many clients), by reason
            self.registry.register(EndpointCollector(self.server))
        self.textfile = TextfileWriter(settings.textfile, self.registry, log.warning) if settings.textfile else None
        self.live: Optional[LiveMetrics] = None
        self.flight: Optional[FlightRecorder] = None
        self.shipper: Optional[Shipper] = None
        self.s3 = client() if settings.ship is not None else None  # before tracing: exit 3 without boto3
        self._written = -float("inf")
        self._shipped_at = -float("inf")

    def start_endpoint(self) -> None:
        if self.server is not None:
            self.server.start()
        if self.textfile is not None:
            for path in stale_temporaries(self.textfile.path, pid_alive):
                _remove(path, self.log)

    def attach(self, source: LiveTrace) -> LiveMetrics:
        session = source.session
        scope = ScopeFilter(session.scope, CommCache(lambda: saved_comms(session.fs)))
        listeners = Listeners(on_transition=self._transition, on_violation=self._violation)
        if self.settings.flight is not None:
            self.flight = self._flight(source)
            flight = self.flight
            listeners.on_batch = flight
            listeners.on_findings = lambda found, now, analysis: judge_analysis(flight, analysis, found, now)
        info = (("version", __version__), ("profile", self.options.profile_name))
        analysis = Analysis(self.options.profile, scope, tasks=session.tasks, processes=session.processes)
        if self.flight is not None:
            self.flight.tasks = analysis_tasks(analysis)  # the dumps' headers: the threads it knows
        self.live = LiveMetrics(source.block_timeline(), analysis, self.state,
                                rules=self.rules, ledger=session.ledger, update_loss=session.update_loss,
                                listeners=listeners, figures=self.figures, info=info)  # fmt: skip
        return self.live

    def _flight(self, source: LiveTrace) -> FlightRecorder:
        """The flight recorder writing into the spool (a RecordingError, exit 2, when it cannot be written)."""
        assert self.settings.flight is not None
        channels = source.channels
        extra = {"channels": channels.header()} if channels is not None else {}
        flight = FlightRecorder(source.session, self.settings.flight, self.options.profile_name, extra=extra,
                                on_note=self._flight_note)  # fmt: skip
        for name in flight.stale:
            self.log.warning(f"spool: {self.settings.flight.directory}/{name}: an unfinished dump of an earlier run "
                             "(readable to its cut)")  # fmt: skip
        if self.settings.ship is not None:
            self.shipper = Shipper(self.settings.flight.directory, self.settings.ship, read_identity()["hostname"],
                                   self.log.info, s3=self.s3)  # fmt: skip
            flight.removable, flight.on_written = self.shipper.removable, self.shipper.wake
            self._ship_figures()
            self.shipper.start()
        return flight

    def _ship_figures(self) -> None:
        """The shipper's counters into the agent's figures (about once a second)."""
        self._shipped_at = time.monotonic()
        if self.shipper is not None:
            for key, value in self.shipper.figures().items():
                self.figures.set(key, value)

    def _flight_note(self, text: str) -> None:
        self.log.write("warning" if " failed" in text or "cannot" in text else "info", text)
        if self.flight is not None:
            self.figures.set("spool_dumps_total", len(self.flight.written))
            self.figures.set("spool_errors_total", sum(self.flight.errors.values()))
            self.figures.set("spool_removed_total", len(self.flight.removed))

    # ---- the pump's side --------------------------------------------------------------------------------------
    def sink(self, batch: Batch) -> None:
        if self.hup.take():
            self.reload()
        assert self.live is not None
        if self.shipper is not None and time.monotonic() - self._shipped_at >= 1.0:
            self._ship_figures()
        self.live(batch)
        if self.textfile is not None and time.monotonic() - self._written >= self.settings.textfile_interval:
            self.write_textfile()

    def write_textfile(self) -> None:
        assert self.textfile is not None
        self._written = time.monotonic()
        self.textfile.write()
        self.figures.set("textfile_writes_total", self.textfile.writes)
        self.figures.set("textfile_errors_total", self.textfile.errors)

    def reload(self) -> None:
        """SIGHUP: the log reopened, the rules read again (the previous ones stay when the file is bad)."""
        self.log.reopen()
        try:
            rules = load_rules(self.settings.rules_path)
        except NpuTraceError as exc:
            self.figures.add("rules_reload_errors_total")
            if self.live is not None:
                self.live.publish()
            self.log.error(f"SIGHUP: {exc}; the previous rules stay")
            return
        self.rules = rules
        self.figures.add("rules_reloads_total")
        if self.live is not None:
            self.live.set_rules(rules)
            self.live.publish()  # judged by the new rules at once: what a scrape sees once this is logged
        self.log.info(f"SIGHUP: log reopened, rules read again ({rules.source})")

    def finish(self) -> None:
        """The session ended: the last figures made and written; the endpoint closed."""
        try:
            if self.flight is not None:
                self.flight.close()  # the dump being written finished as it is
                self._flight_note("flight: " + self.flight.summary().removeprefix("flight: "))
            if self.shipper is not None:
                self.shipper.stop()  # what is left tried once more; what stays is said
                self._ship_figures()
            if self.live is not None:
                self.live.finish()
            if self.textfile is not None:
                self.write_textfile()
        finally:
            if self.server is not None:
                self.server.close()

    def _transition(self, t: Transition) -> None:
        self.log.write("warning" if t.state != "ok" else "notice", f"device {t.dev}: {t.state} ({t.why})")

    def _violation(self, rule: str, violated: bool) -> None:
        if violated:
            self.log.warning(f"rule {rule} ({self.rules.source}) is violated")
        else:
            self.log.info(f"rule {rule} holds again")


def _remove(path: str, log: ServiceLog) -> None:
    try:
        os.unlink(path)
        log.info(f"removed {path}, left by a killed agent")
    except OSError as exc:
        log.warning(f"cannot remove {path} (left by a killed agent): {exc.strerror}")


def open_log(args: argparse.Namespace) -> ServiceLog:
    prefix = {"auto": None, "journald": True, "plain": False}[args.log_prefix]
    return ServiceLog(args.log_file, prefix)


def summary(agent: Agent, source_events: int, channels_text: str) -> List[str]:
    state = agent.state.latest
    found = ", ".join(f"{n} {k}" + (f" (device {d})" if d else "") for k, d, n in state.findings) or "no findings"
    lost = sum(n for _, n in state.lost)
    where: List[Tuple[str, str]] = []
    if agent.server is not None:
        where.append(("endpoint", f"http://{agent.server.address}/metrics"))
    if agent.textfile is not None:
        where.append(("textfile", f"{agent.textfile.path} ({agent.textfile.writes} writes, "
                                  f"{agent.textfile.errors} failed)"))  # fmt: skip
    out = f"agent stopped: {source_events} events{channels_text}; {found}; {lost} events lost"
    return [out, *(f"{k}: {v}" for k, v in where)]


def run(args: argparse.Namespace) -> int:
    settings = AgentSettings(args)
    options = options_from_args(args)
    log = open_log(args)
    agent = Agent(settings, options, log)  # the rules read here: a bad file is exit 2 before tracing
    session = options.make_session()
    channels = options.make_channels(on_note=log.info)
    stop = prepare_process()
    agent.hup.install()
    agent.start_endpoint()
    try:
        with LiveTrace(session, channels) as source:
            agent.attach(source)
            where = f"metrics on http://{agent.server.address}/metrics" if agent.server else "no endpoint"
            if settings.flight is not None:
                where += f", dumps to {settings.flight.directory} (the last {settings.flight.seconds:g} s kept)"
            if settings.ship is not None:
                where += f", shipped to {settings.ship.url()}/{read_identity()['hostname']}/"
            if agent.textfile is not None:
                where += f", textfile {agent.textfile.path} every {settings.textfile_interval:g} s"
            announce(session, f"agent: {where}", channels, say=log.info)
            try:
                pump(source, agent.sink, duration=options.duration, stop=stop)
            finally:
                agent.finish()
            events = session.kernel_events_read()
    finally:
        if agent.server is not None:
            agent.server.close()
    for line in summary(agent, events, channel_summary(channels)):
        log.info(line)
    log.close()
    return 0
