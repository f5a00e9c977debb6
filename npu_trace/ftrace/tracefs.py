"""The one module that touches tracefs paths.

`Tracefs` is the mount (global files: available_events, formats, uprobe_events, instances/);
`Instance` is a private ring buffer (instances/<name>) with its own event switches, clock and per-CPU pipes.
Everything above this module works on text and bytes it hands out, so it can be tested without a kernel.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from typing import Dict, List, Optional

from npu_trace.errors import KernelFeatureError, PrivilegeError, SourceError
from npu_trace.process import pid_alive

MOUNT_POINTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
ROOT_ENV = "NPU_TRACE_TRACEFS"  # use this directory as the tracefs mount (another mount point, or tests)
INSTANCE_PREFIX = "npu-trace-"
_INSTANCE_RE = re.compile(r"^npu-trace-(\d+)(?:-\w+)?$")


def _os_error(action: str, path: str, exc: OSError) -> SourceError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PrivilegeError(f"{action} {path}: permission denied (run as root)")
    if exc.errno == errno.ENOENT:
        return KernelFeatureError(f"{action} {path}: no such file (kernel feature missing?)")
    return SourceError(f"{action} {path}: {exc.strerror or exc}")


class Tracefs:
    """A tracefs mount."""

    def __init__(self, root: str) -> None:
        self.root = root

    # ---- locating / mounting -------------------------------------------------------------------
    @classmethod
    def find(cls, mount: bool = True) -> Tracefs:
        """The tracefs mount ($NPU_TRACE_TRACEFS, else the usual places); mounts it at /sys/kernel/tracing when
        absent and `mount` is set (root only)."""
        override = os.environ.get(ROOT_ENV)
        for root in (override,) if override else MOUNT_POINTS:
            if os.path.exists(os.path.join(root, "available_events")):
                return cls(root)
        if os.geteuid() != 0:
            raise PrivilegeError("tracing needs root: tracefs is readable by root only (run npu-trace as root)")
        if override:
            raise KernelFeatureError(f"no tracefs at {override} (set by {ROOT_ENV})")
        if mount:
            cls._mount(MOUNT_POINTS[0])
            if os.path.exists(os.path.join(MOUNT_POINTS[0], "available_events")):
                return cls(MOUNT_POINTS[0])
        raise KernelFeatureError("tracefs is not available on this kernel (CONFIG_FTRACE / CONFIG_EVENT_TRACING)")

    @staticmethod
    def _mount(path: str) -> None:
        if os.geteuid() != 0 or not os.path.isdir(path):
            return
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )

    # ---- plain file access ---------------------------------------------------------------------
    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def read_text(self, rel: str) -> str:
        path = self.path(rel)
        try:
            with open(path) as f:
                return f.read()
        except OSError as exc:
            raise _os_error("cannot read", path, exc) from exc

    def write_text(self, rel: str, text: str, append: bool = False) -> None:
        path = self.path(rel)
        try:
            _write(path, text, append)
        except OSError as exc:
            raise _os_error("cannot write", path, exc) from exc

    def write_refusable(self, rel: str, text: str, append: bool = False) -> bool:
        """Like write_text, but a value the kernel refuses (EINVAL) returns False instead of raising."""
        path = self.path(rel)
        try:
            _write(path, text, append)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise _os_error("cannot write", path, exc) from exc
        return True

    # ---- events --------------------------------------------------------------------------------
    def available_events(self) -> List[str]:
        """Every event as "system:name"."""
        return [line.strip() for line in self.read_text("available_events").splitlines() if line.strip()]

    def event_format(self, system: str, name: str) -> str:
        return self.read_text(f"events/{system}/{name}/format")

    def has_event_format(self, system: str, name: str) -> bool:
        return os.path.exists(self.path(f"events/{system}/{name}/format"))

    def header_page(self) -> str:
        return self.read_text("events/header_page")

    def header_event(self) -> str:
        return self.read_text("events/header_event")

    def saved_cmdlines(self) -> Dict[int, str]:
        """pid -> comm of the processes whose events the kernel traced (any instance), as it saved them."""
        return parse_saved_cmdlines(self.read_text("saved_cmdlines"))

    def printk_formats(self) -> str:
        """trace_printk's format strings, `0xADDR : "format"` lines ("" where the kernel has none)."""
        if not os.path.exists(self.path("printk_formats")):
            return ""
        return self.read_text("printk_formats")

    def trace_clocks(self) -> List[str]:
        return self.read_text("trace_clock").replace("[", "").replace("]", "").split()

    # ---- uprobe events (dynamic, global to the mount) -------------------------------------------
    def uprobe_events(self) -> List[str]:
        if not os.path.exists(self.path("uprobe_events")):
            raise KernelFeatureError("this kernel has no uprobe events (CONFIG_UPROBE_EVENTS)")
        return [line for line in self.read_text("uprobe_events").splitlines() if line.strip()]

    def add_uprobe_event(self, definition: str) -> None:
        try:
            self.write_text("uprobe_events", definition + "\n", append=True)
        except SourceError as exc:
            log = self.error_log_tail()
            raise SourceError(f"uprobe event {definition.split()[0]!r} refused: {exc}{log}") from exc

    def remove_uprobe_event(self, group: str, name: str) -> None:
        self.write_text("uprobe_events", f"-:{group}/{name}\n", append=True)

    def error_log_tail(self) -> str:
        try:
            lines = self.read_text("error_log").strip().splitlines()
        except SourceError:
            return ""
        return (" (kernel says: " + " ".join(lines[-3:]) + ")") if lines else ""

    # ---- instances -----------------------------------------------------------------------------
    def instance_names(self) -> List[str]:
        try:
            return sorted(os.listdir(self.path("instances")))
        except OSError as exc:
            raise _os_error("cannot list", self.path("instances"), exc) from exc

    def create_instance(self, name: str) -> Instance:
        path = self.path(f"instances/{name}")
        try:
            os.mkdir(path)
        except FileExistsError:
            raise SourceError(f"tracefs instance {name} already exists (another session of this process?)") from None
        except OSError as exc:
            raise _os_error("cannot create tracefs instance", path, exc) from exc
        return Instance(self, name)

    def remove_instance(self, name: str) -> None:
        """rmdir the instance: the kernel disables its events and frees its buffers (open pipes make it EBUSY)."""
        path = self.path(f"instances/{name}")
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _os_error("cannot remove tracefs instance", path, exc) from exc

    def stale_instances(self) -> List[str]:
        """Our instances whose owning process is gone (a crashed or killed run)."""
        stale = []
        for name in self.instance_names():
            m = _INSTANCE_RE.match(name)
            if m and not pid_alive(int(m.group(1))):
                stale.append(name)
        return stale


