"""`TraceOptions`: the trace options of `stream`, `record`, `live` and `demo`, parsed once into one value.

A frozen, picklable value, checked when it is made (a bad value is a UsageError: one line, exit 2, before
anything touches the kernel), that builds the sources of a session: the tracefs session (`make_session()`), the other
channels (`make_channels()`) and the BPF channel's configuration (`bpf_config()`). The CLI makes it from its
arguments (`TraceOptions.from_args`); the TUI's worker receives it as it is (`tui.messages.SourceSpec`).

Scope (`pids`, `comms`, `devices`; `npu_trace.pipeline.scope` for what each means and where it is applied):
`pids` are processes (thread-group ids): `from_args` turns a thread's id into its process's, and refuses one
that does not exist. The profile's interrupt events are scoped to the NPU's own interrupts, found on this host
when the session is built (`npu_trace.sources.npu_irqs`), unless `events` replaces the profile's.

HAL (`--bpf` on a real host): `from_args` finds the libascend_hal.so that running processes map (through
`/proc/PID/root` for a container), else the driver's install paths (`npu_trace.sources.hal_search`), unless
`--hal PATH` names it; `bpf_binary` is the first file found, `hal_more` the other copies (the same uprobes are set
on each), `hal_found` says how they were found.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from npu_trace.bpf.config import BpfConfig
from npu_trace.device import chips
from npu_trace.device.irqs import NpuIrq
from npu_trace.device.profiles import Profile, get_profile
from npu_trace.errors import UsageError
from npu_trace.ftrace.context import HOST_CONTEXT
from npu_trace.ftrace.filters import check_comm
from npu_trace.ftrace.tracefs import Tracefs, find_optional
from npu_trace.pipeline.scope import Scope, irq_table
from npu_trace.sources.chip_search import find_chip
from npu_trace.sources.hal_search import HalSearch, find_hal
from npu_trace.sources.host_channels import DEFAULT_HEALTH_INTERVAL_S, Channels, parse_channels
from npu_trace.sources.npu_irqs import discover_npu_irqs
from npu_trace.sources.procs import thread_group
from npu_trace.sources.scoping import kernel_dev_fields
from npu_trace.sources.tracefs_source import DEFAULT_BUFFER_KB, TracefsSession, driver_systems

MAX_INTERVAL_S = 86_400  # the longest wait between polls of a channel (npu-smi's), or between textfile writes
MAX_SCOPE_VALUES = 8  # of each of --pid, --comm, --device (the BPF programs hold as many)
Note = Callable[[str], None]


@dataclass(frozen=True)
class TraceOptions:
    profile_name: str = "sim"
    events: Tuple[str, ...] = ()  # globs replacing the profile's events (each must match)
    duration: Optional[float] = None  # seconds; None: until stopped
    channels: Optional[Tuple[str, ...]] = None  # the other channels; None: the profile's
    npu_smi: str = "npu-smi"
    health_interval: float = DEFAULT_HEALTH_INTERVAL_S
    bpf: bool = False
    bpf_binary: Optional[str] = None
    hal_more: Tuple[str, ...] = ()  # further copies of the HAL library (containers), uprobed as bpf_binary is
    hal_found: str = ""  # how the HAL library was found, when it was looked for
    buffer_kb: int = DEFAULT_BUFFER_KB
    pids: Tuple[int, ...] = ()  # processes (thread-group ids)
    comms: Tuple[str, ...] = ()  # task names
    devices: Tuple[int, ...] = ()  # NPU device ids
    app_logs: Tuple[str, ...] = ()  # application logs followed by the app_log channel (npu_trace.sources.applog_source)
    stacktrace: bool = False  # the instance's stacktrace option: a kernel stack (ftrace:kernel_stack) after each event
    chip: Optional[str] = None  # --chip: the task layout of the HAL's task calls; None: found (chip_search)
    host_context: bool = False  # the host's scheduler and interrupt events beside (npu_trace.ftrace.context)

    def __post_init__(self) -> None:
        if self.duration is not None and not 0 < self.duration < math.inf:  # NaN too: false to every bound
            raise UsageError("--duration must be positive")
        if self.buffer_kb <= 0:
            raise UsageError("--buffer-kb must be positive")
        if not 0 < self.health_interval < math.inf:
            raise UsageError("--health-interval must be positive")
        if self.health_interval > MAX_INTERVAL_S:  # a wait longer than threading's: its thread's OverflowError
            raise UsageError(f"--health-interval {self.health_interval:g}: at most {MAX_INTERVAL_S} s (a day)")
        profile = self.profile  # an unknown profile: UsageError
        if self.channels is not None:
            parse_channels(",".join(self.channels) or "none")
        self._check_scope()
        if not self.bpf and self.bpf_binary:
            raise UsageError("--hal needs --bpf")
        if self.chip is not None and self.chip not in (*chips.CHIPS, "unknown"):
            raise UsageError(f"unknown chip {self.chip!r} (one of {', '.join(chips.CHIPS)}, unknown)")
        if self.bpf and self.bpf_binary is None and profile.name != "sim" and not profile.bpf_irq_prefixes:
            raise UsageError(f"--bpf with the {profile.name} profile needs --hal PATH (the HAL library)")

    def _check_scope(self) -> None:
        for flag, values in (("--pid", self.pids), ("--comm", self.comms), ("--device", self.devices)):
            if len(values) > MAX_SCOPE_VALUES:
                raise UsageError(f"{flag}: at most {MAX_SCOPE_VALUES} values, not {len(values)}")
        for pid in self.pids:
            if pid <= 0:
                raise UsageError(f"--pid {pid}: a process id is positive")
        for dev in self.devices:
            if dev < 0:
                raise UsageError(f"--device {dev}: a device id is not negative")
        for comm in self.comms:
            check_comm(comm)

    @classmethod
    def from_args(cls, args: Any, sim_binary: Optional[Callable[[], str]] = None,
                  hal: Callable[[], HalSearch] = find_hal) -> TraceOptions:  # fmt: skip
        """The options of an argparse Namespace made by `add_trace_options` (absent attributes: defaults).
        `sim_binary`: where the simulator's executable is (built if need be), for --bpf with the sim profile
        without --hal: the value then names it, for whoever builds the channels. `hal`: where the HAL library
        is, for --bpf with another profile without --hal (the module docstring)."""
        options = cls._of(args)
        if not options.bpf or options.bpf_binary is not None:
            return options
        if options.profile_name == "sim":
            return options if sim_binary is None else replace(options, bpf_binary=sim_binary())
        found = hal()
        if not found.files:
            return replace(options, hal_found=found.describe())
        first, *more = found.paths
        return replace(options, bpf_binary=first, hal_more=tuple(more), hal_found=found.describe())

    @classmethod
    def _of(cls, args: Any) -> TraceOptions:
        channels = getattr(args, "channels", None)
        return cls(
            profile_name=getattr(args, "profile", "sim"),
            events=tuple(getattr(args, "events", None) or ()),
            duration=getattr(args, "duration", None),
            channels=None if channels is None else tuple(parse_channels(channels)),
            npu_smi=getattr(args, "npu_smi", "npu-smi"),
            health_interval=getattr(args, "health_interval", DEFAULT_HEALTH_INTERVAL_S),
            bpf=bool(getattr(args, "bpf", False)),
            bpf_binary=getattr(args, "bpf_binary", None),
            buffer_kb=getattr(args, "buffer_kb", DEFAULT_BUFFER_KB),
            pids=processes(getattr(args, "pid", None) or ()),
            comms=_unique(getattr(args, "comm", None) or ()),
            devices=_unique(getattr(args, "device", None) or ()),
            app_logs=_unique(getattr(args, "app_log", None) or ()),
            stacktrace=bool(getattr(args, "stacktrace", False)),
            chip=getattr(args, "chip", None),
            host_context=bool(getattr(args, "host_context", False)),
        )

    # ---- what they describe --------------------------------------------------------------------
    @property
    def profile(self) -> Profile:
        return get_profile(self.profile_name)

    def channel_names(self) -> List[str]:
        """The channels asked for: `channels`, else the profile's."""
        return list(self.profile.channels if self.channels is None else self.channels)

    def scope(self, irqs: Optional[Mapping[int, NpuIrq]] = None) -> Scope:
        """What the session traces; `irqs`: the host's NPU interrupts (None: found here, when the profile's
        interrupt events are traced)."""
        table = None
        if self.irq_events():
            found = discover_npu_irqs() if irqs is None else irqs
            table = irq_table({irq: info.dev for irq, info in found.items()})
        return Scope(self.pids, self.comms, self.devices, table)

    def irq_events(self) -> Tuple[str, ...]:
        """The profile's interrupt events, scoped to the NPU's interrupts (none when `events` replaces them)."""
        return () if self.events else self.profile.irq_events

    # ---- the sources ---------------------------------------------------------------------------
    def make_session(self, fs: Optional[Tracefs] = None, irqs: Optional[Mapping[int, NpuIrq]] = None) -> TracefsSession:
        """The tracefs session (not started)."""
        profile = self.profile
        return TracefsSession(
            list(self.events),
            optional=() if self.events else profile.events,
            missing_hint=profile.hint,
            fs=fs,
            buffer_kb=self.buffer_kb,
            layouts=profile.layouts,
            allow_none=(bool(self.channel_names()) or self.bpf) and not self.events and not profile.require_events,
            exclude=profile.bpf_replaces if self.bpf and not self.events else (),
            scope=self.scope(irqs),
            dev_fields=kernel_dev_fields(profile.mapping),
            irq_events=self.irq_events(),
            # the BPF channel reads the driver's tracepoints too: their switches are the session's to turn on
            switch_systems=driver_systems(profile.bpf_tracepoints) if self.bpf else (),
            stacktrace=self.stacktrace,
            context=HOST_CONTEXT if self.host_context else (),
        )

    def make_channels(self, on_note: Optional[Note] = None) -> Optional[Channels]:
        """The other channels to run beside the session (not opened yet), or None."""
        names = self.channel_names()
        bpf = self.bpf_config(on_note)
        if not names and bpf is None and not self.app_logs:
            return None
        return Channels(names, npu_smi=self.npu_smi, health_interval_s=self.health_interval, on_note=on_note,
                        bpf=bpf, mapping=self.profile.mapping, app_logs=self.app_logs)  # fmt: skip

    def bpf_config(self, on_note: Optional[Note] = None) -> Optional[BpfConfig]:
        """--bpf: HAL uprobes on `bpf_binary` and the profile's IRQ names and driver tracepoints (those present
        here), scoped like the session."""
        if not self.bpf:
            return None
        profile = self.profile
        binary = self.bpf_binary
        if binary is None and profile.name == "sim":
            raise UsageError("--bpf with the sim profile: the simulator's binary is not known (give --bpf-binary)")
        if self.hal_found and on_note is not None:
            on_note(f"HAL: {self.hal_found}" + ("" if binary else ": no HAL uprobes (--hal PATH names it)"))
        # said only for a library that is there (a missing one is the one error said)
        layout = self.task_layout(on_note if os.path.isfile(binary) else None) if binary is not None else "unknown"
        return BpfConfig(binary=binary, more_binaries=self.hal_more, hal=binary is not None, task_layout=layout,
                         irq=bool(profile.bpf_irq_prefixes),
                         irq_names=profile.bpf_irq_prefixes, tracepoints=present_tracepoints(profile.bpf_tracepoints,
                         on_note), pids=self.pids, comms=self.comms, devs=self.devices)  # fmt: skip


    def task_layout(self, on_note: Optional[Note] = None) -> str:
        """The chip's task layout (--chip, else found on this host), said once; the sim profile's executor
        takes its ids in registers (no layout needed)."""
        if self.profile.name == "sim" and self.chip is None:
            return "unknown"
        found = chips.named(self.chip) if self.chip is not None else find_chip(self.npu_smi)
        if on_note is not None:
            on_note(f"task layout: {found.describe()}")
        return found.layout.name


def processes(pids: Sequence[int]) -> Tuple[int, ...]:
    """--pid values as processes: a thread's id stands for its process; one that does not exist is a UsageError."""
    out = []
    for pid in pids:
        tgid = thread_group(pid) if pid > 0 else pid  # not positive: refused by TraceOptions
        if tgid is None:
            raise UsageError(f"--pid {pid}: no such process")
        out.append(tgid)
    return _unique(out)


def present_tracepoints(wanted: Tuple[str, ...], on_note: Optional[Note] = None) -> Tuple[str, ...]:
    """The profile's BPF tracepoints that exist here; the absent ones are named once."""
    if not wanted:
        return ()
    fs = find_optional()
    available = set(fs.available_events()) if fs is not None else set()
    absent = [tp for tp in wanted if tp not in available]
    if absent and on_note is not None:
        on_note(f"--bpf: not on this host: {', '.join(absent)} (the driver is not loaded)")
    return tuple(tp for tp in wanted if tp in available)


def _unique(values: Sequence[Any]) -> Tuple[Any, ...]:
    return tuple(dict.fromkeys(values))

