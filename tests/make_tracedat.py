"""Writes tests/data/tracedat/: one run of the simulator's ecc-reset scenario recorded at once by npu-trace
(`own.npt`) and by trace-cmd 3.1.6 as a v7 and a v6 trace.dat (`trace-v7.dat`; `trace-v6.dat.zst`: v6 files
are not compressed, this one is stored zstd-compressed), each in its own tracefs instance.
tests/test_tracedat.py imports the trace.dat files and holds them to npu-trace's own recording.

Run as root on a host with trace-cmd (`apt-get install trace-cmd`) and, where the function tracer's files fail
with EPERM (these VMs), the anchor-tools shim built as an LD_PRELOAD library (see ../shared/anchor-tools):
    python tests/make_tracedat.py --shim /tmp/eperm_shim.so
Never `trace-cmd reset` on a shared host: it clears every uprobe event, the simulator's included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "tracedat")
CLI = [sys.executable, "-m", "npu_trace"]
VERSIONS = ("7", "6")


def start_record(path: str) -> subprocess.Popen[str]:
    rec = subprocess.Popen([*CLI, "record", "-o", path, "-e", "ascend:*", "--channels", "none"],
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert rec.stderr is not None
    while True:
        line = rec.stderr.readline()
        if not line:
            raise SystemExit("npu-trace record ended before recording: " + rec.stderr.read())
        if "recording to" in line:
            return rec


def main(argv: Optional[List[str]] = None) -> int:
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shim", help="the eperm shim (.so) to preload into trace-cmd")
    args = ap.parse_args(argv)
    trace_cmd = shutil.which("trace-cmd")
    if trace_cmd is None:
        raise SystemExit("trace-cmd is not installed")
    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)
    env = dict(os.environ, LD_PRELOAD=args.shim) if args.shim else dict(os.environ)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        own = os.path.join(tmp, "own.npt")
        rec = start_record(own)
        tcs = []
        for version in VERSIONS:
            instance = f"npu-trace-golden-{os.getpid()}-v{version}"
            dat = os.path.join(tmp, f"trace-v{version}.dat")
            tcs.append((instance, subprocess.Popen(
                [trace_cmd, "record", "-q", "-d", "-B", instance, "-C", "mono", "-e", "ascend", "-o", dat,
                 "--file-version", version], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        try:
            time.sleep(2.0)  # trace-cmd says nothing once it records; its instance exists by then
            for _, tc in tcs:
                if tc.poll() is not None:
                    raise SystemExit(f"trace-cmd ended: {tc.communicate()[1]}")
            sim.run_scenario("ecc-reset", 2, 2.0, 300, 1, os.path.join(tmp, "truth.json"), ensure_loaded=False)
        finally:
            for instance, tc in tcs:
                tc.send_signal(signal.SIGINT)
                tc.communicate(timeout=60)
                if os.path.isdir(os.path.join(fs.root, "instances", instance)):
                    os.rmdir(os.path.join(fs.root, "instances", instance))
            rec.send_signal(signal.SIGINT)
            rec.communicate(timeout=60)
            if not was_loaded:
                sim.unload(fs)
        for name in ("own.npt", "trace-v7.dat"):
            shutil.copyfile(os.path.join(tmp, name), os.path.join(OUT, name))
        with open(os.path.join(tmp, "trace-v6.dat"), "rb") as f:
            v6 = zstandard.ZstdCompressor(level=19).compress(f.read())
        with open(os.path.join(OUT, "trace-v6.dat.zst"), "wb") as out:
            out.write(v6)
        with open(os.path.join(tmp, "truth.json")) as f:
            truth = json.load(f)
    sizes = ", ".join(f"{n} {os.path.getsize(os.path.join(OUT, n)):,} B" for n in sorted(os.listdir(OUT)))
    print(f"wrote {OUT}: {sizes}; the scenario injected {truth.get('counts')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
