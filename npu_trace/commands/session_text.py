"""What a tracing command says on the terminal (`stream`, `record`, `demo`, `agent`): notes, what the session
traces, the summary line, the printer of its events."""

from __future__ import annotations

import sys
from typing import Callable, List, Optional

from npu_trace.pipeline.blocktimeline import BlockTimeline
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.sinks.text import StreamPrinter, scope_summary, unformatted_summary
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.host_channels import Channels
from npu_trace.sources.tracefs_source import TracefsSession


def note(text: str) -> None:
    print(f"npu-trace: {text}", file=sys.stderr, flush=True)


def announce(session: TracefsSession, doing: str = "", channels: Optional[Channels] = None,
             say: Optional[Callable[[str], None]] = None) -> None:
    """What the session traces, on stderr (`say`: each line elsewhere, without the "npu-trace: " prefix)."""
    for text in announce_lines(session, doing, channels):
        if say is not None:
            say(text)
        else:
            note(text)


def announce_lines(session: TracefsSession, doing: str = "", channels: Optional[Channels] = None) -> List[str]:
    what = f"; {doing}" if doing else ""
    lines = list(session.notes)
    if not session.scope.empty:
        lines.append(f"scope: {session.scope.where()}")
    if session.unmatched and not session.chosen():
        lines.append(f"none of the profile's events exists here ({', '.join(session.unmatched)}): "
                     "tracing trace markers and the other channels only")  # fmt: skip
    elif session.unmatched:
        lines.append(f"not on this host: {', '.join(session.unmatched)}")
    also = f" with {', '.join(channels.running)}" if channels is not None and channels.running else ""
    tasks = " (and task:task_newtask: which process each new thread belongs to)" if session.traces_new_tasks() else ""
    context = session.context_traced()
    if context:
        tasks += f" and the host's context ({', '.join(e.split(':', 1)[1] for e in context)})"
    lines.append(f"tracing {len(session.chosen())} event types{tasks} on tracefs instance {session.name} "
                 f"(clock {session.clock}){also}{what}; Ctrl-C stops")  # fmt: skip
    if session.instance is not None and session.fs is not None:
        also_top = f" (or to {session.fs.path('trace_marker')}: copied here)" if session.copies_markers else ""
        lines.append(f"trace markers: a line written to {session.marker_path}{also_top} is shown as ftrace:print "
                     "(echo 'text' > that file)")  # fmt: skip
    return lines


def print_summary(session: TracefsSession, timeline: BlockTimeline, printer: StreamPrinter,
                  channels: Optional[Channels] = None, scope: Optional[ScopeFilter] = None) -> None:  # fmt: skip
    """What was traced and shown, on stderr: the events read (every one printed, but what the scope left
    out), those shown by their raw fields, the malformed records, the channels, the losses."""
    extra = f", {timeline.malformed} malformed" if timeline.malformed else ""
    more = channel_summary(channels)
    print(f"npu-trace: {timeline.events} events from {len(session.selected)} event types"
          f"{unformatted_summary(printer.unformatted)}{extra}{more}{scope_summary(scope)}; "
          f"{session.ledger.summary()}", file=sys.stderr)  # fmt: skip


def channel_summary(channels: Optional[Channels]) -> str:
    """ ", and 12 from kmsg, uevent (3 lost)" for a summary line; "" without channels."""
    if channels is None or not channels.running:
        return ""
    lost = f" ({channels.lost} lost)" if channels.lost else ""
    return f", and {channels.events_read} from {', '.join(channels.running)}{lost}"


def terminal_printer(session: TracefsSession, fmt: str) -> StreamPrinter:
    """Prints to stdout; pids are named from /proc, or the session's saved_cmdlines for exited processes."""
    return StreamPrinter(sys.stdout, fmt, CommCache(lambda: saved_comms(session.fs)))
