"""Entry points: `run_live`, `run_demo`, `run_replay` (called lazily by npu_trace.commands; args from argparse)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from npu_trace import sim
from npu_trace.errors import KernelFeatureError, NpuTraceError, UsageError
from npu_trace.profiles import get_profile
from npu_trace.runner import tune_gc
from npu_trace.sources.tracefs_source import TracefsSession
from npu_trace.tracefs import Tracefs
from tui.app import NpuTraceApp
from tui.live import LiveSource
from tui.replay import ReplayFeedSource

DEMO_RECORDING = os.path.join(os.path.dirname(sim.__file__), os.pardir, "data", "demo.npt")


def _run(app: NpuTraceApp, screenshot: Optional[str] = None) -> int:
    tune_gc()
    app.screenshot_path = screenshot
    app.run()
    if app.feed.error:
        print(f"npu-trace: {app.feed.error}", file=sys.stderr)
        return 2
    return 0


def run_live(args: argparse.Namespace) -> int:
    from npu_trace.commands.stream import session_from_args

    session = session_from_args(args)
    profile = get_profile(args.profile)
    return _run(NpuTraceApp(LiveSource(session, profile), profile, record_dir=getattr(args, "record_dir", ".")))


def run_replay(args: argparse.Namespace) -> int:
    if args.speed is not None and args.speed <= 0:
        raise UsageError("--speed must be positive")
    speed = None if args.max else (args.speed or 1.0)
    source = ReplayFeedSource(args.file, speed)
    profile = get_profile(str(source.replay.header.get("profile", "sim")) or "sim")
    return _run(NpuTraceApp(source, profile))


def run_demo(args: argparse.Namespace) -> int:
    """The simulator's scenario traced live; without root (or tracefs/uprobes) the shipped recording."""
    screenshot = getattr(args, "screenshot", None)
    try:
        fs = Tracefs.find() if os.geteuid() == 0 else None
    except NpuTraceError:
        fs = None
    if fs is None:
        return _demo_replay("not running as root", screenshot)
    was_loaded = sim.is_loaded(fs)
    try:
        sim.load(fs)
    except KernelFeatureError as exc:
        return _demo_replay(f"the simulator cannot load here ({exc})", screenshot)
    try:
        return _demo_live(args, fs, screenshot)
    finally:
        if not was_loaded:
            sim.unload(fs)


def _demo_live(args: argparse.Namespace, fs: Tracefs, screenshot: Optional[str]) -> int:
    profile = get_profile("sim")
    session = TracefsSession(optional=profile.events, missing_hint=profile.hint, fs=fs, layouts=profile.layouts)
    run = sim.start_scenario(args.scenario, args.seed, args.duration, args.rate, args.devices, ensure_loaded=False)
    try:
        source = LiveSource(session, profile, label=f"demo: {args.scenario} (live)")
        return _run(NpuTraceApp(source, profile), screenshot)
    finally:
        run.terminate()


def _demo_replay(why: str, screenshot: Optional[str]) -> int:
    path = os.path.normpath(DEMO_RECORDING)
    print(f"npu-trace: {why}: replaying the demo recording shipped with the package ({path})", file=sys.stderr)
    source = ReplayFeedSource(path, 1.0)
    source.label = "demo: recording (no root)"
    return _run(NpuTraceApp(source, get_profile("sim")), screenshot)
