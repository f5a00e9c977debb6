"""Per-device lanes: state, event rate, last error and a sparkline of call latency."""

from __future__ import annotations

from typing import List, Optional

from rich.text import Text
from textual.widgets import Static

from tui.fmt import STATE_STYLE, dev_name, dur, safe, spark
from tui.messages import DeviceState


def lanes_text(devices: List[DeviceState]) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    if not devices:
        t.append("no device events yet", "dim")
    for i, d in enumerate(devices):
        if i:
            t.append("\n")
        t.append(f"{dev_name(d.dev):6}", "bold")
        t.append(f"{d.state:^11}", f"reverse {STATE_STYLE.get(d.state, '')}")
        t.append(f" {d.rate:>9,.0f} ev/s  lat ")
        t.append(f"{spark(d.spark, 24):24}", "cyan")
        t.append(f" max {dur(max(d.spark[-10:], default=0)):>9}  ")
        t.append(safe(d.last_error) if d.last_error else "no errors", "red" if d.last_error else "dim")
    return t


class Lanes(Static):
    shown: Optional[List[DeviceState]] = None

    def show(self, devices: List[DeviceState]) -> None:
        if devices != self.shown:  # an unchanged view is not rendered again
            resized = self.shown is None or len(devices) != len(self.shown)  # a line per device: its height
            self.shown = devices
            self.update(lanes_text(devices), layout=resized)
