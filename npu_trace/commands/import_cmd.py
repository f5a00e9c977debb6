"""`npu-trace import INPUT [--app-log APP_LOG ...] -o REC.npt`: a saved kernel log, a trace-cmd trace.dat or ftrace
text (`cat trace`, `trace_pipe`, `trace-cmd report`), and application logs, as a recording
(npu_trace.sources.importer says how times are placed; npu_trace.sources.ftrace_text how ftrace text is read)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from datetime import datetime
from typing import Any, Dict, Iterator, List, Optional

from npu_trace.commands.record import parse_mode
from npu_trace.device import hal
from npu_trace.device.applog import MAX_YEAR, MIN_YEAR, utc_offset
from npu_trace.device.profiles import ASCEND_LAYOUTS, PROFILES
from npu_trace.device.trace_formats import DRIVER
from npu_trace.errors import InputError, RecordingError, UsageError
from npu_trace.events import Loss, NpuEvent
from npu_trace.export.beside import file_beside, in_place, refuse_inputs
from npu_trace.ftrace import known_formats, tracedat
from npu_trace.ftrace.format import parse_header_page
from npu_trace.ftrace.tracefs import parse_saved_cmdlines
from npu_trace.process import end_on_termination
from npu_trace.recording.schema import MAGIC, MAX_KALLSYMS_STORED, kallsyms_entry
from npu_trace.recording.writer import DEFAULT_MODE, RecordingWriter
from npu_trace.sim import synth
from npu_trace.sources import ftrace_text, importer


def add_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="turn a saved kernel log, a trace-cmd trace.dat or ftrace text (and application "
                       "logs) into a recording", description="INPUT: a kernel log as saved or pasted (dmesg, dmesg -T, "
                       "journalctl -k, syslog, device-side slog, /dev/kmsg records; grep -n prefixes, prompts and "
                       "other output are skipped), a trace-cmd trace.dat (v6 or v7), or ftrace text as printed by "
                       "`cat trace`, `trace_pipe` or `trace-cmd report` (default, -R, -l; with or without the "
                       "header and the irq-flags columns; any trace clock). Every driver line of a log, every event "
                       "of ftrace text becomes an event (those whose format npu-trace knows, or --formats gives, "
                       "with their fields); check, replay, export and the TUI then read REC.npt like a "
                       "recording.")  # fmt: skip
    p.add_argument("input", metavar="INPUT", help="kernel log, trace.dat or ftrace text")
    p.add_argument(
        "--app-log",
        action="append",
        default=[],
        metavar="APP_LOG",
        help="an application log (CANN plog, framework output) to put on the same timeline (repeatable)",
    )
    p.add_argument("-o", "--output", required=True, metavar="REC.npt", help="the recording to write")
    p.add_argument("--profile", choices=sorted(PROFILES),
                   help="profile the recording is analysed with (default: sim for the simulator's events, else "
                   "ascend)")  # fmt: skip
    p.add_argument("--tz", metavar="OFFSET", help="UTC offset of the logs' local times, e.g. +08:00 (default: "
                   "this host's time zone)")  # fmt: skip
    p.add_argument("--year", type=int, help="the year of times written without one (syslog, vLLM; default: this "
                   "one); a syslog log's next year begins where its dates go back (Dec 31, then Jan 1)")
    p.add_argument(
        "--boot-time",
        metavar="TIME",
        help="the wall-clock time the kernel log's clock counts from "
        "(ISO 8601, e.g. 2026-05-01T08:00:00+08:00): places application logs on a dmesg log's clock",
    )
    p.add_argument("--this-boot", action="store_true",
                   help="the kernel log is of this host's current boot: place application logs with this host's "
                   "clocks (CLOCK_MONOTONIC against CLOCK_REALTIME)")  # fmt: skip
    p.add_argument("--formats", metavar="SOURCE",
                   help="ftrace text: the event formats of the host it came from, to read every event's fields: its "
                   "tracefs events directory as copied (<system>/<event>/format), a trace.dat or a recording "
                   "(default: the kernel's scheduler, interrupt, task, signal and print events, and the profiles' "
                   "events)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace an existing REC.npt")
    p.add_argument("--mode", type=parse_mode, default=DEFAULT_MODE, metavar="MODE", help="file mode (default 0600)")
    p.set_defaults(func=run)


def _boot_time(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--boot-time {text!r}: not an ISO 8601 time (e.g. 2026-05-01T08:00:00+08:00)") from None
    return int(when.timestamp() * 1e6) * 1000 if when.tzinfo else int(when.astimezone().timestamp() * 1e6) * 1000


def run(args: argparse.Namespace) -> int:
    try:
        tz = utc_offset(args.tz) if args.tz else None
    except ValueError as exc:
        raise UsageError(f"--tz: {exc}") from None
    boot = _boot_time(args.boot_time)
    if boot is not None and args.this_boot:
        raise UsageError("--boot-time and --this-boot: give one")
    if args.year is not None and not MIN_YEAR <= args.year <= MAX_YEAR:
        raise UsageError(f"--year {args.year}: a recording holds times of {MIN_YEAR} to {MAX_YEAR}")
    for path in [args.input, *args.app_log]:
        if os.path.isdir(path):
            raise InputError(f"{path}: a directory, not a file")
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if not os.path.isfile(path):  # read more than once (its kind, then its text or pages)
            raise InputError(f"{path}: not a file (a pipe, a device): give the file itself")
    _output_checked(args)
    _not_packed(args.input)
    end_on_termination()  # SIGTERM, SIGHUP: the file written beside the output removed, as on Ctrl-C
    if tracedat.is_tracedat(args.input):
        if args.formats:
            raise UsageError("--formats: a trace.dat carries its own formats")
        return _import_tracedat(args, tz, boot)
    lines = importer.read_text(args.input)
    if ftrace_text.is_ftrace_text(lines):
        return _import_ftrace_text(args, lines, tz, boot)
    if args.formats:
        raise UsageError(f"--formats: {args.input} is not ftrace text (the formats read ftrace text's events)")
    return _import_kernel_log(args, lines, tz, boot)


def _import_kernel_log(args: argparse.Namespace, lines: List[str], tz: Any, boot: Optional[int]) -> int:
    kernel = importer.read_kernel_log(lines, tz, args.year)
    if not kernel.stats.get("kernel_lines"):
        raise InputError(ftrace_text.nothing_read(args.input, lines))
    anchor = importer.resolve_anchor(kernel, boot, args.this_boot)
    events = list(kernel.events)
    apps = _app_events(args, tz, anchor, events)
    profile = args.profile or _guess_profile(events)
    extra = _extra(args, "kernel_log", kernel.clock, anchor, {"lines": kernel.stats, "forms": kernel.forms}, apps)
    header = importer.import_header(profile, "mono" if kernel.clock == "uptime" else kernel.clock, anchor, extra)
    with _writer(args, header) as writer:
        importer.write_events(writer, events)
        writer.close(totals={"imported_events": len(events)})
    stats = kernel.stats
    print(
        f"npu-trace: imported {os.path.basename(args.input)}: {stats['kernel_lines']} kernel lines of "
        f"{stats['lines']} ({', '.join(f'{k} {n}' for k, n in sorted(kernel.forms.items())) or 'no known form'}), "
        f"{stats['driver_events']} driver events, {stats['faults']} kernel fault blocks"
        f"{_app_summary(apps)} -> {args.output} (clock: {_clock_text(kernel.clock, anchor)})",
        file=sys.stderr,
    )
    return 0


def _app_events(args: argparse.Namespace, tz: Any, anchor: Any, events: List[NpuEvent]) -> List[Dict[str, Any]]:
    if not args.app_log:
        return []
    anchor = importer.need_anchor(anchor, args.app_log)
    out = []
    for path, errors, stats in importer.read_app_logs(args.app_log, tz, args.year):
        evs, untimed = importer.app_events(path, errors, anchor)
        events += evs
        out.append({**stats, "file": os.path.basename(path), "errors": len(evs), "untimed": untimed})
    return out


def _import_tracedat(args: argparse.Namespace, tz: Any, boot: Optional[int]) -> int:
    data = tracedat.read(args.input)
    anchor = None
    if boot is not None:
        anchor = importer.Anchor(0, boot, 0, "boot-time")
    elif args.this_boot or data.date_offset_ns is not None:
        anchor = _tracedat_anchor(data, args.this_boot)
    events: List[NpuEvent] = []
    apps = _app_events(args, tz, anchor, events)
    profile = args.profile or ("sim" if any(f["system"] == "ascend" for f in data.used_formats()) else "ascend")
    extra = _extra(args, "trace.dat", data.clock, anchor, data.summary(), apps)
    comms = parse_saved_cmdlines(data.cmdlines)
    if comms:
        extra["comms"] = {str(pid): comm for pid, comm in comms.items()}  # the process names trace-cmd saved
    fields = {
        "formats": data.used_formats(),
        "header_page": data.header_page,
        "page_size": data.page_size,
        "byteorder": data.byteorder,
        "trace_cpus": data.cpus_with_data(),
        "cpus": data.cpu_count,
        "events": sorted(f"{f['system']}:{f['name']}" for f in data.used_formats()),
        **_uname(data.uname),
        **_kernel_tables(data),
    }
    header = importer.import_header(profile, data.clock, anchor, extra, **fields)  # fmt: skip
    with _writer(args, header) as writer:
        for cpu, page in data.pages_in_time_order():
            if isinstance(page, Loss):  # a damaged chunk's (data.damaged names it)
                writer.add_loss(page)
            else:
                writer.add_page(cpu, page)
        importer.write_events(writer, events)
        writer.close(totals={"imported_pages": data.page_count})
    for why in data.left_out:
        print(f"npu-trace: left out the format of {why} (no record of the file is of that event)", file=sys.stderr)
    for damage in data.damaged:
        print(f"npu-trace: {os.path.basename(args.input)}: damaged, skipped: {damage} (a loss of an unknown number "
              "of events in the recording)", file=sys.stderr)  # fmt: skip
    print(f"npu-trace: imported {os.path.basename(args.input)} (trace.dat v{data.version}, {data.compression}): "
          f"{data.page_count} pages from {len(data.cpus_with_data())} CPUs, {len(data.used_formats())} event formats"
          f"{_tables_summary(fields)}{_app_summary(apps)} -> {args.output}", file=sys.stderr)  # fmt: skip
    return 0


def _import_ftrace_text(args: argparse.Namespace, lines: List[str], tz: Any, boot: Optional[int]) -> int:
    got = ftrace_text.read_ftrace_text(lines, _catalog(args.formats), parse_header_page(importer.TEXT_HEADER_PAGE))
    if not got.stats["events"]:
        raise InputError(ftrace_text.nothing_read(args.input, lines))
    anchor = _text_anchor(got.stats["time"], boot, args.this_boot)
    events: List[NpuEvent] = []
    apps = _app_events(args, tz, anchor, events)
    used = [f"{f.system}:{f.name}" for f in got.formats]
    profile = args.profile or ("sim" if any(f.system == hal.GROUP for f in got.formats) else "ascend")
    clock = "counter" if got.stats["time"] == "counts" else "local"
    extra = _extra(args, "ftrace_text", clock, anchor, got.stats, apps)
    extra.update(comms=got.comms, tasks=got.tasks)
    fields = {"formats": got.texts, "trace_cpus": got.cpus, "events": sorted(used),
              "cpus": max([got.stats["cpus_said"], *(c + 1 for c in got.cpus)])}  # fmt: skip
    header = importer.import_header(profile, clock, anchor, extra, **fields)
    with _writer(args, header) as writer:
        for loss in got.losses:  # before the pages: a replay holds them until it reaches their stamps
            writer.add_loss(loss)
        writer.flush()
        for cpu, page in got.pages:
            writer.add_page(cpu, page)
        importer.write_events(writer, events)
        writer.close(totals={"imported_pages": len(got.pages), "imported_events": got.stats["events"]})
    print(_text_summary(os.path.basename(args.input), got.stats, args.output, clock), file=sys.stderr)
    return 0


def _text_summary(name: str, stats: Dict[str, Any], output: str, clock: str) -> str:
    """What the import read, every line counted; the events' names with their fields, those kept as text; the
    fields the text did not give; a few of the lines it could not read."""
    names = stats["names"]
    read = ", ".join(f"{n} {e['fields']}" for n, e in _top(names, "fields"))
    text = ", ".join(f"{n} {e['text']}" for n, e in _top(names, "text"))
    lost = f", {stats['lost_lines']} lost-event lines ({stats['lost_events']} events lost)" * bool(stats["lost_lines"])
    out = [f"npu-trace: imported {name} (ftrace text): {stats['lines']} lines: {stats['events']} events "
           f"({stats['with_fields']} with their fields{': ' + read if read else ''}; {stats['as_text']} as text"
           f"{': ' + text if text else ''}), {stats['frames']} stack-frame lines, {stats['headers']} header/comment "
           f"lines{lost}, {stats['other']} other -> {output} (time: {_text_time(stats, clock)})"]  # fmt: skip
    absent = [f"{e['format']}: {', '.join(e['not_in_text'])}" for e in names.values() if e.get("not_in_text")]
    if absent:
        out.append(f"npu-trace: fields not in the text, recorded as 0: {'; '.join(absent)}")
    if stats["formats_refused"]:
        out.append(f"npu-trace: {len(stats['formats_refused'])} formats not used (their events kept as text): "
                   f"{'; '.join(stats['formats_refused'][:3])}")  # fmt: skip
    if stats["truncated_events"]:
        cut = ", ".join(f"line {n} ({b} bytes)" for n, b in stats["truncated"][:3])
        out.append(f"npu-trace: {stats['truncated_events']} events' text longer than a record holds, cut: {cut}")
    if stats["other"]:
        shown = "; ".join(f"line {n}: {t!r}" for n, t in stats["other_examples"][:3])
        out.append(f"npu-trace: {stats['other']} lines read as neither event nor header, e.g. {shown}")
    return "\n".join(out)


def _top(names: Dict[str, Dict[str, Any]], key: str, count: int = 6) -> List[Any]:
    ranked = sorted(((n, e) for n, e in names.items() if e[key]), key=lambda t: (-t[1][key], t[0]))
    return ranked[:count] + ([("...", {key: sum(e[key] for _, e in ranked[count:])})] if len(ranked) > count else [])


def _text_time(stats: Dict[str, Any], clock: str) -> str:
    if stats["time"] == "counts":
        return "raw counts of the trace clock, kept as they are (clock: counter)"
    return f"seconds as printed, {stats['resolution_ns'] / 1000:g} µs resolution (clock: {clock})"


def _text_anchor(time: str, boot: Optional[int], this_boot: bool) -> Optional[importer.Anchor]:
    """The wall clock of ftrace text's times: --boot-time, or --this-boot (times in seconds of this boot's
    clock: the trace clocks local, global, mono and boot count from it)."""
    if boot is not None:
        return importer.Anchor(0, boot, 0, "boot-time")
    if not this_boot:
        return None
    if time == "counts":
        raise UsageError("--this-boot: the text's times are raw counts of its trace clock, not this boot's seconds")
    now = importer.clock_anchor()
    return importer.Anchor(now["mono_ns"], now["realtime_ns"], 1_000_000, "this-boot")


def _catalog(source: Optional[str]) -> ftrace_text.Catalog:
    """The formats the text's events are read with: its own (--formats) first, then the kernel's events, the
    simulator's probes, the real driver's tracepoints, the kernel's older versions of its events."""
    own = ftrace_text.format_source(source) if source else []
    sim = [(hal.GROUP, text) for text in synth.format_texts().values()]
    return ftrace_text.Catalog([*own, *known_formats.KERNEL, *sim, *DRIVER, *known_formats.OLDER], ASCEND_LAYOUTS)
