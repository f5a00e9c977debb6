"""`npu-trace demo`: the simulated NPU traced live, in the TUI (or streamed: --headless), until the user quits:
scenarios one after another (npu_trace.sim.cycle), so that each incident happens live."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Callable, Optional, Tuple

from npu_trace import sim
from npu_trace.commands.session_text import announce, note, print_summary, terminal_printer
from npu_trace.commands.sim import add_host_options, host_from_args
from npu_trace.errors import UsageError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.pipeline import pump
from npu_trace.process import prepare_process
from npu_trace.sim.cycle import DEMO_CYCLE, CyclePlan, ScenarioCycle, scenario_steps
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sinks.text import printing
from npu_trace.sources.host_channels import Channels
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.options import TraceOptions


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the simulated NPU and trace it live",
        description="Load the simulated NPU and trace it live while it runs scenarios one after another, until "
        f"you quit (q, or Ctrl-C): {scenario_steps(DEMO_CYCLE)}, then again. The simulator is unloaded at the end "
        "unless it was loaded before.",
    )
    p.add_argument("--scenario", default="cycle", choices=["cycle", *sorted(sim.SCENARIOS)],
                   help="cycle (the default: each scenario in turn) or one scenario, run over and over")  # fmt: skip
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="each scenario run's length (default: the cycle's own; one scenario: 10 s)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=0, metavar="N",
                   help="stop after N rounds (default 0: run until you quit)")  # fmt: skip
    p.add_argument("--rate", type=float, default=200.0, help="HAL calls per second (default 200)")
    p.add_argument("--devices", type=int, default=2, help="simulated NPUs (default 2)")
    p.add_argument("--seed", type=int, default=1)
    add_host_options(p)
    p.add_argument("--format", choices=("text", "ndjson"), default="text", help="--headless output format")
    p.add_argument("--headless", action="store_true", help="stream events as text instead of opening the TUI")
    p.add_argument("--screenshot", metavar="SVG", help="TUI: save a screenshot after 8 s")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.duration is not None and not 0 < args.duration < math.inf) or not 0 < args.rate < math.inf or \
            args.devices <= 0:  # fmt: skip
        raise UsageError("--duration, --rate and --devices must be positive")
    if args.rounds < 0:
        raise UsageError("--rounds must not be negative")
    host_from_args(args)  # bad --threads / --migrate-ms: one line before anything starts
    if not args.headless:
        from npu_trace.commands.live import tui_entry  # the TUI, imported lazily (npu_trace stays headless)

        return tui_entry("run_demo", screenshot=args.screenshot is not None)(args)
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    try:
        return _trace_scenario(args, fs)
    finally:
        if not was_loaded:
            sim.unload(fs)


def demo_options(side: SideChannels) -> TraceOptions:
    """The demo's trace options: the sim profile, its channels reading the simulator's side channels (its kmsg
    lines, uevents and fake npu-smi, polled every second)."""
    smi = os.path.join(side.smi_dir, "npu-smi") if side.smi_dir else "npu-smi"
    return TraceOptions(profile_name="sim", npu_smi=smi, health_interval=1.0)


def demo_channels(on_note: Callable[[str], None]) -> Tuple[SideChannels, TraceOptions, Optional[Channels]]:
    """The simulator's side channels, the demo's options and the tracer's channels that read them."""
    side = SideChannels()
    for text in side.notes:
        on_note(f"simulator: {text}")
    options = demo_options(side)
    return side, options, options.make_channels(on_note)


def _trace_scenario(args: argparse.Namespace, fs: Tracefs) -> int:
    side, options, channels = demo_channels(note)
    session = options.make_session(fs)
    printer = terminal_printer(session, args.format)
    stop = prepare_process()
    with LiveTrace(session, channels) as source:
        announce(session, channels=channels)
        printer.kernel = session.kernel_text()
        timeline = source.block_timeline(keep_unknown=True)
        cycle = ScenarioCycle(cycle_plan(args), sim.start_scenario, side, on_start=lambda text: note(f"demo: {text}"))
        try:
            pump(source, printing(timeline, printer), stop=stop, until=cycle.poll)
        finally:
            cycle.terminate()
    print_summary(session, timeline, printer, channels)
    print(f"npu-trace: demo: {cycle.index} scenario run(s)", file=sys.stderr)
    return 0


def cycle_plan(args: argparse.Namespace) -> CyclePlan:
    """The demo's scenarios from its options (checked by `run`)."""
    return CyclePlan.of(args.scenario, args.duration, rate=args.rate, devices=args.devices, seed=args.seed,
                        rounds=args.rounds, host=host_from_args(args))  # fmt: skip
