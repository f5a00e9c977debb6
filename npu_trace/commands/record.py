"""`npu-trace record -o FILE`: headless recording of raw kernel trace pages to a `.npt` session file; with
`--flight SECONDS -o DIR`, the last minutes kept in memory and dumped to DIR around incidents."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Optional

from npu_trace.commands.session_text import announce, channel_summary, note
from npu_trace.commands.trace_options import add_trace_options, options_from_args
from npu_trace.detectors.analysis import Analysis
from npu_trace.errors import UsageError
from npu_trace.pipeline import pump
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.process import prepare_process
from npu_trace.recording.host import load_simulated
from npu_trace.recording.writer import DEFAULT_MODE
from npu_trace.sinks.flight.flight_recorder import (
    DEFAULT_AFTER_S,
    DEFAULT_FLIGHT_BYTES,
    DEFAULT_GAP_S,
    DEFAULT_KEEP,
    DEFAULT_KEEP_BYTES,
    FlightRecorder,
    FlightSettings,
)
from npu_trace.sinks.flight.incident_policy import DEFAULT_DUMP_ON, RESET_AFTER_NS, TRIGGER_KINDS, parse_kinds
from npu_trace.sinks.flight.live_flight import LiveFlight
from npu_trace.sinks.npt_sink import Recorder
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.live_trace import LiveTrace

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    m = _SIZE_RE.match(text.strip())
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()]) if m else 0
    if size <= 0:  # 0.1 was 0 bytes (a positive number, truncated)
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G, 100000)")
    return size


def parse_mode(text: str) -> int:
    """ "0640" -> 0o640: the file mode of recordings (octal, at most 0777)."""
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"not a file mode: {text!r} (octal, e.g. 0600 or 0640)")
    return mode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("record", help="record kernel trace events to a session file (or keep the last minutes: "
                       "--flight)", description="Record the selected events' raw ring-buffer pages to an .npt file "
                       "(decoded on replay). SIGINT/SIGTERM finish the file cleanly; a SIGKILL loses at most "
                       "about the last second. With --flight SECONDS, -o is a directory: the last SECONDS stay in "
                       "memory and the detectors run live; each incident (a reset sequence, a timeout, heartbeat "
                       "lost, an allocation failure: --dump-on) is written to DIR as a recording of its "
                       "window.")  # fmt: skip
    p.add_argument("-o", "--output", required=True, metavar="FILE|DIR", help="session file (.npt); with --flight: "
                   "the directory of the dumps (created when missing)")  # fmt: skip
    add_trace_options(p)
    p.add_argument("--max-size", type=parse_size, metavar="SIZE",
                   help="rotate to a new numbered file (FILE.0001.npt, ...) after SIZE bytes")  # fmt: skip
    p.add_argument("--max-time", type=float, metavar="S", help="rotate to a new numbered file every S seconds")
    p.add_argument("--compression", choices=("zstd", "none"), default="zstd", help="chunk codec (default zstd)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument("--mode", type=parse_mode, default=DEFAULT_MODE, metavar="MODE",
                   help="permissions of the files written (octal; default 0600: a recording holds kernel log "
                   "lines, process names and driver addresses that only root may read on the host)")  # fmt: skip
    p.add_argument("--sim-host", metavar="FILE",
                   help="the simulator's cluster (npu-trace sim cluster): write this simulated host's identity and "
                   "wall clock (a JSON file: hostname, machine_id, boot_id, offset_ns, error_ns) into the header "
                   "instead of this host's; the header marks them simulated")  # fmt: skip
    add_flight_options(p)
    p.set_defaults(func=run)


def add_flight_options(p: argparse.ArgumentParser, dumps: bool = True) -> None:
    """--flight and its bounds; with `dumps`, what makes a dump and the directory's retention."""
    g = p.add_argument_group("flight recorder")
    g.add_argument("--flight", type=float, metavar="SECONDS",
                   help="keep the last SECONDS of raw pages and channel events in memory (compressed) and dump "
                   "them around incidents")  # fmt: skip
    g.add_argument("--flight-bytes", type=parse_size, default=DEFAULT_FLIGHT_BYTES, metavar="SIZE",
                   help=f"memory bound of the ring (default {DEFAULT_FLIGHT_BYTES >> 20}M); it wins over SECONDS: "
                   "a busy host keeps fewer seconds, and says so")  # fmt: skip
    if not dumps:
        return
    g.add_argument("--after", type=float, default=DEFAULT_AFTER_S, metavar="S",
                   help=f"a dump goes on S seconds after its last trigger (default {DEFAULT_AFTER_S:g}: a timeout's "
                   "escalation joins it); while a reset sequence is open it goes on until the sequence ends, "
                   f"then {RESET_AFTER_NS // 1_000_000_000} s more")  # fmt: skip
    g.add_argument("--dump-on", type=_kinds, default=DEFAULT_DUMP_ON, metavar="KINDS",
                   help=f"findings that make a dump, comma-separated: {', '.join(TRIGGER_KINDS)}, or all "
                   f"(default {','.join(DEFAULT_DUMP_ON)})")  # fmt: skip
    g.add_argument("--dump-gap", type=float, default=DEFAULT_GAP_S, metavar="S",
                   help=f"at most one new dump per S seconds (default {DEFAULT_GAP_S:g}); triggers meanwhile go "
                   "into the next one, which starts where the previous ended")  # fmt: skip
    g.add_argument("--keep", type=int, default=DEFAULT_KEEP, metavar="N",
                   help=f"keep the newest N dumps in the directory (default {DEFAULT_KEEP})")
    g.add_argument("--keep-bytes", type=parse_size, default=DEFAULT_KEEP_BYTES, metavar="SIZE",
                   help=f"... within SIZE bytes (default {DEFAULT_KEEP_BYTES >> 30}G)")