def _kernel_tables(data: Any) -> Dict[str, Any]:
    """The trace.dat's own kallsyms and printk formats, as the recording's header keeps them (a kallsyms too
    big for the header is left out: its stacks are then shown by address)."""
    out: Dict[str, Any] = {}
    if data.printk_formats:
        out["printk_formats"] = data.printk_formats
    if data.kallsyms:
        entry = kallsyms_entry(data.kallsyms)
        if len(entry["data"]) <= MAX_KALLSYMS_STORED:
            out["kallsyms"] = entry
    return out


def _tables_summary(fields: Dict[str, Any]) -> str:
    kept = [what for key, what in (("kallsyms", "its kallsyms"), ("printk_formats", "its printk formats"))
            if key in fields]  # fmt: skip
    return f", with {' and '.join(kept)}" if kept else ""


def _uname(text: str) -> Dict[str, str]:
    """The host, kernel and machine of trace-cmd's uname option (`sysname nodename release machine`)."""
    parts = text.split()
    if len(parts) != 4:
        return {"kernel": text}
    return {"host": parts[1], "kernel": parts[2], "machine": parts[3]}


def _tracedat_anchor(data: Any, this_boot: bool) -> importer.Anchor:
    if data.date_offset_ns is not None:
        return importer.Anchor(0, data.date_offset_ns, 1_000, "trace.dat date")
    if data.clock not in ("mono", "boot", "local", "global", "perf", "mono_raw"):
        raise UsageError(f"--this-boot: the trace.dat's clock {data.clock!r} is not the host's monotonic clock")
    now = importer.clock_anchor()
    return importer.Anchor(now["mono_ns"], now["realtime_ns"], 1_000_000, "this-boot")