class Instance:
    """A private tracefs instance: its own ring buffer, event switches, clock and per-CPU pipes."""

    def __init__(self, fs: Tracefs, name: str) -> None:
        self.fs = fs
        self.name = name
        self.rel = f"instances/{name}"

    def _rel(self, rel: str) -> str:
        return f"{self.rel}/{rel}"

    def set_clock(self, clock: str) -> None:
        if clock not in self.fs.trace_clocks():
            raise KernelFeatureError(f"trace clock {clock!r} is not offered by this kernel")
        self.fs.write_text(self._rel("trace_clock"), clock)

    def set_buffer_size_kb(self, kb: int) -> None:
        self.fs.write_text(self._rel("buffer_size_kb"), str(int(kb)))

    def has_option(self, name: str) -> bool:
        return os.path.exists(self.fs.path(self._rel(f"options/{name}")))

    def set_option(self, name: str, on: bool) -> None:
        self.fs.write_text(self._rel(f"options/{name}"), "1" if on else "0")

    def enable_event(self, event: str) -> None:
        system, name = event.split(":", 1)
        self.fs.write_text(self._rel(f"events/{system}/{name}/enable"), "1")

    def set_event_filter(self, event: str, expr: str) -> str:
        """Write the event's filter ("" removes it): "" when the kernel took it, else its reason (it refuses
        what it cannot parse, EINVAL; the event is then not filtered at all)."""
        rel = self._event_file(event, "filter")
        if self.fs.write_refusable(rel, expr or "0"):
            return ""
        reason = filter_error(self.fs.read_text(rel))
        self.fs.write_text(rel, "0")
        return reason

    def event_filter(self, event: str) -> str:
        """The event's filter as the kernel holds it ("none" when unfiltered)."""
        return self.fs.read_text(self._event_file(event, "filter")).strip()

    def add_event_pids(self, pids: List[int]) -> None:
        """Append task ids to set_event_pid: from then on the instance's events fire only in those tasks
        (and, with the event-fork option, in the tasks they create)."""
        if pids:
            self.fs.write_text(self._rel("set_event_pid"), " ".join(map(str, pids)) + "\n", append=True)

    def event_pids(self) -> List[int]:
        text = self.fs.read_text(self._rel("set_event_pid"))
        return sorted(int(word) for word in text.split() if word.isdigit())

    def has_file(self, name: str) -> bool:
        return os.path.exists(self.fs.path(self._rel(name)))

    def _event_file(self, event: str, name: str) -> str:
        system, event_name = event.split(":", 1)
        return self._rel(f"events/{system}/{event_name}/{name}")

    def enabled_events(self) -> List[str]:
        return [line.strip() for line in self.fs.read_text(self._rel("set_event")).splitlines() if line.strip()]

    def tracing_on(self, on: bool) -> None:
        self.fs.write_text(self._rel("tracing_on"), "1" if on else "0")

    def write_marker(self, text: str) -> None:
        self.fs.write_text(self._rel("trace_marker"), text)

    def cpus(self) -> List[int]:
        try:
            names = os.listdir(self.fs.path(self._rel("per_cpu")))
        except OSError as exc:
            raise _os_error("cannot list", self.fs.path(self._rel("per_cpu")), exc) from exc
        return sorted(int(n[3:]) for n in names if n.startswith("cpu") and n[3:].isdigit())

    def open_raw(self, cpu: int) -> int:
        """Non-blocking fd of per_cpu/cpuN/trace_pipe_raw (one ring-buffer page per read)."""
        path = self.fs.path(self._rel(f"per_cpu/cpu{cpu}/trace_pipe_raw"))
        try:
            return os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _os_error("cannot open", path, exc) from exc

    def cpu_stats(self, cpu: int) -> Dict[str, int]:
        return parse_cpu_stats(self.fs.read_text(self._rel(f"per_cpu/cpu{cpu}/stats")))

    def trace_text(self) -> str:
        """The kernel's own text rendering (non-consuming `trace` file)."""
        return self.fs.read_text(self._rel("trace"))


