"""What this host supports for npu-trace, and what to fix.

Each check is a small function of a `Host` (a root directory plus the few facts that are not files),
returning a `Check` value. Tests point `Host.root` at a fake tree; nothing here raises for a missing or
unreadable file.
"""

from __future__ import annotations

import ctypes
import glob
import gzip
import os
import platform
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Tuple

from npu_trace.bpf import abi as hal_abi
from npu_trace.bpf import kernel as bpf_kernel
from npu_trace.detectors.latency import IMPLEMENTATION as SPIKES
from npu_trace.device.irqs import npu_irqs
from npu_trace.device.switches import DRIVER_SYSTEMS
from npu_trace.device.switches import summary as switch_summary
from npu_trace.errors import FormatError, NpuTraceError
from npu_trace.export.handlers import IMPLEMENTATION as HANDLERS
from npu_trace.export.lanes import IMPLEMENTATION as LANES
from npu_trace.export.rows import IMPLEMENTATION as ROWS
from npu_trace.export.texts import IMPLEMENTATION as TEXTS
from npu_trace.export.tracks import FLOWS
from npu_trace.export.wire import IMPLEMENTATION as ASSEMBLER
from npu_trace.ftrace import layouts
from npu_trace.ftrace.filters import int_ranges
from npu_trace.ftrace.tracefs import MOUNT_POINTS, Tracefs, find_optional
from npu_trace.ftrace.walk import IMPLEMENTATION as WALKER
from npu_trace.pipeline.order import IMPLEMENTATION as ORDER
from npu_trace.sim import hal_install
from npu_trace.sources.chip_search import find_chip
from npu_trace.sources.driver_switches import DriverSwitches, SwitchState, state_dir
from npu_trace.sources.hal_search import find_hal
from npu_trace.sources.npu_irqs import read_pci_functions

HUAWEI_PCI_VENDOR = "0x19e5"
# Modules of the Ascend host driver package (910B); the first two carry the trs_chan/trs_core tracepoints.
DRIVER_MODULES = (
    "asdrv_trsbase",
    "asdrv_trs",
    "drv_pcie_host",
    "asdrv_pbl",
    "asdrv_svm",
    "asdrv_dms",
    "asdrv_fms",
    "asdrv_esched",
    "drv_pcie_hdc_host",
    "drv_seclib_host",
    "ascend_kernel_open_adapt",
    "ascend_soc_platform",
    "ts_agent",
)
SIM_SYSTEM = "ascend"
CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39

FIX_SETUP = "run scripts/setup"
# a check that needs tracefs, where there is none to use: the tracefs line says why (not mounted, not readable
# without root, not in the kernel) and its fix
FIX_TRACEFS = "fix the tracefs line first"
FIX_DRIVER = "load the Ascend driver (asdrv_trsbase, asdrv_trs) or use the simulator: npu-trace sim load"


@dataclass(frozen=True)
class Check:
    """One line of the report. `essential` checks decide the exit code; others are informational (`--`)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    essential: bool = False

    @property
    def mark(self) -> str:
        if self.ok:
            return "ok"
        return "!!" if self.essential else "--"


_BCC_PROBE = """
import os, sys
import bcc
print(getattr(bcc, "__version__", "?"))
if os.geteuid() == 0:  # loading needs privilege: without it, the import is all that can be proven
    from npu_trace.bpf.source import compile_check
    from npu_trace.errors import FormatError, NpuTraceError
    try:
        print(compile_check())
    except NpuTraceError as exc:
        print(f"cannot compile: {exc}".splitlines()[0], file=sys.stderr)
        sys.exit(3)
