"""Device memory: live bytes per device (and over time), the biggest holders, allocation failures with the
free memory and largest free block at that moment (fragmentation hint)."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widgets import Static

from tui.fmt import dev_name, safe, size, spark, stamp
from tui.messages import MemoryView


def memory_text(m: MemoryView) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    if not m.devices and not m.failures:
        t.append("no allocations yet", "dim")
    for dev, live, peak in m.devices:
        t.append(f"{dev_name(dev):6} live {size(live):>9}  peak {size(peak):>9}  ")
        t.append(spark(m.spark.get(dev, []), 24) + "\n", "cyan")
    for dev, pid, comm, live in m.processes[:3]:
        t.append(f"  {dev_name(dev)} {safe(comm)[:16]}-{pid}: {size(live)}\n", "dim")
    for f in m.failures[-3:]:
        d = f.details
        frag = " fragmentation" if d.get("fragmentation") else ""
        t.append(f"{stamp(f.ts_ns)} {dev_name(f.device)} alloc {size(d.get('size'))} FAILED: free "
                 f"{size(d.get('free_bytes'))}, largest {size(d.get('largest_free'))}{frag}\n", "bold red")  # fmt: skip
    t.rstrip()
    return t


class MemoryPanel(Static):
    shown: Optional[MemoryView] = None

    def show(self, m: MemoryView) -> None:
        if m != self.shown:  # an unchanged view is not laid out and rendered again
            self.shown = m
            self.update(memory_text(m), layout=False)  # a fixed height: no layout of the screen
