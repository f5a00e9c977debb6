"""Who wrote a recording, and how far its wall clock could be from true time: the header's `host_identity` and
`clock_sync` entries (docs/recording-format.md), read when a file is started.

- identity: the hostname, `/etc/machine-id` (systemd's, else D-Bus's `/var/lib/dbus/machine-id`) and the boot id
  (`/proc/sys/kernel/random/boot_id`: one per boot, so two recordings of one host across a reboot are told apart,
  and their CLOCK_MONOTONIC anchors are never compared as one clock).
- clock sync: the kernel's NTP state by `adjtimex(2)` called read-only through ctypes (`modes` 0): its maximum and
  estimated error (µs), the status word (STA_UNSYNC: no daemon disciplines the clock) and the clock state
  (TIME_ERROR: unsynchronized); chrony's own view where `chronyc` answers (`chronyc -c tracking`: the system
  clock's offset, root delay and dispersion); a PTP daemon's where `pmc` answers (linuxptp's
  `GET TIME_STATUS_NP`: `master_offset`). `error_ns` is the bound used to align hosts: chrony's
  |offset| + root delay / 2 + root dispersion when chrony answers, else the kernel's maximum error when the
  kernel says the clock is synchronized, else None (unknown: the cluster view assumes a default and says so).

The parsers are pure (text or numbers in, a map out); the readers around them never fail a recording: what
cannot be read is left out (and a tool that does not answer within `TOOL_TIMEOUT_S` is not waited for). The
tools' answers are kept for `CACHE_S`: a flight recorder opening dumps and a rotating recorder do not run them
for every file.

`SimulatedHost`: the simulator's cluster (`npu-trace sim cluster`) gives each simulated host its own identity,
a wall clock off by a known offset and a declared uncertainty; the header then says `source: "simulated"`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from npu_trace.errors import InputError

TOOL_TIMEOUT_S = 1.0
CACHE_S = 60.0
STA_UNSYNC = 0x0040
TIME_ERROR = 5
CLOCK_STATES = ("ok", "insert_leap", "delete_leap", "leap_in_progress", "leap_wait", "error")
MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# ---- identity --------------------------------------------------------------------------------------------
def read_identity(machine_ids: Tuple[str, ...] = MACHINE_ID_PATHS, boot_id: str = BOOT_ID_PATH) -> Dict[str, Any]:
    """This host's identity: hostname, machine id, boot id ("" for what cannot be read)."""
    machine = next((v for v in map(_first_line, machine_ids) if _HEX32.match(v)), "")
    boot = _first_line(boot_id)
    return {"hostname": socket.gethostname(), "machine_id": machine, "boot_id": boot if _UUID.match(boot) else "",
            "source": "host"}  # fmt: skip


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline(256).strip().lower()
    except OSError:
        return ""


# ---- adjtimex --------------------------------------------------------------------------------------------
class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timex(ctypes.Structure):
    """struct timex (include/uapi/linux/timex.h), as glibc's adjtimex takes it."""

    _fields_ = [
        ("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
        ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
        ("time", _Timeval), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int), ("_pad", ctypes.c_int * 11),
    ]  # fmt: skip


def adjtimex_state(maxerror_us: int, esterror_us: int, status: int, state: int) -> Dict[str, Any]:
    """The kernel's NTP state as the header keeps it."""
    synced = state != TIME_ERROR and not status & STA_UNSYNC
    name = CLOCK_STATES[state] if 0 <= state < len(CLOCK_STATES) else str(state)
    return {"maxerror_us": maxerror_us, "esterror_us": esterror_us, "status": status, "state": name,
            "synchronized": synced}  # fmt: skip


