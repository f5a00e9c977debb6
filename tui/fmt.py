"""Formatting for the views. Untrusted strings (process names, field strings, kernel messages) only ever
enter `rich.text.Text` as plain text, after `safe_text` (control characters escaped): never markup."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from rich.text import Text

from npu_trace.sinks.text import safe_text
from tui.model import LogRow

BARS = "▁▂▃▄▅▆▇█"
KIND_STYLE: Dict[str, str] = {
    "timeout": "bold red", "alloc_fail": "bold red", "reset_step": "bold magenta", "lost": "bold red",
    "ecc": "yellow", "marker": "bold cyan", "irq": "dim", "log": "dim",
}  # fmt: skip
STATE_STYLE = {"ok": "green", "degraded": "yellow", "resetting": "bold magenta", "offline": "bold red"}


def safe(value: Any) -> str:
    return safe_text(value) if isinstance(value, str) else safe_text(str(value))


def dur(ns: Optional[int]) -> str:
    if ns is None:
        return "-"
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f}ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.1f}us"
    return f"{ns}ns"


def size(n: Optional[int]) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"


def stamp(ts_ns: int) -> str:
    secs, nsecs = divmod(ts_ns, 1_000_000_000)
    return f"{secs}.{nsecs // 1000:06d}"


def spark(values: Sequence[int], width: int = 20) -> str:
    vals = list(values)[-width:]
    top = max(vals) if vals else 0
    if top <= 0:
        return BARS[0] * len(vals)
    return "".join(BARS[min(7, int(v * 7 / top))] for v in vals)


def dev_name(dev: Optional[int]) -> str:
    return "-" if dev is None else f"npu{dev}"


def args_text(args: Mapping[str, Any]) -> str:
    parts = []
    for key, value in args.items():
        if key == "entry_ts_ns":
            continue
        if key == "latency_ns" and isinstance(value, int):
            parts.append(f"latency={dur(value)}")
        else:
            parts.append(f"{safe(key)}={safe(value)}")
    return " ".join(parts)


def row_text(row: LogRow) -> Text:
    ev, comm = row
    text = Text(no_wrap=True, end="")
    text.append(f"{stamp(ev.ts_ns):>17} ", "dim")
    text.append(f"{dev_name(ev.dev):5} ")
    text.append(f"{ev.kind:10} ", KIND_STYLE.get(ev.kind, ""))
    text.append(f"{safe(ev.op)[:18]:18} ")
    text.append(f"{safe(comm)[:16]}-{ev.pid} ", "cyan")
    text.append(args_text(ev.args))
    return text


def row_plain(row: LogRow) -> str:
    return row_text(row).plain
