"""The other channels of a session, beside the ftrace events: kernel log, uevents, npu-smi and PCIe health.

`Channels(names)` opens the ones asked for (`CHANNELS`), each on its own: one that cannot open here (no
permission on /dev/kmsg, no netlink, no npu-smi) is named once in `notes` and the others keep working.
`read()` returns what they all have now as NpuEvents on the trace clock (CLOCK_MONOTONIC: kmsg timestamps are
converted with the offset the kmsg source measures at open, uevents and polls are stamped on receipt), sorted by
timestamp. Losses are NpuEvents of kind "lost" in that stream (kmsg sequence gaps, rate-limited driver
messages, an overflowed uevent socket).

With `app_logs`, an "app_log" channel follows those files (npu_trace.sources.applog_source: CANN and framework
logs, their driver-level errors placed on the trace clock by a clock anchor taken at open).

With a `BpfConfig`, a "bpf" channel runs too (npu_trace.bpf: HAL calls measured by uprobes, entry and return
paired in the kernel, and IRQ handler durations), its events normalized by the profile's `bpf:*` rules. Asked
for explicitly, it must start: its failure is an error, not a note.

Each read also sets `watermark_ns`: no channel event stamped earlier can still come (kmsg read to its end: the
read's start less the commit margin and the clock offset's error; uevents: the read's start, as they are
stamped on receipt; npu-smi: the running poll's start; BPF drained: the read's start less the margin; an event
held for its PCI address: its own time). The ordered merge uses it to place these events among the trace's.

`header()` describes the channels for a recording's header (which ones run, the kmsg clock offset and its
error), so a replay knows how the timeline was put together.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npu_trace.bpf.config import BpfConfig
from npu_trace.device.bpf_rules import BPF_MAPPING
from npu_trace.device.kmsg import short_bdf
from npu_trace.errors import UsageError
from npu_trace.events import Loss, NpuEvent, lost_event
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS
from npu_trace.pipeline.normalize import Normalizer
from npu_trace.pipeline.vnormalize import BlockNormalizer
from npu_trace.sources.applog_source import AppLogSource
from npu_trace.sources.kmsg_source import KmsgSource
from npu_trace.sources.npusmi_source import HealthSource, mono_ns
from npu_trace.sources.uevent_source import UeventSource, sysfs_bdf_dev

CHANNELS = ("kmsg", "uevent", "health")  # a "bpf" channel runs when a BpfConfig is given
BDF_WAIT_S = 0.25  # how long an event naming an unknown PCI address waits for the event that tells its device
DEFAULT_HEALTH_INTERVAL_S = 2.0


def parse_channels(text: str) -> List[str]:
    """ "kmsg,uevent" -> ["kmsg", "uevent"]; "none" -> []; an unknown name is a UsageError."""
    if text.strip() in ("", "none"):
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHANNELS]
    if unknown:
        raise UsageError(f"unknown channel {unknown[0]!r} (known: {', '.join(CHANNELS)}, or none)")
    return list(dict.fromkeys(names))


class Channels:
    """open() -> read() -> [NpuEvent] (non-blocking) -> close(). Also a context manager."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        npu_smi: str = "npu-smi",
        health_interval_s: float = DEFAULT_HEALTH_INTERVAL_S,
        on_note: Optional[Callable[[str], None]] = None,
        bpf: Optional[BpfConfig] = None,
        mapping: Optional[Mapping[str, Any]] = None,
        app_logs: Sequence[str] = (),
    ) -> None:
        self.names = list(names) + (["bpf"] if bpf is not None else []) + (["app_log"] if app_logs else [])
        self.app_log_paths = list(app_logs)
        self.app_log: Optional[AppLogSource] = None
        self.bpf_config = bpf
        self.bpf: Optional[Any] = None  # npu_trace.bpf.source.BpfSource (imported only when asked for)
        self._bpf_normalizer = BlockNormalizer(Normalizer(mapping if mapping is not None else BPF_MAPPING))
        self.npu_smi = npu_smi
        self.health_interval_s = health_interval_s
        self.on_note = on_note
        self.kmsg: Optional[KmsgSource] = None
        self.uevent: Optional[UeventSource] = None
        self.health: Optional[HealthSource] = None
        self.running: List[str] = []
        self.notes: List[str] = []
        self.bdf_dev: Dict[str, int] = {short_bdf(k): v for k, v in sysfs_bdf_dev().items()}
        self._waiting: List[Tuple[float, NpuEvent]] = []  # events naming an unknown PCI address, since when
        self.events_read = 0
        self.watermark_ns = 0
        self._kmsg_wm = 0
        self._bpf_wm = 0
        self.lost = 0  # events the channels said they lost (kmsg gaps, rate-limited messages, uevent overflow)
        self._health_notes = 0

    def __enter__(self) -> Channels:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> None:
        for name in self.names:
            if name == "bpf":  # asked for explicitly: a failure is an error (exit 3 or 2), not a note
                try:
                    self._open_bpf()
                except BaseException:
                    self.close()  # the channels opened before it (a `with` block never reaches __exit__)
                    raise
                self.running.append(name)
                continue
            try:
                getattr(self, f"_open_{name}")()
                self.running.append(name)
            except OSError as exc:
                self._note(f"{name}: not available here ({exc.strerror or exc}): the other channels go on")

    def _open_kmsg(self) -> None:
        src = KmsgSource()
        src.open()
        self.kmsg = src
        if not src.offset_measured:
            self._note("kmsg: clock offset not measured (no write access to /dev/kmsg): kernel log times are "
                       "its own clock, uncorrected")  # fmt: skip

    def _open_app_log(self) -> None:
        src = AppLogSource(self.app_log_paths)
        src.open()
        self.app_log = src
        missing = [p for p in self.app_log_paths if not os.path.exists(p)]
        if missing:
            self._note(f"app_log: not there yet (followed once it appears): {', '.join(missing)}")

    def _open_uevent(self) -> None:
        src = UeventSource()
        src.open()
        self.uevent = src

    def _open_bpf(self) -> None:
        from npu_trace.bpf.source import BpfSource

        assert self.bpf_config is not None
        src = BpfSource(self.bpf_config)
        src.start()  # detaches everything itself when it fails
        self.bpf = src

    def _open_health(self) -> None:
        src = HealthSource(interval_s=self.health_interval_s, npu_smi=self.npu_smi)
        src.start()
        self.health = src

    def close(self) -> None:
        for src in (self.bpf, self.health, self.uevent, self.kmsg, self.app_log):
            if src is not None:
                src.close()
        self.kmsg = self.uevent = self.health = self.bpf = self.app_log = None

    def read(self, final: bool = False) -> List[NpuEvent]:
        """What the channels have now, sorted by time (`final`: the last read, nothing is held back); sets
        `watermark_ns`."""
        started = mono_ns()
        out: List[NpuEvent] = []
        if self.kmsg is not None:
            try:
                out += self.kmsg.read(drain=final) + (self.kmsg.finish() if final else [])
            except OSError as exc:  # the read itself failed (not EPIPE, which the source counts as loss)
                self._note(f"kmsg: read failed ({exc.strerror or exc}): kmsg channel stopped")
                self.kmsg.close()
                self.kmsg = None
                out.append(lost_event_note("kmsg"))
        if self.uevent is not None:
            try:
                out += self.uevent.read()
            except OSError as exc:  # the socket itself failed (its overflow is a loss it counts)
                self._note(f"uevent: read failed ({exc.strerror or exc}): uevent channel stopped")
                self.uevent.close()
                self.uevent = None
                out.append(lost_event_note("uevent"))
        if self.app_log is not None:
            out += self.app_log.read(final)
        if self.bpf is not None:
            out += self._read_bpf(started)
        if self.health is not None:
            out += self.health.read()
            notes = self.health.notes()
            for text in notes[self._health_notes :]:
                self._note(f"health: {text}")
            self._health_notes = len(notes)
        out = self._resolve_devices(out, final)
        self.watermark_ns = self._watermark(started)
        if out:
            out.sort(key=_ts)
            self.events_read += len(out)
            self.lost += sum(int(e.args.get("lost") or 0) for e in out if e.kind == "lost")
        return out

    def _watermark(self, started: int) -> int:
        marks = [started]
        if self.kmsg is not None:
            if self.kmsg.caught_up:
                self._kmsg_wm = max(self._kmsg_wm, started - COMMIT_MARGIN_NS - self.kmsg.offset_error_ns)
            marks.append(self._kmsg_wm)
        if self.bpf is not None:
            marks.append(self._bpf_wm)
        if self.health is not None:
            marks.append(self.health.watermark_ns)
        if self.app_log is not None:
            marks.append(self.app_log.watermark_ns)
        if self.kmsg is not None and self.kmsg.held_ns is not None:
            marks.append(self.kmsg.held_ns)  # a kernel fault block still being read: its event is stamped there
        marks.extend(ev.ts_ns for _, ev in self._waiting)
        return min(marks)

    def _resolve_devices(self, events: List[NpuEvent], final: bool = False) -> List[NpuEvent]:
        """Give a device to events that name only a PCI address (the driver's "Pcie hotreset, unbind driver.
        (bdf=3b:00.0)" lines): from the driver's sysfs dev_id files, and from every event carrying both (a uevent
        with its slot, a kmsg line with dev_id and bdf). One still unknown is held up to BDF_WAIT_S for the
        event that tells it (the uevent of the same step arrives within milliseconds), then passed on as is."""
        for ev in events:
            bdf = ev.args.get("bdf")
            if ev.dev is not None and isinstance(bdf, str) and bdf:
                self.bdf_dev[short_bdf(bdf)] = ev.dev
        now = time.monotonic()
        waiting, self._waiting = self._waiting, []
        out: List[NpuEvent] = []
        for since, ev in [*waiting, *((now, e) for e in events)]:
            bdf = ev.args.get("bdf")
            if ev.dev is not None or not isinstance(bdf, str) or not bdf:
                out.append(ev)
            elif short_bdf(bdf) in self.bdf_dev:
                out.append(ev._replace(dev=self.bdf_dev[short_bdf(bdf)]))
            elif now - since < BDF_WAIT_S and not final:
                self._waiting.append((since, ev))
            else:
                out.append(ev)
        return out

    def _read_bpf(self, started: int) -> List[NpuEvent]:
        """The BPF source's events (entry and return already paired in the kernel) normalized by the profile's
        bpf:* rules, marked as coming from the "bpf" channel; its losses as "lost" events."""
        batch: List[Any] = []
        self.bpf.read(batch)  # type: ignore[union-attr]
        if not self.bpf.pending():  # type: ignore[union-attr]
            self._bpf_wm = started - COMMIT_MARGIN_NS  # drained: what is not reserved yet is stamped later
        out = []
        for ev in self._bpf_normalizer.events(batch):
            if ev.kind != "lost":
                ev.args["source"] = "bpf"
            out.append(ev)
        return out

    def header(self) -> Dict[str, Any]:
        """What a recording's header says of the channels."""
        info: Dict[str, Any] = {"asked": list(self.names), "running": list(self.running)}
        if self.kmsg is not None:
            note = self.kmsg.clock_note()
            info["kmsg_clock"] = {k: note[k] for k in ("clock", "offset_ns", "error_ns", "measured")}
        if self.health is not None:
            info["health_interval_s"] = self.health_interval_s
        if self.app_log is not None:
            info["app_log"] = self.app_log.header()
        if self.bpf_config is not None:
            cfg = self.bpf_config
            info["bpf"] = {"hal": cfg.hal, "binary": os.path.basename(cfg.binary or ""),
                           "irq_names": list(cfg.irq_names), "threshold_ns": cfg.threshold_ns}  # fmt: skip
        return info

    def _note(self, text: str) -> None:
        self.notes.append(text)
        if self.on_note is not None:
            self.on_note(text)


def lost_event_note(source: str) -> NpuEvent:
    """A channel that stopped: an unknown number of its events are lost from here on."""
    return lost_event(Loss(source, -1, "stopped", 0, mono_ns()))


def _ts(ev: NpuEvent) -> int:
    return ev.ts_ns
