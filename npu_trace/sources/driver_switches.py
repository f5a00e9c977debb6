"""Turning the Ascend driver's trace switches on for a session, and putting them back on every exit path.

The driver's five tracepoints emit nothing while their procfs switch is off (`npu_trace.device.switches`). A
session that traces them turns on the switches of the traced devices (`turn_on`), turns on the ones a hot reset
re-creates while it runs (`refresh`: a re-probed device starts with its switches off), and puts back the value
each had before (`restore`).

What a session changed is kept in one state file per host (`/run/npu-trace/driver-switches.json`, on tmpfs: a
reboot resets the driver and the file together), written under a lock and replaced atomically, *before* a switch is
written. Concurrent sessions share it: each switch remembers the value found by the first session that turned it on
and the sessions holding it; the last holder to leave puts the value back, so one session ending never silences
another. A holder is a (pid, start time) pair, so a reused pid is not taken for the dead run. A run killed with
SIGKILL leaves its entries: `restore_stale` (called when the next session starts, and by `npu-trace cleanup`)
drops the holders that are gone and restores what no live session holds any more.

`NPU_TRACE_PROCFS` points at another procfs root (tests lay out a fake driver tree), `NPU_TRACE_STATE_DIR` at
another state directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from npu_trace.device.switches import ON, SWITCH_GLOBS, Switch, parse_value, switch_of, wanted, write_text
from npu_trace.errors import SourceError

PROCFS_ENV = "NPU_TRACE_PROCFS"
STATE_ENV = "NPU_TRACE_STATE_DIR"
DEFAULT_STATE_DIR = "/run/npu-trace"
STATE_FILE = "driver-switches.json"
LOCK_FILE = "driver-switches.lock"
STATE_VERSION = 1
MAX_STATE_BYTES = 1 << 20
REFRESH_S = 1.0  # how often a running session looks for switches a reset re-created


def procfs_root() -> str:
    return os.environ.get(PROCFS_ENV) or "/proc"


def state_dir() -> str:
    return os.environ.get(STATE_ENV) or DEFAULT_STATE_DIR


# ---- who holds a switch ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Owner:
    """A process, told apart from a later one with the same pid by its start time (/proc/<pid>/stat)."""

    pid: int
    start: int

    def alive(self) -> bool:
        stat = _stat_fields(self.pid)
        return stat is not None and stat[0] not in ("Z", "X") and int(stat[19]) == self.start

    def to_json(self) -> List[int]:
        return [self.pid, self.start]

    @classmethod
    def of(cls, pid: int) -> Optional[Owner]:
        """The process `pid` is now; None when there is none."""
        stat = _stat_fields(pid)
        return cls(pid, int(stat[19])) if stat is not None else None


def this_process() -> Owner:
    return Owner.of(os.getpid()) or Owner(os.getpid(), 0)


def _stat_fields(pid: int) -> Optional[List[str]]:
    """/proc/<pid>/stat after the command name: [state, ppid, ...] (field 3 onwards; start time is field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 1 :].split()
    return fields if len(fields) > 19 else None


def _owner_of(item: Any) -> Optional[Owner]:
    if isinstance(item, list) and len(item) == 2 and all(isinstance(v, int) for v in item):
        return Owner(item[0], item[1])
    return None


