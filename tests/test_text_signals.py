"""Lines written while signals keep interrupting the writes (a Ctrl-C while the reader is slow, a timer): every
line arrives whole, in order. A buffered stream's write interrupted after a part of it went out loses the rest
of its buffer (CPython 3.11, measured): the printer writes to the file descriptor itself, in a loop."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

CHILD = r"""
import signal, sys
from npu_trace.ftrace.columns import plans
from npu_trace.pipeline.blocks import records_of
from npu_trace.sim.synth import formats, synth_events
from npu_trace.sim.scenarios import plan
from npu_trace.sinks.text import StreamPrinter
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)  # a signal every half millisecond, while writing
events = synth_events(plan("steady", 1, 1.0, 3000, 2))
block = records_of(events, plans(formats().values()))
printer = StreamPrinter(sys.stdout, "ndjson", lambda pid: "x", compiled=sys.argv[1] == "c")
for _ in range(int(sys.argv[2])):
    printer.write_block(block)
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(len(block), file=sys.stderr)
"""


@pytest.mark.parametrize("compiled", ["c", "python"])
def test_every_line_arrives_whole_while_signals_interrupt_the_writes(compiled: str) -> None:
    rounds = 5
    proc = subprocess.Popen([sys.executable, "-c", CHILD, compiled, str(rounds)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    got = b""
    while True:  # a slow reader: the pipe stays full, the writer blocks, the timer interrupts it
        time.sleep(0.001)
        part = proc.stdout.read1(64 << 10)  # type: ignore[attr-defined]
        if not part:
            break
        got += part
    err = proc.stderr.read().decode()
    assert proc.wait() == 0, err
    lines = got.decode().splitlines()
    per_round = int(err.strip())
    assert len(lines) == rounds * per_round > rounds * 1000
    stamps = [json.loads(line)["ts_ns"] for line in lines]
    assert stamps[:per_round] * rounds == stamps  # whole, in order