"""


def _probe_bcc() -> Tuple[bool, str]:
    """Import bcc and compile the HAL program (as root) in a child interpreter: bcc is imported by one module
    only, and loading it (and clang) can be slow."""
    try:
        proc = subprocess.run([sys.executable, "-c", _BCC_PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run {sys.executable}: {exc}"
    out = proc.stdout.strip().splitlines()
    if proc.returncode == 0:
        compiled = f"; {out[1]}" if len(out) > 1 else "; not compiled (needs root)"
        return True, f"bcc {out[0] if out else '?'} ({sys.executable}){compiled}"
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return False, f"{lines[-1] if lines else 'import failed'} ({sys.executable})"


_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "arm64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}


def _probe_bpf_syscall() -> Tuple[bool, str]:
    """Create (and close) a one-entry BPF array map: proves the bpf() syscall works for this process."""
    nr = _BPF_SYSCALL.get(platform.machine())
    if nr is None:
        return False, f"unknown bpf syscall number on {platform.machine()}"
    attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, key 4 B, value 4 B, 1 entry
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(nr, 0, ctypes.byref(attr), ctypes.sizeof(attr))  # cmd 0 = BPF_MAP_CREATE
    if fd < 0:
        return False, f"bpf() failed: {os.strerror(ctypes.get_errno())}"
    os.close(fd)
    return True, "bpf() works"


@dataclass
class Host:
    """Where to look. Defaults describe this machine; tests replace any part."""

    root: str = "/"
    release: str = field(default_factory=lambda: os.uname().release)
    euid: int = field(default_factory=os.geteuid)
    which: Callable[[str], Optional[str]] = shutil.which
    bcc_probe: Callable[[], Tuple[bool, str]] = _probe_bcc
    bpf_probe: Callable[[], Tuple[bool, str]] = _probe_bpf_syscall
    state_dir: str = field(default_factory=state_dir)  # where sessions record the driver switches they turned on

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def read(self, rel: str) -> Optional[str]:
        try:
            with open(self.path(rel), errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def glob(self, pattern: str) -> List[str]:
        return sorted(glob.glob(self.path(pattern)))

    def tracefs(self) -> Optional[Tracefs]:
        if self.root == "/":
            return find_optional()
        for mount in MOUNT_POINTS:
            if self.exists(f"{mount}/available_events"):
                return Tracefs(self.path(mount))
        return None


# ---- pure parsers ----------------------------------------------------------------------------------------
def parse_cap_eff(status: str) -> int:
    """The CapEff mask from /proc/<pid>/status text (0 when absent)."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            value = line.split(":", 1)[1].strip()
            return int(value, 16) if all(ch in "0123456789abcdefABCDEF" for ch in value) and value else 0
    return 0


def parse_kconfig(text: str) -> Dict[str, str]:
    """Kernel .config text -> {"CONFIG_X": "y"|"m"|value}; "# CONFIG_X is not set" lines are left out."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def parse_modules(text: str) -> List[str]:
    """Module names from /proc/modules text."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def events_in(available: List[str], systems: Tuple[str, ...]) -> List[str]:
    return [ev for ev in available if ev.split(":", 1)[0] in systems]


# ---- host readers ----------------------------------------------------------------------------------------
def _read_gzip(path: str) -> Optional[str]:
    try:
        with gzip.open(path, "rt", errors="replace") as f:
            return f.read()
    except (OSError, EOFError, zlib.error):
        return None


def kernel_config(host: Host) -> Optional[Dict[str, str]]:
    """The kernel config from /proc/config.gz, else /boot/config-<release>; None when neither reads."""
    text = _read_gzip(host.path("/proc/config.gz"))
    if text is None:
        text = host.read(f"/boot/config-{host.release}")
    return parse_kconfig(text) if text is not None else None


def available_events(fs: Optional[Tracefs]) -> List[str]:
    if fs is None:
        return []
    try:
        return fs.available_events()
    except NpuTraceError:
        return []


