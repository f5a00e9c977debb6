"""`npu-trace sim load|unload|status|run`: the simulated NPU (loaded like a driver, apart from tracing)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List

from npu_trace import sim
from npu_trace.commands import sim_cluster
from npu_trace.errors import SimulatorError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim import build, hal_install, probes, side_channels
from npu_trace.sim.threads import HOST_LIKE, Host, validate_host


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("sim", help="the simulated NPU: load/unload its uprobes, run scenarios")
    sub = parser.add_subparsers(dest="sim_command", metavar="SIM_COMMAND", parser_class=type(parser))
    load = sub.add_parser("load", help="build the simulator and register its ascend:* uprobe events")
    add_hal_abi_option(load, "also install the simulator's real-ABI libascend_hal.so where the Ascend driver "
                       f"installs its own ({hal_install.TARGET}; never over a file it did not put there), so "
                       "--bpf finds it as a real HAL")  # fmt: skip
    load.set_defaults(func=cmd_load)
    sub.add_parser("unload", help="remove every ascend:* uprobe event and the simulator's installed "
                   "libascend_hal.so").set_defaults(func=cmd_unload)  # fmt: skip
    sub.add_parser("status", help="is the simulator loaded, with which binary").set_defaults(func=cmd_status)
    run = sub.add_parser("run", help="run a scenario (loads the simulator first when needed)")
    run.add_argument("--scenario", choices=sim.SCENARIOS, default="steady")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--duration", type=float, default=2.0, help="seconds (default 2)")
    run.add_argument("--rate", type=float, default=500.0, help="background calls per second (default 500)")
    run.add_argument("--devices", type=int, default=1, help="simulated devices (default 1)")
    run.add_argument("--truth", metavar="FILE", help="write the ground truth JSON here")
    run.add_argument("--no-load", action="store_true", help="do not register the uprobes (just run)")
    add_hal_abi_option(run, "send the scenario's HAL calls through the installed real-ABI libascend_hal.so, as an "
                       "application calls the driver's (installed first when needed, unless --no-load); the "
                       "truth is the same")  # fmt: skip
    add_host_options(run)
    run.add_argument(
        "--no-channels",
        action="store_true",
        help="no side channels: no kmsg lines, no synthetic uevents, no fake npu-smi (just the executor)",
    )
    run.add_argument(
        "--npu-smi-dir",
        metavar="DIR",
        help=f"where to put the fake npu-smi (default {side_channels.default_smi_dir()}); prepend DIR to PATH to "
        "use it",
    )
    run.add_argument(
        "--app-log",
        metavar="PATH",
        help="append the application's reports of the scenario's driver errors (CANN's EL0001/507010, "
        "507046, halMemAlloc failed, 507033) to PATH, as a real application's log shows them",
    )
    run.set_defaults(func=cmd_run)
    sim_cluster.add_parser(sub, add_host_options)
    parser.set_defaults(func=lambda args: _usage(parser))


def add_host_options(parser: argparse.ArgumentParser) -> None:
    """--threads / --migrate-ms: the executor like a real host (the default), or the single-thread one of old."""
    parser.add_argument(
        "--threads", type=int, default=HOST_LIKE.app_threads, metavar="N",
        help=f"application threads of the simulated host (default {HOST_LIKE.app_threads}), besides its interrupt "
        "and driver threads: tasks complete on another CPU than their submit, some calls change CPU between entry "
        "and return; 0: the single-thread executor (every action on one thread, no CPU moves)",
    )  # fmt: skip
    parser.add_argument(
        "--migrate-ms", type=float, default=None, metavar="MS",
        help=f"move the threads between CPUs every MS ms, as a loaded scheduler does (default {HOST_LIKE.migrate_ms:g} "
        "with threads; 0: never)",
    )  # fmt: skip


def add_hal_abi_option(parser: argparse.ArgumentParser, real_help: str) -> None:
    parser.add_argument("--hal-abi", choices=("sim", "real"), default="sim",
                        help=f"sim (default): the executor's own HAL functions; real: {real_help}")  # fmt: skip


def host_from_args(args: argparse.Namespace) -> Host:
    """The Host of --threads / --migrate-ms; an InputError (one line, exit 2) when they do not fit."""
    migrate = args.migrate_ms
    if migrate is None:
        migrate = HOST_LIKE.migrate_ms if args.threads else 0.0
    host = Host(app_threads=args.threads, migrate_ms=migrate)
    validate_host(host)
    return host


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def cmd_load(args: argparse.Namespace) -> int:
    """The real-ABI library first: a file that is not the simulator's refuses it before anything changed."""
    if args.hal_abi == "real":
        lib = install_hal()
        print(f"real-ABI HAL {'installed' if lib.changed else 'already installed'}: {lib.path}", file=sys.stderr)
    loaded = sim.load(Tracefs.find())
    state = "loaded" if loaded.changed else "already loaded"
    n = len(loaded.definitions)
    print(f"simulated NPU {state}: {n} uprobe events on {loaded.binary}", file=sys.stderr)
    return 0


