"""`npu-trace live`: the Textual TUI on this host's trace. The TUI package is imported here, lazily: the one
edge from npu_trace to tui, so that `import npu_trace` stays headless."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable

from npu_trace.commands.trace_options import add_trace_options, options_from_args
from npu_trace.errors import EXIT_PRIVILEGE, UsageError

MISSING = "npu-trace: the TUI needs textual: pip install npu-trace[tui]"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("live", help="trace this host live in a terminal UI (Textual)",
                       description="Trace on a private tracefs instance and show devices, operations, spikes, "
                       "resets, memory and events live. Keys: ? in the UI.")  # fmt: skip
    add_trace_options(p)
    p.add_argument("--record-dir", default=".", metavar="DIR", help="where `r` writes recordings (default .)")
    p.set_defaults(func=run)


def tui_entry(name: str, screenshot: bool = False, text: str = "give --headless for text") -> Callable[..., int]:
    """tui.ui.launch.<name>, or exit 3 with one clear line when textual (or the tui package) is missing; a
    UsageError when the standard input or output is not a terminal (the UI drew escape sequences into a file
    and waited for a key nobody could press), but for a run that saves a screenshot."""
    if not screenshot and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(f"the terminal UI needs a terminal (its standard input and output): {text}")
    try:
        module = importlib.import_module("tui.ui.launch")
    except ImportError:
        print(MISSING, file=sys.stderr)
        raise SystemExit(EXIT_PRIVILEGE) from None
    entry: Callable[..., int] = getattr(module, name)
    return entry


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)  # a bad option is one line before the TUI (and textual) is even imported
    return tui_entry("run_live", text="npu-trace stream prints the same trace as text")(args, options)
