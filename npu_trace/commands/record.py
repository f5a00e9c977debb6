"""`npu-trace record -o FILE`: headless recording of raw kernel trace pages to a `.npt` session file."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from npu_trace.commands.stream import add_trace_options, announce, channel_summary, note, options_from_args
from npu_trace.errors import UsageError
from npu_trace.pipeline import pump
from npu_trace.process import prepare_process
from npu_trace.recording.writer import DEFAULT_MODE
from npu_trace.sinks.recorder import Recorder
from npu_trace.sources.live import LiveTrace

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    m = _SIZE_RE.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G, 100000)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


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
    p = sub.add_parser("record", help="record kernel trace events to a session file",
                       description="Record the selected events' raw ring-buffer pages to an .npt file "
                       "(decoded on replay). SIGINT/SIGTERM finish the file cleanly; a SIGKILL loses at most "
                       "about the last second.")  # fmt: skip
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="session file (.npt)")
    add_trace_options(p)
    p.add_argument("--max-size", type=parse_size, metavar="SIZE",
                   help="rotate to a new numbered file (FILE.0001.npt, ...) after SIZE bytes")  # fmt: skip
    p.add_argument("--max-time", type=float, metavar="S", help="rotate to a new numbered file every S seconds")
    p.add_argument("--compression", choices=("zstd", "none"), default="zstd", help="chunk codec (default zstd)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument("--mode", type=parse_mode, default=DEFAULT_MODE, metavar="MODE",
                   help="permissions of the files written (octal; default 0600: a recording holds kernel log "
                   "lines, process names and driver addresses that only root may read on the host)")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_time is not None and args.max_time <= 0:
        raise UsageError("--max-time must be positive")
    options = options_from_args(args)
    session = options.make_session()
    channels = options.make_channels(on_note=note)
    stop = prepare_process()
    with LiveTrace(session, channels) as source:
        extra = {"channels": channels.header()} if channels is not None else {}
        recorder = Recorder(session, args.output, options.profile_name, compression=args.compression,
                            max_size=args.max_size, max_time=args.max_time, overwrite=args.overwrite,
                            extra=extra, mode=args.mode)  # fmt: skip
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
