"""`npu-trace doctor [--json]`: what this host supports and what to fix (exit 0 ok, 3 essentials missing)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from npu_trace.capabilities import Host, essentials_ok, format_text, run_checks, to_json_obj
from npu_trace.errors import EXIT_OK, EXIT_PRIVILEGE

HELP = "check what this host supports (tracefs, uprobes, BPF, Ascend driver, simulator) and what to fix"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("doctor", help=HELP, description=HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    host = Host()
    checks = run_checks(host)
    code = EXIT_OK if essentials_ok(checks) else EXIT_PRIVILEGE
    if args.json:
        print(json.dumps(to_json_obj(checks, code, host.release), indent=2))
        return code
    print(format_text(checks))
    verdict = (
        "essentials ok" if code == EXIT_OK else "essentials missing (privilege, tracefs, uprobes or driver events)"
    )
    print(f"\n{verdict}: exit {code}")
    return code