# ---- the state file ----------------------------------------------------------------------------------------
class Locked:
    """The state file's content while its lock is held: {absolute path: {"saved": "0"|"1", "holders": [...]}}."""

    def __init__(self, path: str, switches: Dict[str, Dict[str, Any]]) -> None:
        self.path = path
        self.switches = switches

    def holders(self, path: str) -> List[Owner]:
        entry = self.switches.get(path, {})
        return [o for o in map(_owner_of, entry.get("holders", [])) if o is not None]

    def set_holders(self, path: str, holders: Sequence[Owner]) -> None:
        if holders:
            self.switches[path]["holders"] = [o.to_json() for o in holders]
        else:
            self.switches.pop(path, None)

    def save(self) -> None:
        """Replace the file atomically (a SIGKILL leaves the old or the new one whole); none when empty."""
        if not self.switches:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        body = json.dumps({"version": STATE_VERSION, "switches": self.switches}, indent=1, sort_keys=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


class SwitchState:
    """The host's record of the switches npu-trace sessions turned on (see the module's docstring)."""

    def __init__(self, directory: Optional[str] = None) -> None:
        self.directory = directory or state_dir()
        self.path = os.path.join(self.directory, STATE_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    @contextlib.contextmanager
    def locked(self, create: bool = True) -> Iterator[Optional[Locked]]:
        """The content under an exclusive lock; None when there is no state directory and `create` is off."""
        if not create and not os.path.isdir(self.directory):
            yield None
            return
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd = os.open(os.path.join(self.directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise SourceError(f"cannot use the switch state directory {self.directory}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield Locked(self.path, self.read())
        finally:
            os.close(fd)

    def read(self) -> Dict[str, Dict[str, Any]]:
        """The switches recorded (without the lock: doctor's view); {} when there is no file."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SourceError(f"cannot read the switch state {self.path}: {exc.strerror}") from exc
        try:
            data = json.loads(raw) if len(raw) <= MAX_STATE_BYTES else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(
            data.get("switches"), dict
        ):
            raise SourceError(f"the switch state {self.path} is not npu-trace's (or is damaged): check the switches "
                              "(npu-trace doctor lists them), then remove it")  # fmt: skip
        return {p: e for p, e in data["switches"].items() if isinstance(e, dict) and parse_value(str(e.get("saved")))}

    def left_by_dead(self) -> List[str]:
        """Paths of recorded switches that no live process holds any more (doctor)."""
        out = []
        for path, entry in self.read().items():
            owners = [o for o in map(_owner_of, entry.get("holders", [])) if o is not None]
            if not any(o.alive() for o in owners):
                out.append(path)
        return sorted(out)


# ---- reading and writing a switch --------------------------------------------------------------------------
def read_switch(path: str) -> Optional[str]:
    """ "0" or "1"; None when it is gone or does not read as either."""
    try:
        with open(path) as f:
            return parse_value(f.read(16))
    except OSError:
        return None


def write_switch(path: str, value: str) -> str:
    """Write "0" or "1" (the two bytes the driver takes); "" when written, else why not."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        return _why(exc)
    try:
        written = os.write(fd, write_text(value).encode())
    except OSError as exc:
        return _why(exc)
    finally:
        os.close(fd)
    return "" if written == len(ON) else f"short write ({written} bytes)"


def _why(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (root is needed, and the device must belong to this container)"
    if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
        return "gone (the device was removed)"
    if exc.errno == errno.EINVAL:
        return "refused by the driver (EINVAL)"
    return exc.strerror or str(exc)


# ---- a session's switches ----------------------------------------------------------------------------------
@dataclass
class SwitchReport:
    """What turn_on/refresh did: switches turned on, found on already, and those that could not be turned on."""

    turned_on: List[Switch] = field(default_factory=list)
    already_on: List[Switch] = field(default_factory=list)
    failed: List[Tuple[Switch, str]] = field(default_factory=list)

    @property
    def held(self) -> List[Switch]:
        return sorted(self.turned_on + self.already_on)


class DriverSwitches:
    """The switches one session holds. `turn_on` once the session is set up, `refresh` while it runs,
    `restore` on every exit path (idempotent)."""

    def __init__(self, root: Optional[str] = None, state: Optional[SwitchState] = None,
                 owner: Optional[Owner] = None) -> None:  # fmt: skip
        self.root = root or procfs_root()
        self.state = state or SwitchState()
        self.owner = owner or this_process()
        self.systems: Tuple[str, ...] = ()
        self.devices: Tuple[int, ...] = ()
        self.held: Dict[str, Switch] = {}  # absolute path -> switch
        self.refreshed = 0  # switches turned on again or anew after turn_on (re-created by a reset)
        self._checked = 0.0

    def path(self, switch: Switch) -> str:
        return os.path.join(self.root, switch.rel)

    def present(self, systems: Sequence[str], devices: Sequence[int] = ()) -> Tuple[Switch, ...]:
        """The switches of `systems` (and `devices`, when named) on this host."""
        found = []
        for system in systems:
            for path in glob.glob(os.path.join(self.root, SWITCH_GLOBS[system])):
                switch = switch_of(os.path.relpath(path, self.root))
                if switch is not None:
                    found.append(switch)
        return wanted(found, systems, devices)

    def states(self, systems: Sequence[str]) -> List[Tuple[Switch, Optional[str]]]:
        return [(s, read_switch(self.path(s))) for s in self.present(systems)]

    def turn_on(self, systems: Sequence[str], devices: Sequence[int] = ()) -> SwitchReport:
        """Turn on every switch of `systems` for `devices` (all when none), recording each first."""
        self.systems, self.devices = tuple(systems), tuple(devices)
        self._checked = time.monotonic()
        return self._take(self.present(self.systems, self.devices))

    def refresh(self, now: Optional[float] = None) -> SwitchReport:
        """At most every REFRESH_S: turn on the switches that appeared, or that read off again, since (a hot
        reset removes a device and its switches; the re-probed device starts with them off)."""
        now = time.monotonic() if now is None else now
        if not self.systems or now - self._checked < REFRESH_S:
            return SwitchReport()
        self._checked = now
        todo = [s for s in self.present(self.systems, self.devices)
                if self.path(s) not in self.held or read_switch(self.path(s)) == "0"]  # fmt: skip
        report = self._take(todo) if todo else SwitchReport()
        self.refreshed += len(report.turned_on)
        return report

    def _take(self, switches: Sequence[Switch]) -> SwitchReport:
        report = SwitchReport()
        if not switches:
            return report
        with self.state.locked() as st:
            assert st is not None
            found = {s: read_switch(self.path(s)) for s in switches}
            for switch, value in found.items():
                self._record(st, switch, value)
            st.save()  # before any switch is written: a SIGKILL from here on leaves what to put back
            for switch, value in found.items():
                self._switch_on(st, switch, value, report)
            st.save()
        return report

    def _record(self, st: Locked, switch: Switch, value: Optional[str]) -> None:
        path = self.path(switch)
        if value is None:
            return
        st.switches.setdefault(path, {"saved": value, "holders": []})
        holders = [o for o in st.holders(path) if o != self.owner]
        st.set_holders(path, [*holders, self.owner])

    def _switch_on(self, st: Locked, switch: Switch, value: Optional[str], report: SwitchReport) -> None:
        path = self.path(switch)
        why = "does not read as 0 or 1" if value is None else ("" if value == "1" else write_switch(path, "1"))
        if why:
            report.failed.append((switch, why))
            st.set_holders(path, [o for o in st.holders(path) if o != self.owner])
            return
        self.held[path] = switch
        (report.already_on if value == "1" else report.turned_on).append(switch)

    def restore(self) -> List[str]:
        """Leave every switch this session holds; the last holder puts back the saved value. Returns what could
        not be restored (kept in the state file: `npu-trace cleanup` retries)."""
        if not self.held:
            return []
        with self.state.locked() as st:
            assert st is not None
            _, problems = _release(st, set(self.held), lambda o: o == self.owner)
            st.save()
        self.held.clear()
        return problems

    def restore_stale(self) -> Tuple[List[str], List[str]]:
        """Put back what killed runs left (see `restore_stale`)."""
        return restore_stale(self.state)


def restore_stale(state: Optional[SwitchState] = None) -> Tuple[List[str], List[str]]:
    """Drop the dead holders of every recorded switch and restore those no live session holds (the next
    session's start and `npu-trace cleanup`): (one line per switch restored, one per switch that could not be)."""
    state = state or SwitchState()
    if not state.exists():
        return [], []
    with state.locked(create=False) as st:
        if st is None:
            return [], []
        restored, problems = _release(st, set(st.switches), lambda o: not o.alive())
        st.save()
    return restored, problems


def _release(st: Locked, paths: Set[str], gone: Callable[[Owner], bool]) -> Tuple[List[str], List[str]]:
    """Remove the holders `gone` selects from `paths`; a switch left without holders gets its saved value back
    (and leaves the file) unless that write fails. Returns (what was restored, what could not be)."""
    restored, problems = [], []
    for path in sorted(paths & set(st.switches)):
        before = st.holders(path)
        left = [o for o in before if not gone(o)]
        if left:
            st.set_holders(path, left)
            continue
        saved = st.switches[path]["saved"]
        why = "" if read_switch(path) == saved else write_switch(path, saved)
        if why and not why.startswith("gone"):  # gone with its device: the driver's default comes back with it
            problems.append(f"driver trace switch {path} could not be put back to {saved}: {why}")
            continue
        st.set_holders(path, [])
        pids = ", ".join(str(o.pid) for o in before)
        restored.append(f"restored driver trace switch {path} to {saved} (left by pid {pids})")
    return restored, problems