_STAT_RE = re.compile(r"^([a-z ]+):\s*(\d+)\s*$")


def parse_saved_cmdlines(text: str) -> Dict[int, str]:
    """`saved_cmdlines` lines ("<pid> <comm>") -> {pid: comm}; malformed lines are skipped."""
    out: Dict[int, str] = {}
    for line in text.splitlines():
        pid, _, comm = line.partition(" ")
        if pid.isdigit() and comm:
            out[int(pid)] = comm
    return out


def parse_cpu_stats(text: str) -> Dict[str, int]:
    """per_cpu/cpuN/stats -> {"entries": .., "overrun": .., "commit_overrun": .., "dropped_events": .., ...}.

    Lines holding timestamps ("oldest event ts:  12.345") are skipped: only integer counters are kept.
    """
    out: Dict[str, int] = {}
    for line in text.splitlines():
        m = _STAT_RE.match(line.strip())
        if m:
            out[m.group(1).strip().replace(" ", "_")] = int(m.group(2))
    return out


def _write(path: str, text: str, append: bool) -> None:
    # os.open, not open(path, "a"): Python's append mode lseeks to the end, which uprobe_events refuses (EINVAL).
    fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def filter_error(text: str) -> str:
    """The kernel's reason from a `filter` file after a refused write ("parse_error: Field not found")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["refused"])[-1]


def find_optional() -> Optional[Tracefs]:
    """The tracefs mount if one is mounted, without mounting or raising (for doctor)."""
    for root in MOUNT_POINTS:
        if os.path.exists(os.path.join(root, "available_events")):
            return Tracefs(root)
    return None
