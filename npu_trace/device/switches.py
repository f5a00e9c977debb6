"""The Ascend driver's own trace switches, as data: where they are, what they gate, how they read and write.

The driver checks a per-(device, TS) procfs switch before each of its five tracepoints, and every switch starts
off (hicann/driver `trs_chan_trace_is_enabled()`, `chan_ts_inst.h:116`; `trs_core_trace_is_enabled()`,
`trs_ts_inst.h:120`), so the `trs_chan:*` and `trs_core:*` events emit nothing until it is on:

- `/proc/trs_chan/dev<D>-ts<T>/trace_enable` gates `trs_chan:{sqe,cqe,recv}` (`trsbase/chan/chan_proc_fs.c`)
- `/proc/trs_core/ts_inst/dev<D>-ts<T>/trace_enable` gates `trs_core:{logic_cqe,logic_cq_recv}`
  (`trs/trs_core/trs_proc_fs.c`)

`D` is the device id the tracepoints carry (`inst.devid`, what `--device` selects), `T` the task scheduler.
A write must be exactly two bytes ("1\\n": `count != sizeof(ch)` is EINVAL); the files are mode 0444 (root
writes through DAC override) and the driver refuses a device outside the writer's container namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Sequence, Tuple

# system -> the glob of its switches, relative to the procfs root
SWITCH_GLOBS: Dict[str, str] = {
    "trs_chan": "trs_chan/dev*-ts*/trace_enable",
    "trs_core": "trs_core/ts_inst/dev*-ts*/trace_enable",
}
DRIVER_SYSTEMS: Tuple[str, ...] = tuple(SWITCH_GLOBS)
# the driver's tracepoints, each gated by its system's switches (chan_trace_event.h, trs_core_trace_event.h)
DRIVER_EVENTS: Tuple[str, ...] = (
    "trs_chan:sqe", "trs_chan:cqe", "trs_chan:recv", "trs_core:logic_cqe", "trs_core:logic_cq_recv",
)  # fmt: skip
ON = "1\n"  # exactly two bytes
_SWITCH_RES = {
    system: re.compile("^" + re.escape(glob).replace(re.escape("dev*-ts*"), r"dev(\d+)-ts(\d+)") + "$")
    for system, glob in SWITCH_GLOBS.items()
}


@dataclass(frozen=True, order=True)
class Switch:
    """One switch: its system, device and TS, and its path relative to the procfs root."""

    system: str
    dev: int
    ts: int
    rel: str

    @property
    def label(self) -> str:
        return f"{self.system} dev{self.dev}-ts{self.ts}"


def switch_of(rel: str) -> Optional[Switch]:
    """The switch at `rel` (relative to the procfs root), None when it is not one of the driver's."""
    rel = rel.strip("/")
    for system, pattern in _SWITCH_RES.items():
        m = pattern.match(rel)
        if m:
            return Switch(system, int(m.group(1)), int(m.group(2)), rel)
    return None


def parse_value(text: str) -> Optional[str]:
    """ "0" or "1" from a switch's text (the driver prints the flag and a newline); None for anything else."""
    value = text.strip()
    return value if value in ("0", "1") else None


def write_text(value: str) -> str:
    """The two bytes that set a switch to `value` ("0" or "1")."""
    if value not in ("0", "1"):
        raise ValueError(f"a driver trace switch is 0 or 1, not {value!r}")
    return value + "\n"


def wanted(switches: Iterable[Switch], systems: Sequence[str], devices: Sequence[int] = ()) -> Tuple[Switch, ...]:
    """The switches of `systems`, of `devices` only when any are named; sorted."""
    return tuple(sorted(s for s in switches if s.system in systems and (not devices or s.dev in devices)))


def summary(states: Iterable[Tuple[Switch, Optional[str]]]) -> str:
    """ "trs_chan: on dev0-ts0 dev1-ts0, off dev2-ts0; trs_core: on dev0-ts0": each system's switches by state
    ("?" for one that does not read as 0 or 1)."""
    by_system: Dict[str, Dict[str, list]] = {}
    for switch, value in sorted(states, key=lambda sv: sv[0]):
        state = {"1": "on", "0": "off"}.get(value or "", "unreadable")
        by_system.setdefault(switch.system, {}).setdefault(state, []).append(f"dev{switch.dev}-ts{switch.ts}")
    parts = []
    for system, states_of in by_system.items():
        listed = ", ".join(f"{state} {' '.join(names)}" for state, names in sorted(states_of.items(), key=_on_first))
        parts.append(f"{system}: {listed}")
    return "; ".join(parts)


def _on_first(item: Tuple[str, list]) -> int:
    return ("on", "off", "unreadable").index(item[0])
