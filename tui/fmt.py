"""Formatting for the views. Untrusted strings (process names, field strings, kernel messages) only ever
enter `rich.text.Text` as plain text, after `safe_text` (control characters escaped): never markup."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from rich.text import Text

from npu_trace.events import NpuEvent
from npu_trace.sinks.text import safe_text
from tui.messages import COMM, CPU, DEV, FIELDS, KIND, OP, PID, TS, LogRow

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
        name = _KEYS.get(key)
        if name is None:
            name = safe(key)
            if len(_KEYS) < MAX_KEYS:
                _KEYS[key] = name
        if type(value) is int:  # no escaping needed (the common case, thousands of times a second)
            parts.append(f"latency={dur(value)}" if key == "latency_ns" else f"{name}={value}")
        else:
            parts.append(f"{name}={safe(value)}")
    return " ".join(parts)


_KEYS: Dict[str, str] = {}  # field name -> its safe text (names come from event formats: a bounded set)
MAX_KEYS = 4096


def log_row(ev: NpuEvent, comm: str) -> LogRow:
    """An event as the log carries it (worker side): atomic values only, the args already text."""
    return (ev.ts_ns, ev.dev, ev.kind, ev.op, ev.pid, ev.cpu, comm, args_text(ev.args))


def row_parts(row: LogRow) -> Tuple[str, str, str, str, str, str]:
    """A log line's columns: time, device, kind, op, process, fields (untrusted text made safe)."""
    return (f"{stamp(row[TS]):>17} ", f"{dev_name(row[DEV]):5} ", f"{row[KIND]:10} ", f"{safe(row[OP])[:18]:18} ",
            f"{safe(row[COMM])[:16]}-{row[PID]} ", row[FIELDS])  # fmt: skip


def row_text(row: LogRow) -> Text:
    when, dev, kind, op, proc, fields = row_parts(row)
    text = Text(no_wrap=True, end="")
    text.append(when, "dim")
    text.append(dev)
    text.append(kind, KIND_STYLE.get(row[KIND], ""))
    text.append(op)
    text.append(proc, "cyan")
    text.append(fields)
    return text


def row_plain(row: LogRow) -> str:
    """The line as shown, without styles (what the log's text filter searches): no rich objects built."""
    return "".join(row_parts(row))


def row_detail(row: LogRow) -> Text:
    """An event's full line (its fields unabridged), for the line under the log."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{stamp(row[TS])} {dev_name(row[DEV])} {row[KIND]} {safe(row[OP])} {safe(row[COMM])}-{row[PID]} "
             f"cpu{row[CPU]}: ", "bold")  # fmt: skip
    t.append(row[FIELDS])
    return t