def install_hal() -> hal_install.Installed:
    """The simulator's real-ABI library at the driver's install path (built first when needed)."""
    return hal_install.install(build.ensure_hal_library())


def cmd_unload(args: argparse.Namespace) -> int:
    n = sim.unload(Tracefs.find())
    print(f"simulated NPU unloaded: {n} uprobe events removed", file=sys.stderr)
    removed = hal_install.uninstall()
    if removed:
        print(f"real-ABI HAL removed: {removed}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    fs = Tracefs.find()
    lines = probes.registered(fs)
    current = sim.is_loaded(fs)
    state = "loaded" if current else ("stale (other binary or definitions)" if lines else "not loaded")
    print(f"simulated NPU: {state}")
    print(f"binary: {build.binary_path()}")
    print(f"registered ascend uprobe events: {len(lines)}")
    for line in lines:
        print(f"  {line}")
    lib = hal_install.installed()
    print(f"real-ABI HAL: {lib.path + ' (installed by sim load --hal-abi real)' if lib else 'not installed'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    side = None if args.no_channels else side_channels.SideChannels(npu_smi_dir=args.npu_smi_dir, app_log=args.app_log)
    shown = 0
    if side is not None:
        shown = _notes(side.notes, 0)
        if side.smi_dir is not None:
            print(f"fake npu-smi: {side.smi_dir}/npu-smi (export PATH={side.smi_dir}:$PATH)", file=sys.stderr)
    truth = sim.run_scenario(
        args.scenario,
        args.seed,
        args.duration,
        args.rate,
        args.devices,
        args.truth,
        ensure_loaded=not args.no_load,
        channels=side,
        host=host_from_args(args),
        hal_lib=real_hal(args.no_load) if args.hal_abi == "real" else None,
    )
    if side is not None:
        _notes(side.notes, shown)
    n = len(truth["actions"])
    secs = (truth["end_ns"] - truth["start_ns"]) / 1e9
    kinds = " ".join(f"{k}={v}" for k, v in truth["kind_counts"].items())
    dest = f", truth in {args.truth}" if args.truth else ""
    through = f", HAL calls through {truth['hal']}" if truth.get("hal") else ""
    print(f"sim {args.scenario} seed={args.seed}: {n} calls in {secs:.2f}s ({kinds}){through}{dest}", file=sys.stderr)
    print(f"executor: {_host_summary(truth['host'])}", file=sys.stderr)
    if "channels" in truth:
        print(f"side channels: {_channel_summary(truth['channels'])}", file=sys.stderr)
    return 0


def real_hal(no_load: bool) -> str:
    """The installed real-ABI library's path: installed now unless `no_load` (then it must be there)."""
    if not no_load:
        return install_hal().path
    lib = hal_install.installed()
    if lib is None or not os.path.isfile(lib.path):
        raise SimulatorError("--hal-abi real --no-load: the real-ABI HAL is not installed (npu-trace sim load "
                             "--hal-abi real)")  # fmt: skip
    return lib.path


def _host_summary(host: Dict[str, Any]) -> str:
    cpus = f"{len(host['cpus'])} CPU" + ("s" if len(host["cpus"]) != 1 else "")
    if host["threads"] == 1:
        return f"1 thread (single-thread mode), {cpus}"
    moves = f", moved every {host['migrate_ms']:g} ms" if host["migrate_ms"] and host["pinned"] else ""
    pinned = "" if host["pinned"] else " (one CPU: nothing moves)"
    return f"{host['threads']} threads on {cpus}{pinned}{moves}"


def _channel_summary(ch: Dict[str, Any]) -> str:
    parts = [f"{name} {ch[name]['written']} written" + (f" ({ch[name]['errors']} failed)" if ch[name]["errors"] else "")
             for name in ("kmsg", "uevent", "app_log") if name in ch]  # fmt: skip
    if "npu_smi" in ch:
        parts.append(f"npu-smi {len(ch['npu_smi']['steps'])} state changes")
    return ", ".join(parts) or "none"


def _notes(notes: List[str], shown: int) -> int:
    """Print the notes from index `shown` on (one line each); returns how many are shown now."""
    for note in notes[shown:]:
        print(f"npu-trace sim run: {note}", file=sys.stderr)
    return len(notes)
