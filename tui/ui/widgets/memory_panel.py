"""Device memory: live bytes per device (and over time), the biggest holders, allocation failures with the
free memory and largest free block at that moment (fragmentation hint); what npu-smi says each chip uses, and
where its accounting and the traced bytes disagree (detectors.accounting)."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widgets import Static

from tui.fmt import dev_name, safe, size, spark, stamp
from tui.messages import Finding, MemoryView


def memory_text(m: MemoryView) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    if not m.devices and not m.failures:
        t.append("no allocations yet", "dim")
    for dev, live, peak in m.devices:
        t.append(f"{dev_name(dev):6} live {size(live):>9}  peak {size(peak):>9}  ")
        t.append(spark(m.spark.get(dev, []), 24) + "\n", "cyan")
    for dev, pid, comm, live in m.processes[:3]:
        t.append(f"  {dev_name(dev)} {safe(comm)[:16]}-{pid}: {size(live)}\n", "dim")
    for chip_dev, npu, chip, used, total in m.chips[:8]:
        t.append(f"  npu-smi {npu}/{chip} ({dev_name(chip_dev)}): used {used} / {total} MB\n", "dim")
    for f in m.accounting[-3:]:
        t.append(accounting_line(f) + "\n", "bold yellow")
    for f in m.failures[-3:]:
        d = f.details
        frag = " fragmentation" if d.get("fragmentation") else ""
        t.append(f"{stamp(f.ts_ns)} {dev_name(f.device)} alloc {size(d.get('size'))} FAILED: free "
                 f"{size(d.get('free_bytes'))}, largest {size(d.get('largest_free'))}{frag}\n", "bold red")  # fmt: skip
    t.rstrip()
    return t


def accounting_line(f: Finding) -> str:
    d = f.details
    where = f"{stamp(f.ts_ns)} {dev_name(f.device)}"
    if f.kind == "alloc_fail_explained":
        return (f"{where} alloc {size(d.get('size'))} failed with {size(d.get('npu_smi_free_bytes'))} free in "
                f"npu-smi: {d.get('explanation')}")  # fmt: skip
    pids = ",".join(str(p.get("pid")) for p in d.get("processes", [])[:4])
    return (f"{where} accounting {d.get('reason')}: used {d.get('used_mb')} MB, processes "
            f"{d.get('process_sum_mb')} MB, traced {d.get('traced_mb')} MB (pids {pids})")  # fmt: skip


class MemoryPanel(Static):
    shown: Optional[MemoryView] = None

    def show(self, m: MemoryView) -> None:
        if m != self.shown:  # an unchanged view is not laid out and rendered again
            self.shown = m
            self.update(memory_text(m), layout=False)  # a fixed height: no layout of the screen