# ---- the checks ------------------------------------------------------------------------------------------
def check_privileges(host: Host) -> Check:
    caps = parse_cap_eff(host.read("/proc/self/status") or "")
    names = [n for n, bit in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_BPF", CAP_BPF)) if caps >> bit & 1]
    ok = host.euid == 0 or bool(caps >> CAP_SYS_ADMIN & 1)
    detail = f"euid {host.euid}, capabilities: {', '.join(names) or 'none'}"
    return Check("privileges", ok, detail, "" if ok else "run as root (sudo .venv/bin/npu-trace ...)", True)


def check_tracefs(host: Host, fs: Optional[Tracefs]) -> Check:
    if fs is not None:
        return Check("tracefs", True, f"mounted at {fs.root}", essential=True)
    path = host.path("/sys/kernel/tracing")
    if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
        return Check("tracefs", False, f"{path} not readable", "run as root", True)
    if os.path.isdir(path):
        fix = "mount -t tracefs nodev /sys/kernel/tracing (or run scripts/setup)"
        return Check("tracefs", False, "not mounted", fix, True)
    return Check("tracefs", False, "kernel has no tracefs", "a kernel with CONFIG_FTRACE is needed", True)


def check_trace_clock(fs: Optional[Tracefs]) -> Check:
    if fs is None:
        return Check("trace clock", False, "no tracefs", FIX_TRACEFS)
    try:
        clocks = fs.trace_clocks()
    except NpuTraceError as exc:
        return Check("trace clock", False, str(exc), "run as root")
    detail = "clocks: " + " ".join(clocks)
    return Check("trace clock", "mono" in clocks, detail, "" if "mono" in clocks else "kernel lacks 'mono'")


def check_uprobes(fs: Optional[Tracefs]) -> Check:
    if fs is None:
        return Check("uprobe events", False, "no tracefs", FIX_TRACEFS)
    if os.path.exists(fs.path("uprobe_events")):
        return Check("uprobe events", True, f"{fs.path('uprobe_events')} present")
    return Check("uprobe events", False, "no uprobe_events file", "a kernel with CONFIG_UPROBE_EVENTS is needed")


def check_kprobes(host: Host, fs: Optional[Tracefs]) -> Check:
    has_file = fs is not None and os.path.exists(fs.path("kprobe_events"))
    config = kernel_config(host)
    kconfig = "unknown (no /proc/config.gz or /boot/config)" if config is None else config.get("CONFIG_KPROBES", "n")
    detail = f"kprobe_events {'present' if has_file else 'absent'}, CONFIG_KPROBES={kconfig}"
    fix = "" if has_file else "driver symbols need a kernel with CONFIG_KPROBES; tracepoints and uprobes still work"
    return Check("kprobes", has_file, detail, fix)


def check_bpf(host: Host) -> Check:
    ok, detail = host.bpf_probe()
    flag = (host.read("/proc/sys/kernel/unprivileged_bpf_disabled") or "?").strip()
    fix = "" if ok else "run as root; the kernel needs CONFIG_BPF_SYSCALL"
    return Check("BPF", ok, f"{detail}; unprivileged_bpf_disabled={flag}", fix)


def check_bpf_variant(host: Host) -> Check:
    """Which variant of the BPF programs loads here, and why (npu_trace.bpf.kernel): the running kernel's
    helpers and output map, as /proc/kallsyms lists them (else as its release number says)."""
    try:
        variant = bpf_kernel.detect(host.release, host.path("/proc/kallsyms"))
    except NpuTraceError as exc:  # a release string that is not X.Y...
        return Check("BPF variant", False, str(exc), "npu-trace bpf --compat X.Y names the kernel")
    return Check("BPF variant", True, variant.describe())


def check_btf(host: Host) -> Check:
    ok = host.exists("/sys/kernel/btf/vmlinux")
    return Check("BTF", ok, "/sys/kernel/btf/vmlinux " + ("present" if ok else "absent"), "" if ok else "optional")


def check_headers(host: Host) -> Check:
    build = host.path(f"/lib/modules/{host.release}/build")
    if os.path.exists(build):
        return Check("kernel headers", True, f"{build} -> {os.path.realpath(build)}")
    return Check("kernel headers", False, f"{build} missing (bcc cannot compile)", FIX_SETUP)


def check_bcc(host: Host) -> Check:
    ok, detail = host.bcc_probe()
    if ok:
        return Check("bcc", True, detail)
    fix = f"{FIX_SETUP} and use .venv/bin/npu-trace (bcc needs /usr/bin/python3 with system site-packages)"
    return Check("bcc", False, detail, fix)


def check_pci(host: Host) -> Check:
    found = []
    for vendor_file in host.glob("/sys/bus/pci/devices/*/vendor"):
        slot = os.path.dirname(vendor_file)
        if _read_abs(vendor_file).strip().lower() == HUAWEI_PCI_VENDOR:
            found.append(f"{os.path.basename(slot)} ({_read_abs(os.path.join(slot, 'device')).strip()})")
    if found:
        return Check("Ascend PCI devices", True, ", ".join(found))
    return Check(
        "Ascend PCI devices",
        False,
        f"no PCI vendor {HUAWEI_PCI_VENDOR}",
        "no Ascend card here; the simulator stands in: npu-trace sim load",
    )


def _read_abs(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def check_npu_smi(host: Host) -> Check:
    path = host.which("npu-smi")
    if path:
        return Check("npu-smi", True, path)
    return Check("npu-smi", False, "not on PATH", "install the Ascend driver package (health readings need it)")


def check_hal(host: Host) -> Check:
    """The HAL library --bpf sets its uprobes on: the copies running processes map (containers' own through
    /proc/PID/root), else the driver's install path."""
    found = find_hal(proc=host.path("/proc"), root=host.root)
    stubs = f"; not the toolkit's link stub {found.stubs[0]}" if found.stubs else ""
    if found.files:
        abis, unreadable = hal_abis(found.paths)
        detail = found.describe() + stubs + "; " + abis + _simulated(host, found.paths)
        if unreadable:
            return Check("HAL library", False, detail, "name the real library: --bpf --hal PATH")
        return Check("HAL library", True, detail)
    return Check("HAL library", False, found.describe() + stubs,
                 "install the Ascend driver package, or name the library: --bpf --hal PATH")  # fmt: skip


def _simulated(host: Host, paths: Tuple[str, ...]) -> str:
    """ "; ... is the simulator's" when the install path holds the simulator's library (sim load --hal-abi real)."""
    try:
        mine = hal_install.installed(host.root)
    except NpuTraceError:
        return ""
    if mine is None or mine.path not in paths:
        return ""
    return f"; {mine.path} is the simulator's (npu-trace sim load --hal-abi real; sim unload removes it)"


def check_task_layout(host: Host) -> Check:
    """The chip (PCI device id, else npu-smi's model) and where its HAL task calls carry stream and task ids."""
    found = find_chip(host.which("npu-smi") or "npu-smi", host.path("/sys/bus/pci/devices"))
    if found.layout.known:
        return Check("task layout", True, found.describe())
    return Check("task layout", False, found.describe(), "name the chip: --chip 910|910B|910_93|310P")


def hal_abis(paths: Tuple[str, ...]) -> Tuple[str, bool]:
    """Which ABI --bpf reads each HAL file with (npu_trace.bpf.abi), or why it cannot tell; and whether a file
    could not be read."""
    out, unreadable = [], False
    for path in paths:
        try:
            out.append(f"{hal_abi.describe(hal_abi.detect(path))} for {os.path.basename(path)}")
        except NpuTraceError as exc:
            out.append(f"ABI unknown: {exc}")
            unreadable = True
    return "; ".join(out), unreadable


def check_modules(host: Host) -> Check:
    loaded = set(parse_modules(host.read("/proc/modules") or ""))
    ours = [m for m in DRIVER_MODULES if m in loaded]
    if ours:
        return Check("driver modules", True, " ".join(ours))
    return Check("driver modules", False, "no Ascend driver module loaded", FIX_DRIVER)


def check_trace_switches(host: Host) -> Check:
    """The driver's trace switches, by system and state, and any a killed npu-trace run left on."""
    name = "driver trace switches"
    states = DriverSwitches(root=host.path("/proc"), state=SwitchState(host.state_dir)).states(DRIVER_SYSTEMS)
    try:
        left = SwitchState(host.state_dir).left_by_dead()
    except NpuTraceError as exc:
        return Check(name, False, str(exc), "npu-trace cleanup")
    if left:
        detail = f"{len(left)} left as a killed npu-trace run set them ({left[0]}{', ...' if len(left) > 1 else ''})"
        return Check(name, False, detail, "npu-trace cleanup (every session also does it when it starts)")
    if not states:
        return Check(name, False, "no /proc/trs_chan or /proc/trs_core switches", FIX_DRIVER)
    detail = f"{len(states)}: {switch_summary(states)}"
    unreadable = [s.label for s, value in states if value is None]
    if unreadable:
        return Check(name, False, detail, f"{unreadable[0]} does not read as 0 or 1: is this the Ascend driver?")
    return Check(name, True, detail + " (npu-trace turns on the ones it traces, and puts them back)")


def check_driver_events(events: List[str]) -> Check:
    found = events_in(events, DRIVER_SYSTEMS)
    if found:
        return Check("driver tracepoints", True, f"{len(found)} events: " + " ".join(found))
    return Check("driver tracepoints", False, "no trs_chan:* / trs_core:* events", FIX_DRIVER)


def check_scoping(fs: Optional[Tracefs]) -> Check:
    """What --pid, --comm and --device (and the ascend profile's interrupt scoping) can push into the kernel."""
    if fs is None:
        return Check("kernel scoping", False, "no tracefs", FIX_TRACEFS)
    pids = os.path.exists(fs.path("set_event_pid"))
    fork = os.path.exists(fs.path("options/event-fork"))
    filters = bool(glob.glob(fs.path("events/*/*/filter")))
    process = ("set_event_pid" + (" + event-fork" if fork else " (new tasks not followed)")) if pids else "none"
    where = "per-event filters" if filters else "the pipeline only"
    detail = f"--pid: {process}; --comm, --device, NPU interrupts: {where}"
    fix = "" if pids and filters else "a kernel with CONFIG_EVENT_TRACING (4.4+ for set_event_pid)"
    return Check("kernel scoping", pids and filters, detail, fix)


def check_new_tasks(events: List[str]) -> Check:
    """Whether a session learns which process a thread started during it belongs to (its newtask event)."""
    if "task:task_newtask" in events:
        return Check("threads started later", True, "task:task_newtask: each new thread counted in its process")
    return Check("threads started later", False, "no task:task_newtask: a thread started during a session counts as "
                 "its own process (memory per process; `unattributed_threads` in check's summary)",
                 "a kernel with CONFIG_EVENT_TRACING (task:task_newtask is in every kernel since 3.14)")  # fmt: skip


def check_npu_irqs(host: Host) -> Check:
    """The NPU's interrupts the ascend profile traces (by the driver's IRQ names and the Ascend functions'
    msi_irqs), per device."""
    found = npu_irqs(host.read("/proc/interrupts") or "", read_pci_functions(host.path("/sys/bus/pci/devices")))
    if not found:
        return Check("NPU interrupts", False, "none on this host: --profile ascend traces no interrupt",
                     "load the Ascend driver (drv_pcie_host, asdrv_trs) to trace its interrupts")  # fmt: skip
    per_dev: Dict[str, List[int]] = {}
    for irq in sorted(found):
        per_dev.setdefault("?" if found[irq].dev is None else str(found[irq].dev), []).append(irq)
    detail = "; ".join(f"device {dev}: {_irq_list(irqs)}" for dev, irqs in sorted(per_dev.items()))
    return Check("NPU interrupts", True, detail)


def _irq_list(irqs: List[int]) -> str:
    """ "10 (130-139)": how many, and their runs."""
    runs = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in int_ranges(irqs))
    return f"{len(irqs)} ({runs})"


def check_simulator(events: List[str]) -> Check:
    found = events_in(events, (SIM_SYSTEM,))
    if found:
        return Check("simulator", True, f"{len(found)} {SIM_SYSTEM}:* events loaded")
    return Check("simulator", False, f"no {SIM_SYSTEM}:* events", "npu-trace sim load")


def check_kernel_layout(fs: Optional[Tracefs]) -> Check:
    """The running kernel's ring-buffer layout (page, record header, common fields) against the kernels npu-trace
    is tested on (npu_trace.ftrace.layouts): which it equals, or what in it no tested kernel has."""
    name = "ring-buffer layout"
    if fs is None:
        return Check(name, False, "no tracefs", FIX_TRACEFS)
    try:
        running = layouts.layout_of(fs.header_page(), fs.header_event(), _layout_format(fs))
    except FormatError as exc:
        return Check(name, False, str(exc), "npu-trace cannot read this kernel's tracefs headers: report it")
    except NpuTraceError as exc:
        return Check(name, False, str(exc), "run as root")
    same, differs = layouts.compare(running)
    if same:
        shown = [v for k, v in running.describe().items() if k != "common fields"]
        return Check(name, True, f"as tested on {', '.join(same)}: {'; '.join(shown)}")
    detail = "untested: " + "; ".join(differs)
    if layouts.odd_record_header(running):  # the decoder's record types are fixed: its events would be misread
        return Check(name, False, detail, "the decoder cannot read this kernel's records: report it", True)
    return Check(name, False, detail, "decoding reads the page header from tracefs; please report this kernel")


def _layout_format(fs: Tracefs) -> str:
    """A format with a char field (its sign), ftrace:print's where the kernel lists it."""
    for system, event in (("ftrace", "print"), ("irq", "irq_handler_entry")):
        if fs.has_event_format(system, event):
            return fs.event_format(system, event)
    return fs.event_format("ftrace", "function")


def check_walker(implementation: str = WALKER, order: str = ORDER, spikes: str = SPIKES) -> Check:
    """The page walker of the columnar analysis, its counting sort and the latency detector's scan: compiled, or
    their pure-Python and numpy twins (the same results, slower)."""
    parts = (("_walk", implementation), ("_order", order), ("_spikes", spikes))
    if all(how == "c" for _, how in parts):
        return Check("page walker", True,
                     "compiled (npu_trace.ftrace._walk, npu_trace.pipeline._order, npu_trace.detectors._spikes)")
    missing = ", ".join(name for name, how in parts if how != "c")
    detail = f"pure Python for {missing}: the C extension was not built where npu-trace was installed (same results, " \
             "slower)"
    return Check("page walker", False, detail, "install gcc and python3-dev, then reinstall npu-trace (scripts/setup)")


def check_lines(implementation: str = "") -> Check:
    """The text and NDJSON lines' assembly: compiled, or one %-formatting per line (the same text, slower)."""
    if not implementation:
        from npu_trace.sinks.text import IMPLEMENTATION as implementation
    if implementation == "c":
        return Check("text lines", True, "compiled (npu_trace.sinks._lines)")
    detail = "pure Python: the C extension was not built where npu-trace was installed (same text, slower)"
    return Check("text lines", False, detail, "install gcc and python3-dev, then reinstall npu-trace (scripts/setup)")


def check_assembler(implementation: str = ASSEMBLER, rows: str = ROWS, lanes: str = LANES, texts: str = TEXTS,
                    handlers: str = HANDLERS, flows: str = FLOWS) -> Check:  # fmt: skip
    """The export's compiled parts (the byte assembler, the pieces' rows, the lanes, the strings' distinct values,
    the interrupt handlers' pairing, the flow ids): compiled, or their pure-Python twins (the same files, slower)."""
    parts = {"_wire": implementation, "_rows": rows, "_lanes": lanes, "_texts": texts, "_handlers": handlers,
             "_flows": flows}  # fmt: skip
    if all(how == "c" for how in parts.values()):
        return Check("export assembler", True, f"compiled (npu_trace.export.{', '.join(parts)})")
    missing = ", ".join(name for name, how in parts.items() if how != "c")
    detail = f"pure Python for {missing}: not built where npu-trace was installed (the same results, slower)"
    return Check("export assembler", False, detail, "install gcc and python3-dev, then reinstall npu-trace")


# ---- the report ------------------------------------------------------------------------------------------
def run_checks(host: Optional[Host] = None) -> List[Check]:
    host = host or Host()
    fs = host.tracefs()
    events = available_events(fs)
    checks = [
        check_privileges(host),
        check_tracefs(host, fs),
        check_trace_clock(fs),
        check_uprobes(fs),
        check_driver_events(events),
        check_kprobes(host, fs),
        check_bpf(host),
        check_bpf_variant(host),
        check_btf(host),
        check_headers(host),
        check_bcc(host),
        check_scoping(fs),
        check_new_tasks(events),
        check_pci(host),
        check_npu_irqs(host),
        check_npu_smi(host),
        check_hal(host),
        check_task_layout(host),
        check_modules(host),
        check_trace_switches(host),
        check_simulator(events),
        check_kernel_layout(fs),
        check_walker(),
        check_lines(),
        check_assembler(),
    ]
    return _mark_event_sources(checks)


def _mark_event_sources(checks: List[Check]) -> List[Check]:
    """Uprobes or the driver's tracepoints: one is essential. With neither, both are flagged `!!`."""
    sources = ("uprobe events", "driver tracepoints")
    if any(c.ok for c in checks if c.name in sources):
        return checks
    return [replace(c, essential=True) if c.name in sources else c for c in checks]


def essentials_ok(checks: List[Check]) -> bool:
    by_name = {c.name: c for c in checks}
    sources = [by_name[n].ok for n in ("uprobe events", "driver tracepoints") if n in by_name]
    return all(c.ok for c in checks if c.essential) and any(sources)


def format_text(checks: List[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.mark}  {c.name:<{width}}  {c.detail}")
        if c.fix and not c.ok:
            lines.append(f"    {'':<{width}}  fix: {c.fix}")
    return "\n".join(lines)


def to_json_obj(checks: List[Check], exit_code: int, release: str) -> Dict[str, object]:
    return {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "kernel": release,
        "checks": [
            {
                "name": c.name,
                "status": c.mark,
                "ok": c.ok,
                "essential": c.essential,
                "detail": c.detail,
                "fix": c.fix,
            }
            for c in checks
        ],
    }
