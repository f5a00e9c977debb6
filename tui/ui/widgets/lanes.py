"""Per-device lanes: state, event rate, last error and a sparkline of call latency."""

from __future__ import annotations

from collections import Counter
from typing import List, Optional, Tuple

from rich.text import Text
from textual.widgets import Static

from tui.fmt import STATE_STYLE, dev_name, dur, safe, spark
from tui.messages import DeviceState

ROOM = 8  # lines the panel shows (its max-height, tui.ui.app, less its border)


def lanes_text(devices: List[DeviceState], room: int = ROOM) -> Text:
    """A line per device; more devices than the panel's `room`: those not ok first (a reset on the 16th of 16
    NPUs must show), the rest by number, and a last line that says how many are left out and their states."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if not devices:
        t.append("no device events yet", "dim")
    shown, hidden = _fitted(devices, room)
    for i, d in enumerate(shown):
        if i:
            t.append("\n")
        t.append(f"{dev_name(d.dev):6}", "bold")
        t.append(f"{d.state:^11}", f"reverse {STATE_STYLE.get(d.state, '')}")
        t.append(f" {d.rate:>9,.0f} ev/s  lat ")
        t.append(f"{spark(d.spark, 24):24}", "cyan")
        t.append(f" max {dur(max(d.spark[-10:], default=0)):>9}  ")
        t.append(safe(d.last_error) if d.last_error else "no errors", "red" if d.last_error else "dim")
    if hidden:
        states = Counter(d.state for d in hidden)
        t.append(f"\n+{len(hidden)} more devices: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items())),
                 "dim" if set(states) == {"ok"} else "bold")  # fmt: skip
    return t


def _fitted(devices: List[DeviceState], room: int) -> Tuple[List[DeviceState], List[DeviceState]]:
    """(the devices shown, in their order; those left out): all, when they fit."""
    if len(devices) <= room:
        return devices, []
    ranked = sorted(range(len(devices)), key=lambda i: (devices[i].state == "ok", i))
    keep = set(ranked[: room - 1])  # a line for the rest
    return [d for i, d in enumerate(devices) if i in keep], [d for i, d in enumerate(devices) if i not in keep]


class Lanes(Static):
    shown: Optional[List[DeviceState]] = None

    def show(self, devices: List[DeviceState]) -> None:
        if devices != self.shown:  # an unchanged view is not rendered again
            resized = self.shown is None or min(len(devices), ROOM) != min(len(self.shown), ROOM)  # its height
            self.shown = devices
            self.update(lanes_text(devices), layout=resized)
