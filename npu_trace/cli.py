"""`npu-trace` entry point: one parser, one module per subcommand, errors become one line + exit code."""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from typing import List, NoReturn, Optional

from npu_trace import __version__
from npu_trace.errors import EXIT_USAGE, NpuTraceError
from npu_trace.process import PRIORITIES, Terminated, journal_stderr, standard_streams, stdout_to_null

# Each module in npu_trace.commands exposes add_parser(subparsers) which sets `func` (args -> exit code).
COMMANDS = ("doctor", "sim", "demo", "live", "stream", "record", "replay", "check", "diff", "export", "import",
            "cleanup", "bpf", "agent", "cluster")  # fmt: skip
MODULES = {"import": "import_cmd"}  # a command whose module cannot carry its name (a keyword)
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a write that failed for want of room


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"npu-trace: error: {message}\n")


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command; with `only`, that command's whole and the others' names alone (the module
    of a command is imported to build its parser: a run needs its own, the help all of them)."""
    parser = _Parser(
        prog="npu-trace",
        description="Kernel-level tracing for Ascend NPU hosts (ftrace + eBPF).",
    )
    parser.add_argument("--version", action="version", version=f"npu-trace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if only is None or name == only:
            importlib.import_module(f"npu_trace.commands.{MODULES.get(name, name)}").add_parser(sub)
        else:
            sub.add_parser(name)
    return parser


def command_of(argv: List[str]) -> Optional[str]:
    """The command a command line runs (its first argument, when it names one)."""
    first = argv[0] if argv else ""
    return first if first in COMMANDS else None


def _parsed(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> argparse.Namespace:
    """The arguments; --help and --version write here and exit: what they wrote is flushed first, so that a
    failed write (a full device, a reader that left) is told as a command's own output's is."""
    try:
        return parser.parse_args(argv)
    except SystemExit:
        sys.stdout.flush()
        raise


def main(argv: Optional[List[str]] = None) -> int:
    standard_streams()
    try:
        parser = build_parser(command_of(sys.argv[1:] if argv is None else argv))
        args = _parsed(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args.func(args))
    except NpuTraceError as exc:
        # a service's stderr in the journal: the priority prefix journald reads, as the agent's own log lines
        print(f"<{PRIORITIES['error']}>{exc}" if journal_stderr() else f"npu-trace: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:  # SIGTERM, SIGHUP: what the command made undone, as on Ctrl-C
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. `| head`): not an error of ours.
        stdout_to_null()
        return 0
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _FULL:
            raise
        # a write to a descriptor, not to a file the command named (it says its own): the standard output, full
        stdout_to_null()
        print(f"npu-trace: cannot write the output: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