def _kinds(text: str) -> Any:
    try:
        return parse_kinds(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--dump-on: ")) from None


def flight_settings(args: argparse.Namespace, directory: str) -> FlightSettings:
    """The flight recorder's settings from the options (checked: a UsageError)."""
    settings = FlightSettings(
        args.flight, directory, args.flight_bytes, getattr(args, "after", DEFAULT_AFTER_S),
        tuple(getattr(args, "dump_on", DEFAULT_DUMP_ON)), getattr(args, "dump_gap", DEFAULT_GAP_S),
        getattr(args, "keep", DEFAULT_KEEP), getattr(args, "keep_bytes", DEFAULT_KEEP_BYTES),
        getattr(args, "mode", DEFAULT_MODE),
    )  # fmt: skip
    settings.check()
    return settings


def run(args: argparse.Namespace) -> int:
    if args.max_time is not None and args.max_time <= 0:
        raise UsageError("--max-time must be positive")
    if args.flight is not None:
        if args.max_size is not None or args.max_time is not None or args.overwrite:
            raise UsageError("--flight writes dumps into a directory: --max-size, --max-time and --overwrite do "
                             "not apply (--keep and --keep-bytes bound it)")  # fmt: skip
        if args.sim_host is not None:
            raise UsageError("--sim-host is for recordings of the simulator's cluster, not --flight")
        return run_flight(args, flight_settings(args, args.output))
    host = load_simulated(args.sim_host) if args.sim_host is not None else None
    options = options_from_args(args)
    session = options.make_session()
    channels = options.make_channels(on_note=note)
    stop = prepare_process()
    with LiveTrace(session, channels) as source:
        extra = {"channels": channels.header()} if channels is not None else {}
        recorder = Recorder(session, args.output, options.profile_name, compression=args.compression,
                            max_size=args.max_size, max_time=args.max_time, overwrite=args.overwrite,
                            extra=extra, mode=args.mode, host=host)  # fmt: skip
        announce(session, f"recording to {args.output}", channels)
        try:
            pump(source, recorder, duration=options.duration, stop=stop)
        finally:
            recorder.close()
        events = session.kernel_events_read()
    files = ", ".join(recorder.files)
    per_event = f" ({recorder.bytes_written / events:.1f} B/event)" if events else ""
    print(f"npu-trace: recorded {events} events in {recorder.pages} pages{channel_summary(channels)} to {files}: "
          f"{recorder.bytes_written} bytes{per_event}; {session.ledger.summary()}", file=sys.stderr)  # fmt: skip
    return 0


# ---- the flight recorder: the ring, the live analysis, the dumps ---------------------------------------------
def run_flight(args: argparse.Namespace, settings: FlightSettings) -> int:
    options = options_from_args(args)
    session = options.make_session()
    channels = options.make_channels(on_note=note)
    stop = prepare_process()
    flight: Optional[FlightRecorder] = None
    with LiveTrace(session, channels) as source:
        extra = {"channels": channels.header()} if channels is not None else {}
        flight = FlightRecorder(session, settings, options.profile_name, extra=extra, on_note=note)
        for name in flight.stale:
            note(f"flight: {settings.directory}/{name}: an unfinished dump of an earlier run (readable to its cut)")
        scope = ScopeFilter(session.scope, CommCache(lambda: saved_comms(session.fs)))
        analysis = Analysis(options.profile, scope, tasks=session.tasks, processes=session.processes)
        sink = LiveFlight(flight, source.block_timeline(), analysis)
        announce(session, f"flight recorder: the last {settings.seconds:g} s in memory (at most "
                 f"{settings.max_bytes >> 20} MiB), dumps on {','.join(settings.dump_on)} to {settings.directory}",
                 channels)  # fmt: skip
        try:
            pump(source, sink, duration=options.duration, stop=stop)
        finally:
            flight.close()
        events = session.kernel_events_read()
    print(f"npu-trace: traced {events} events{channel_summary(channels)}; {flight.summary()}; "
          f"{session.ledger.summary()}", file=sys.stderr)  # fmt: skip
    return 0
