"""What the benchmarks share: a run's figures, the generator's result line, CPU clocks, logging.

Imported by `benchmarks.ingest` and `benchmarks.record` alike (neither imports the other's internals back).
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Sequence, Tuple, TypeVar

from npu_trace.pipeline.pump import POLL_INTERVAL_S

EVENT = "syscalls:sys_enter_getpid"
ANCHOR_INSTANCE = "npubench"
GEN_LINE = re.compile(rb"pid=(\d+) n=(\d+) elapsed_ns=(\d+) cpu_ns=(\d+)")

NPU = "npu-trace"
NPU_NO_TEXT = "npu-trace, no text"
ANCHOR = "trace-cmd"
UNTRACED = "untraced"
T = TypeVar("T")


class BenchError(Exception):
    pass


@dataclass
class Run:
    """One traced (or untraced) generator run."""

    tool: str
    n: int
    target_rate: float  # 0: as fast as possible
    gen_pid: int = 0
    gen_elapsed_ns: int = 0
    gen_cpu_ns: int = 0
    events: int = 0  # the generator's events seen by the tool
    other_events: int = 0  # events of other getpid callers (not counted)
    lost: int = 0
    incomplete: bool = False
    wall_s: float = 0.0
    reader_cpu_s: float = 0.0
    dat_bytes: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.n / (self.gen_elapsed_ns / 1e9) if self.gen_elapsed_ns else 0.0

    @property
    def lossless(self) -> bool:
        return self.lost == 0 and not self.incomplete and self.events == self.n

    @property
    def mismatch(self) -> bool:
        return self.tool != UNTRACED and self.events + self.lost != self.n

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["rate"] = self.rate
        d["lossless"] = self.lossless
        return d


# ---- helpers ---------------------------------------------------------------------------------------
def log(msg: str) -> None:
    print(msg, flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def judged_ratio(of_medians: float, rounds_: Sequence[float], anchor: str, beside: str = "") -> Tuple[float, str]:
    """The ratio a bench judges between two tools it ran once per round: the median of the rounds' ratios (each
    tool's run of a round against the other's: steadier than the ratio of the medians when this VM's speed drifts
    between minutes), or the ratio of the medians when there are no rounds; and its text: "{ratio}x {anchor}",
    the rounds and the ratio of the medians with it, and `beside` (the anchor's own figure, say)."""
    if not rounds_:
        return of_medians, f"{of_medians:.2f}x {anchor}" + (f" ({beside})" if beside else "")
    r = median(rounds_)
    each = ", ".join(f"{x:.2f}" for x in rounds_)
    more = f", {beside}" if beside else ""
    return r, f"{r:.3f}x {anchor} round by round (median of {each}; of the medians: {of_medians:.2f}x{more})"


def alternated(items: List[T], round_: int) -> List[T]:
    """The order a bench runs its tools in round `round_` (from 0): as given in even rounds, reversed in odd ones
    (within a round the machine drifts too: a tool run last in every round would take all of it)."""
    return items if round_ % 2 == 0 else items[::-1]


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def parse_gen(output: bytes) -> Tuple[int, int, int, int]:
    """(pid, n, elapsed_ns, cpu_ns) from the generator's line."""
    m = GEN_LINE.search(output)
    if not m:
        raise BenchError(f"no result line from the generator in: {output[-500:]!r}")
    pid, n, elapsed, cpu = (int(x) for x in m.groups())
    return pid, n, elapsed, cpu


def gcc(src: str, out: str, extra: Sequence[str] = ()) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise BenchError("gcc is not installed (run scripts/setup)")
    proc = subprocess.run(
        [cc, "-O2", *extra, "-o", out, src, *(["-ldl"] if "-shared" in extra else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise BenchError(f"compiling {src} failed:\n{proc.stderr}")


def add_common_options(p: argparse.ArgumentParser) -> None:
    """The options every tracing benchmark takes (benchmarks.ingest, benchmarks.live)."""
    p.add_argument("--buffer-kb", type=int, default=8192, help="ring buffer per CPU, every tool (KiB)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    p.add_argument("--reader-cpu", type=int, default=1, help="CPU the tracers run on")
    p.add_argument("--poll-ms", type=float, default=POLL_INTERVAL_S * 1000,
                   help="npu-trace reader sleep when a read found nothing (default: the pump's, what stream runs)")
    p.add_argument("--no-anchor", action="store_true", help="skip trace-cmd (npu-trace only)")
    p.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")


class PidCount:
    """Counts the rows of one process in the blocks it is shown (`pid` set once the process started)."""

    def __init__(self) -> None:
        self.pid = -1
        self.count = 0

    def add(self, block: Any) -> None:
        self.count += int((block.pid == self.pid).sum())
