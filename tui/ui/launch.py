"""Entry points: `run_live`, `run_demo`, `run_replay` (called lazily by npu_trace.commands; args from argparse)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Optional

from npu_trace import sim
from npu_trace.device.profiles import get_profile
from npu_trace.errors import KernelFeatureError, NpuTraceError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.process import tune_gc
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sources.options import TraceOptions
from tui.messages import SourceSpec
from tui.ui.app import NpuTraceApp
from tui.ui.terminal import QuitSignals

# the worker's sources, by name: the UI process never imports the worker's modules
LIVE = "tui.worker.live_feed:live_source"
DEMO = "tui.worker.live_feed:demo_source"
REPLAY = "tui.worker.replay_feed:ReplayFeedSource"
DEMO_RECORDING = os.path.join(os.path.dirname(sim.__file__), os.pardir, "data", "demo.npt")


def _run(app: NpuTraceApp, screenshot: Optional[str] = None) -> int:
    """Run the app; whatever way it ends (q, an exception in the UI, a signal, its terminal gone), the worker
    is stopped and its source closed before this returns. A signal that came before (its handlers are installed
    first: `QuitSignals`) runs nothing."""
    tune_gc()
    app.screenshot_path = screenshot
    try:
        if not (app.signals is not None and app.signals.signum):
            app.run()
    finally:
        app.feed.close()
    if app.error:
        if not app.terminal_gone:  # else nobody reads it (and a write could fail, or wait)
            print(f"npu-trace: {app.error}", file=sys.stderr)
        return 2
    return 0


def _app(spec: SourceSpec, profile_name: str, signals: QuitSignals, record_dir: str = ".") -> NpuTraceApp:
    return NpuTraceApp(spec, get_profile(profile_name), record_dir=record_dir, quiet=True, signals=signals)


def run_live(args: argparse.Namespace, options: TraceOptions) -> int:
    """`npu-trace live` with its options (checked by the command before the UI starts; the worker builds the
    session)."""
    signals = QuitSignals().install()
    spec = SourceSpec(LIVE, (options,), label="live")
    return _run(_app(spec, options.profile_name, signals, getattr(args, "record_dir", ".")))


def run_replay(args: argparse.Namespace, header: Dict[str, Any]) -> int:
    """`replay` without --headless (npu_trace.commands.replay.run, which checked its options and read the
    recording's header: a bad file fails before the UI starts)."""
    signals = QuitSignals().install()
    speed = None if args.max else (args.speed or 1.0)
    spec = SourceSpec(REPLAY, (args.file, speed), label="replay")
    return _run(_app(spec, str(header.get("profile", "sim")) or "sim", signals))


def run_demo(args: argparse.Namespace) -> int:
    """The simulator's scenario traced live; without root (or tracefs/uprobes) the shipped recording. The
    signals are handled from here on: one during the simulator's loading still unloads it."""
    signals = QuitSignals().install()
    screenshot = getattr(args, "screenshot", None)
    try:
        fs = Tracefs.find() if os.geteuid() == 0 else None
    except NpuTraceError:
        fs = None
    if fs is None:
        return _demo_replay("not running as root", signals, screenshot)
    was_loaded = sim.is_loaded(fs)
    try:
        sim.load(fs)
    except KernelFeatureError as exc:
        return _demo_replay(f"the simulator cannot load here ({exc})", signals, screenshot)
    try:
        return _demo_live(args, fs, signals, screenshot)
    finally:
        if not was_loaded:
            sim.unload(fs)


def _demo_live(args: argparse.Namespace, fs: Tracefs, signals: QuitSignals, screenshot: Optional[str]) -> int:
    """The worker runs the scenarios (one after another until q) beside its session, and stops them on every
    exit path; the simulator's probes are this process's (loaded and unloaded by run_demo)."""
    from npu_trace.commands.demo import cycle_plan, demo_options

    label = f"demo: {args.scenario} (live)"
    options = demo_options(SideChannels())  # the channels that read the simulator's kmsg, uevents, npu-smi
    spec = SourceSpec(DEMO, (fs.root, label, options, cycle_plan(args)), label=label)
    return _run(_app(spec, "sim", signals, getattr(args, "record_dir", ".")), screenshot)


def _demo_replay(why: str, signals: QuitSignals, screenshot: Optional[str]) -> int:
    path = os.path.normpath(DEMO_RECORDING)
    print(f"npu-trace: {why}: replaying the demo recording shipped with the package ({path})", file=sys.stderr)
    spec = SourceSpec(REPLAY, (path, 1.0), label="demo: recording (no root)")
    return _run(_app(spec, "sim", signals), screenshot)