def read_adjtimex() -> Optional[Dict[str, Any]]:
    """adjtimex(2) read-only (modes 0); None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    return adjtimex_state(int(tx.maxerror), int(tx.esterror), int(tx.status), int(state))


# ---- chrony and PTP --------------------------------------------------------------------------------------
def parse_chrony_tracking(text: str) -> Optional[Dict[str, Any]]:
    """`chronyc -c tracking` (one CSV line: reference id, name, stratum, reference time, system time offset (s),
    last offset, RMS offset, frequency, residual frequency, skew, root delay (s), root dispersion (s), update
    interval, leap status) -> offset, root delay and dispersion in ns; None when it is not that line."""
    fields = text.strip().split("\n")[0].split(",")
    if len(fields) < 14:
        return None
    try:
        offset, delay, dispersion = (float(fields[i]) for i in (4, 10, 11))
        stratum = int(fields[2])
    except ValueError:
        return None
    leap = fields[13].strip()
    return {"offset_ns": round(offset * 1e9), "root_delay_ns": round(delay * 1e9),
            "root_dispersion_ns": round(dispersion * 1e9), "stratum": stratum, "leap": leap,
            "synchronized": leap.lower() != "not synchronised" and stratum < 16}  # fmt: skip


_MASTER_OFFSET = re.compile(r"^\s*master_offset\s+(-?\d+)\s*$", re.M)
_GM_PRESENT = re.compile(r"^\s*gmPresent\s+(true|false)\s*$", re.M)


def parse_pmc_time_status(text: str) -> Optional[Dict[str, Any]]:
    """linuxptp's `pmc -u -b 0 'GET TIME_STATUS_NP'` -> the offset from the grandmaster (ns); None without one."""
    m = _MASTER_OFFSET.search(text)
    if not m:
        return None
    gm = _GM_PRESENT.search(text)
    return {"master_offset_ns": int(m.group(1)), "gm_present": gm is not None and gm.group(1) == "true"}


def _tool(argv: List[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def error_bound(adjtimex: Optional[Dict[str, Any]], chrony: Optional[Dict[str, Any]]) -> Optional[int]:
    """How far the wall clock may be from true time (ns), by the best source that says it; None: unknown."""
    if chrony is not None and chrony["synchronized"]:
        return abs(chrony["offset_ns"]) + chrony["root_delay_ns"] // 2 + chrony["root_dispersion_ns"]
    if adjtimex is not None and adjtimex["synchronized"] and adjtimex["maxerror_us"] >= 0:
        return int(adjtimex["maxerror_us"]) * 1000
    return None


def read_clock_sync() -> Dict[str, Any]:
    """This host's clock-sync state now (see the module docstring)."""
    adj = read_adjtimex()
    chrony = parse_chrony_tracking(_tool(["chronyc", "-c", "tracking"]))
    ptp = parse_pmc_time_status(_tool(["pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"]))
    out: Dict[str, Any] = {"source": "host", "error_ns": error_bound(adj, chrony)}
    for key, value in (("adjtimex", adj), ("chrony", chrony), ("ptp", ptp)):
        if value is not None:
            out[key] = value
    return out


# ---- what a header holds ----------------------------------------------------------------------------------
class _Cache:
    def __init__(self) -> None:
        self.at = -CACHE_S
        self.value: Dict[str, Any] = {}

    def get(self) -> Dict[str, Any]:
        now = time.monotonic()
        if now - self.at >= CACHE_S:
            self.value, self.at = read_clock_sync(), now
        return dict(self.value)


_CLOCK = _Cache()


def this_host() -> Dict[str, Any]:
    """The header entries of this host: {"host_identity": ..., "clock_sync": ...}."""
    return {"host_identity": read_identity(), "clock_sync": _CLOCK.get()}


@dataclass(frozen=True)
class SimulatedHost:
    """A simulated host of `npu-trace sim cluster`: its identity, its wall clock's offset from this host's (what a
    badly synchronized host's clock would be off by) and the uncertainty it declares."""

    hostname: str
    machine_id: str
    boot_id: str
    offset_ns: int
    error_ns: int

    def header(self) -> Dict[str, Any]:
        identity = {"hostname": self.hostname, "machine_id": self.machine_id, "boot_id": self.boot_id,
                    "source": "simulated"}  # fmt: skip
        return {"host_identity": identity, "clock_sync": {"source": "simulated", "error_ns": self.error_ns}}

    def anchor(self, anchor: Dict[str, int]) -> Dict[str, int]:
        """The clock anchor as this host's clock would read it: its wall clock off by `offset_ns`."""
        return {**anchor, "realtime_ns": anchor["realtime_ns"] + self.offset_ns}

    def to_json(self) -> Dict[str, Any]:
        return {"hostname": self.hostname, "machine_id": self.machine_id, "boot_id": self.boot_id,
                "offset_ns": self.offset_ns, "error_ns": self.error_ns}  # fmt: skip


def load_simulated(path: str) -> SimulatedHost:
    """A SimulatedHost from its JSON file; an InputError naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise InputError(f"--sim-host {path}: cannot read it ({exc})") from None
    want = {"hostname": str, "machine_id": str, "boot_id": str, "offset_ns": int, "error_ns": int}
    if not isinstance(data, dict) or any(not isinstance(data.get(k), t) or isinstance(data.get(k), bool)
                                         for k, t in want.items()):  # fmt: skip
        raise InputError(f"--sim-host {path}: a map of {', '.join(want)} (strings and integers) is expected")
    return SimulatedHost(**{k: data[k] for k in want})