@contextlib.contextmanager
def _writer(args: argparse.Namespace, header: Dict[str, Any]) -> Iterator[RecordingWriter]:
    """The recording, written beside its name (`.NAME.XXXXXXXX.partial`) and moved there once whole: an import that
    fails or is interrupted leaves no file, and an existing output (--overwrite) is replaced only then. An output
    that is not a regular file (/dev/null, a FIFO) is written in place, as export writes it."""
    out = args.output
    if in_place(out):
        with RecordingWriter(out, header, overwrite=True, mode=args.mode) as writer:
            yield writer
        return
    with file_beside(out) as (fd, tmp):
        os.close(fd)  # the writer opens the file by its name, and gives it the recording's mode
        with RecordingWriter(tmp, header, overwrite=True, mode=args.mode) as writer:
            yield writer


# files an import cannot read as text, told by their first bytes: what to do instead
_PACKED = ((b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first (zstd -d)"),
           (b"\x1f\x8b", "gzip-compressed: decompress it first (gunzip)"),
           (b"\xfd7zXZ\x00", "xz-compressed: decompress it first (unxz)"),
           (b"BZh", "bzip2-compressed: decompress it first (bunzip2)"),
           (MAGIC, "already a recording: replay, check or export it"))  # fmt: skip


def _not_packed(path: str) -> None:
    """Refuse a compressed file or a recording (read as text, it was 'no event read', quoting its bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:  # as read_text says it
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    for magic, what in _PACKED:
        if head.startswith(magic):
            raise InputError(f"{path}: {what}")


def _output_checked(args: argparse.Namespace) -> None:
    """Refuse an output that exists (without --overwrite), is a folder, or is one of the inputs (it would be
    replaced by what is read from it), before anything is read."""
    out = args.output
    if os.path.isdir(out):
        raise InputError(f"cannot write {out}: Is a directory")
    if not os.path.exists(out):
        return
    refuse_inputs([out], [args.input, *args.app_log, *([args.formats] if args.formats else [])], "another -o")
    if not args.overwrite and not in_place(out):
        raise RecordingError(f"{out} already exists: refusing to overwrite a recording (--overwrite replaces it)")


def _extra(args: argparse.Namespace, kind: str, clock: str, anchor: Any, stats: Dict[str, Any],
           apps: List[Dict[str, Any]]) -> Dict[str, Any]:  # fmt: skip
    running = ["kmsg"] if kind == "kernel_log" else []
    running += ["app_log"] if apps else []
    anchor_entry = None if anchor is None else {"mono_ns": anchor.mono_ns, "realtime_ns": anchor.realtime_ns,
                                                "error_ns": anchor.error_ns, "source": anchor.source}  # fmt: skip
    return {"channels": {"asked": list(running), "running": running},
            "import": {"input": os.path.basename(args.input), "kind": kind, "clock": clock, "anchor": anchor_entry,
                       "stats": stats, "app_logs": apps}}  # fmt: skip


def _guess_profile(events: List[NpuEvent]) -> str:
    sim = any(str(ev.args.get("comm", "")).startswith("npu-sim") for ev in events[:1000])
    return "sim" if sim else "ascend"


def _app_summary(apps: List[Dict[str, Any]]) -> str:
    if not apps:
        return ""
    return ", " + ", ".join(f"{a['errors']} application errors from {a['file']}" + _app_notes(a) for a in apps)


def _app_notes(app: Dict[str, Any]) -> str:
    """What an application log's count leaves out: errors no time places; none found (a wrong file?)."""
    if app["untimed"]:
        return f" ({app['untimed']} more with no time in the file: not placed)"
    if not app["errors"]:
        return f" (none found in its {app.get('lines', 0)} lines)"
    return ""


def _clock_text(clock: str, anchor: Any) -> str:
    what = {"uptime": "the kernel's clock since boot", "wall": "the wall clock", "order": "line order"}[clock]
    if anchor is None:
        return what
    return f"{what}; wall clock anchored by {anchor.source}, within {anchor.error_ns / 1e6:.3f} ms"
