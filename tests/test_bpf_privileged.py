"""Privileged: the BPF programs on this kernel (bcc, uprobes, tracepoints, ring buffer), checked against the
simulator's ground truth. Tolerance: the kernel-measured latency of a HAL call is at least its injected delay
and at most delay + 2 ms (uprobe + uretprobe cost and scheduling on a 2-vCPU VM), and lies inside the
executor's own [start_ns, end_ns] on the same clock (CLOCK_MONOTONIC)."""

from __future__ import annotations

import io
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from npu_trace.bpf import abi
from npu_trace.bpf import source as bpf_source
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.source import BpfSource
from npu_trace.errors import InputError, KernelFeatureError, SourceError
from npu_trace.events import Loss, TraceEvent

TOLERANCE_NS = 2_000_000
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sim_binary() -> str:
    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")
    from npu_trace.sim import build

    return build.ensure_built()


def bpf_prog_fds() -> int:
    """BPF programs this process holds (bcc keeps an fd per loaded program until cleanup)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:bpf-prog"
        except OSError:
            continue
    return count


def run_spikes(config: BpfConfig, seed: int = 7) -> Tuple[Dict[str, Any], List[Any], BpfSource]:
    from npu_trace.sim import start_scenario

    with BpfSource(config) as src:
        run = start_scenario("spikes", seed, 2.0, 150, 2, ensure_loaded=False)  # never touches tracefs probes
        batch: List[Any] = []
        while run.poll() is None:
            src.read(batch)
            time.sleep(0.01)
        truth = run.wait()
        src.read(batch)
    # other sessions may run the same simulator binary: keep this executor's events (BPF events carry the
    # thread id: the executor's threads are in its truth)
    tids = {a["tid"] for a in truth["actions"]}
    mine = [e for e in batch if isinstance(e, Loss) or e.pid in tids]
    return truth, mine, src


def hal_actions(truth: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [a for a in truth["actions"] if a["func"].startswith("hal")]


@pytest.mark.privileged
def test_every_hal_call_measured_once(sim_binary: str) -> None:
    truth, items, _ = run_spikes(BpfConfig(binary=sim_binary))
    assert [i for i in items if isinstance(i, Loss)] == []
    events = [i for i in items if isinstance(i, TraceEvent)]
    actions = hal_actions(truth)
    assert any(a["kind"] == "spike" for a in actions)
    assert len(events) == len(actions)
    pairs = [
        pair
        for tid in {a["tid"] for a in actions}  # each thread's calls one after another, in its plan order
        for pair in zip(sorted((e for e in events if e.pid == tid), key=lambda e: e.ts_ns),
                        [a for a in actions if a["tid"] == tid])
    ]
    assert len(pairs) == len(actions)
    for ev, act in pairs:
        f = ev.fields()
        assert ev.fmt.name == act["func"]
        assert {k: f[k] for k in act["args"]} == act["args"]
        assert f["ret"] == act["ret"]
        # within the injected delay plus 2 ms, or plus what the executor itself measured around the call when a
        # VM scheduling hiccup made the call longer than that (the bracket below checks it from both sides)
        slack = max(TOLERANCE_NS, act["end_ns"] - act["start_ns"] - act["delay_ns"])
        assert act["delay_ns"] <= f["latency_ns"] <= act["delay_ns"] + slack
        assert act["start_ns"] <= f["entry_ts_ns"] and ev.ts_ns <= act["end_ns"]
        assert f["latency_ns"] == ev.ts_ns - f["entry_ts_ns"]


@pytest.mark.privileged
def test_the_hal_uprobes_leave_the_functions_to_other_tracers(sim_binary: str) -> None:
    """While the BPF programs are attached to the HAL, another uprobe on the same functions can be enabled (here
    the simulator's own ftrace event on halMemAlloc, in an instance of the test's, enabled after the BPF uprobes
    were registered): the BPF uprobes carry no reference counter (npu_trace/bpf/uprobes.py). With bcc's binding
    they carried a stray one, and the kernel refused every other uprobe there with EIO."""
    from npu_trace import sim
    from npu_trace.device import hal
    from npu_trace.ftrace.tracefs import Tracefs

    fs = Tracefs.find()
    was_loaded = sim.is_loaded(fs)
    sim.load(fs)  # the events defined, enabled nowhere: the BPF uprobes are the functions' first
    instance = fs.path(f"instances/npt-tests-refctr-{os.getpid()}")
    try:
        with BpfSource(BpfConfig(binary=sim_binary)):
            os.mkdir(instance)
            enable = os.path.join(instance, "events", hal.GROUP, f"{hal.GROUP}_halMemAlloc", "enable")
            try:
                with open(enable, "w") as f:
                    f.write("1")  # OSError (EIO) when the kernel refuses it
            finally:
                with open(enable, "w") as f:
                    f.write("0")
    finally:
        if os.path.isdir(instance):
            os.rmdir(instance)
        if not was_loaded:
            sim.unload(fs)


@pytest.mark.privileged
def test_aggregate_histograms_and_threshold(sim_binary: str) -> None:
    threshold = 4_000_000
    truth, items, src = run_spikes(BpfConfig(binary=sim_binary, aggregate=True, threshold_ns=threshold), seed=3)
    events = [i for i in items if isinstance(i, TraceEvent)]
    slow = [a for a in hal_actions(truth) if a["delay_ns"] >= threshold]
    assert slow and len(events) >= len(slow)
    assert all(e.fields()["latency_ns"] >= threshold for e in events)
    # each event over the threshold is a call made slow: by the injected delay, or by the host (the executor
    # measured it around the call that long: a thread descheduled inside it on a loaded host)
    made_slow = [a for a in hal_actions(truth) if max(a["delay_ns"], a["end_ns"] - a["start_ns"]) >= threshold]
    for e in events:
        entry = e.fields()["entry_ts_ns"]
        assert any(a["func"] == e.fmt.name and a["start_ns"] <= entry <= a["end_ns"] for a in made_slow), e
    counted = sum(sum(slots.values()) for slots in src.hist_snapshot.values())
    assert counted >= len(hal_actions(truth))  # other sessions' executors may add calls; ours are all there


@pytest.mark.privileged
@pytest.mark.parametrize("direct", [True, False], ids=["mmap", "bcc-callback"])
def test_overflowed_ring_buffer_counts_exactly_what_it_dropped(tmp_path: Path, direct: bool) -> None:
    exe = build_generator(tmp_path)
    n = 50_000
    cmd = f"read go; exec {exe} {n} 0"  # on CPU 0: the seq counter is per CPU
    gen = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    src = BpfSource(BpfConfig(ringbuf_pages=1, pids=(gen.pid,), ringbuf_direct=direct))  # one page: ~100 records fit
    try:
        src.start_bench()
        assert src.readers["bench_getpid"].startswith("mmap" if direct else "bcc callback")
        gen.communicate(b"go\n", timeout=60)  # no polling until the generator is done
        batch: List[Any] = []
        src.read(batch)
    finally:
        src.close()
    delivered = sum(1 for i in batch if isinstance(i, TraceEvent))
    lost = sum(i.lost for i in batch if isinstance(i, Loss) and i.kind == "dropped")
    assert 0 < delivered < n
    assert n - delivered == lost
    assert [e.values[0] for e in batch if isinstance(e, TraceEvent)] == list(range(1, delivered + 1))  # in order


@pytest.mark.privileged
def test_direct_reader_streams_while_the_ring_wraps() -> None:
    """A ring buffer read while it fills and wraps: events in order, each once, every event not delivered
    counted lost. Rounds of half the ring each, the reader draining each round before the next begins (reading
    meanwhile too): the ring wraps four times and nothing may be lost, however the host schedules the reader;
    then one round of three rings read only after it ended: it overflows, and what did not fit is counted lost."""
    pages = 512  # 2 MiB: 52,428 records of 40 bytes
    fits = pages * 4096 // 40
    rounds = [fits // 2] * 8
    child = subprocess.Popen(
        [sys.executable, "-c", PERF_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    src = BpfSource(BpfConfig(ringbuf_pages=pages, pids=(child.pid,)))
    seqs: List[int] = []
    lost = 0

    def drain() -> None:
        nonlocal lost
        while True:
            batch: List[Any] = []
            src.read(batch)
            seqs.extend(e.values[0] for e in batch if isinstance(e, TraceEvent))
            lost += sum(i.lost for i in batch if isinstance(i, Loss))
            if not src.pending():
                return

    try:
        src.start_bench()
        assert src.readers == {"bench_getpid": "mmap"}
        os.set_blocking(child.stdout.fileno(), False)
        held: List[str] = []
        for calls in rounds:
            child.stdin.write(f"{calls}\n")
            while not _line(child.stdout, held):  # read while it writes: the reader and the writer share the ring
                drain()
                select.select([child.stdout], [], [], 0.002)
            drain()  # the round's every record is in the ring (the tracepoint fires inside the syscall)
        assert (len(seqs), lost) == (sum(rounds), 0)  # the ring wrapped 4 times under the reader, nothing lost
        over = 3 * fits
        child.stdin.write(f"{over}\n")
        os.set_blocking(child.stdout.fileno(), True)
        assert child.stdout.readline() == "done\n"
        drain()
    finally:
        src.close()
        child.stdin.close()
        child.wait()
    n = sum(rounds) + over
    assert len(seqs) + lost == n, (len(seqs), lost)
    assert 0 < lost <= over - fits // 2  # the overflow: at least half a ring of it delivered, the rest counted
    disorder = [(a, b) for a, b in zip(seqs, seqs[1:]) if a >= b]
    assert disorder == [] and seqs[0] >= 1


def _line(stream: Any, held: List[str]) -> bool:
    """True once a whole "done" line came from a non-blocking text stream, False while there is none yet. A
    line may arrive in parts (a read between the writer's two): `held` keeps the part read so far."""
    held.append(stream.readline())
    line = "".join(held)
    assert "done\n".startswith(line), line
    if line == "done\n":
        held.clear()
        return True
    return False


# the generator of the ring and perf buffer tests: getpid() in rounds on CPU 0 (the seq counter is per CPU; a perf
# buffer reports the samples it lost on that CPU's buffer with its next sample: a second round carries the count
# of the first's losses)
PERF_CHILD = """
import os, sys
os.sched_setaffinity(0, {0})
print("ready", flush=True)
for line in sys.stdin:
    for _ in range(int(line)):
        os.getpid()
    print("done", flush=True)
"""


@pytest.mark.privileged
def test_perf_buffer_lost_samples_reach_the_loss_ledger(sim_binary: str) -> None:
    """--perf-buffer: the lost callback's counts come out of read() as Loss items and `npu-trace bpf`'s pump
    adds them to its ledger: printed + lost == calls made."""
    from npu_trace.bpf.source import BpfStream
    from npu_trace.commands.bpf import Counted
    from npu_trace.pipeline import pump
    from npu_trace.pipeline.blocktimeline import BlockTimeline
    from npu_trace.process import StopFlag
    from npu_trace.sinks.text import StreamPrinter, printing

    child = subprocess.Popen(
        [sys.executable, "-c", PERF_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    src = BpfSource(BpfConfig(pids=(child.pid,), perf_buffer=True, perf_pages=1))  # 4 KiB per CPU: ~90 samples fit
    stream, out, stop = BpfStream(src), io.StringIO(), StopFlag()
    ledger = stream.ledger
    stop.set()  # pump: only the final read, then return
    printed = 0
    try:
        src.start_bench()
        assert src.readers == {"bench_getpid": "perf buffer"}
        for calls in (20_000, 10):  # no reading during the first phase: it overflows
            child.stdin.write(f"{calls}\n")
            assert child.stdout.readline() == "done\n"
            timeline = BlockTimeline(None, {}, {}, ledger=ledger)
            counted = Counted(printing(timeline, StreamPrinter(out, "text", lambda _pid: "gen")))
            pump(stream, counted, stop=stop)
            printed += counted.events
    finally:
        src.close()
        child.stdin.close()
        child.wait()
    assert 0 < printed < 20_010 and printed == out.getvalue().count("bpf:getpid")
    assert ledger.counts == {("bpf", "dropped", -1): 20_010 - printed}


@pytest.mark.privileged
def test_irq_handler_durations(sim_binary: str) -> None:
    names = [line.split()[-1] for line in Path("/proc/interrupts").read_text().splitlines() if "virtio" in line]
    if not names:
        pytest.skip("no virtio IRQ on this host")
    probe = Path("/var/tmp") / f"npu_bpf_irq.{os.getpid()}"
    with BpfSource(BpfConfig(hal=False, irq=True, irq_names=("virtio",))) as src:
        try:
            for _ in range(20):
                with open(probe, "wb") as f:
                    f.write(os.urandom(4096))
                    f.flush()
                    os.fsync(f.fileno())
        finally:
            probe.unlink()
        time.sleep(0.05)
        batch: List[Any] = []
        src.read(batch)
    events = [i for i in batch if isinstance(i, TraceEvent)]
    assert events, "disk writes raised no virtio interrupt"
    for ev in events:
        f = ev.fields()
        assert f["name"].startswith("virtio") and f["duration_ns"] == ev.ts_ns - f["entry_ts_ns"] > 0


# ---- error paths: clear message, exit code, nothing left attached -------------------------------------------
@pytest.fixture
def no_leak(sim_binary: str) -> Iterator[None]:
    before, uprobes = bpf_prog_fds(), uprobe_lines()
    yield
    assert bpf_prog_fds() == before
    assert uprobe_lines() <= uprobes


def uprobe_lines() -> set:
    for base in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        path = Path(base) / "uprobe_events"
        if path.exists():
            return {line for line in path.read_text().splitlines() if "bcc" in line or line.startswith("p_")}
    return set()


@pytest.mark.privileged
def test_symbol_not_in_binary(no_leak: None, tmp_path: Path) -> None:
    exe = build_generator(tmp_path)
    with pytest.raises(InputError, match=r"symbol halMemAlloc, halMemFree, .* not in") as exc:
        BpfSource(BpfConfig(binary=exe)).start()
    assert exc.value.exit_code == 2


@pytest.mark.privileged
def test_binary_missing(no_leak: None) -> None:
    with pytest.raises(InputError, match=r"not found: /nonexistent/libascend_hal\.so"):
        BpfSource(BpfConfig(binary="/nonexistent/libascend_hal.so")).start()


@pytest.mark.privileged
def test_no_kprobes_here(no_leak: None, sim_binary: str) -> None:
    if os.path.isdir(bpf_source.KPROBE_PMU):
        pytest.skip("this kernel has kprobes")
    with pytest.raises(KernelFeatureError, match="CONFIG_KPROBES off") as exc:
        BpfSource(BpfConfig(binary=sim_binary, kprobes=("devmm_ioctl_dispatch",))).start()
    assert exc.value.exit_code == 3


@pytest.mark.privileged
def test_attach_failure_detaches_what_was_attached(
    no_leak: None, sim_binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = dict(abi.ENTRY_FUNCS[abi.SIM], halSqTaskSend="no_such_program")
    monkeypatch.setitem(abi.ENTRY_FUNCS, abi.SIM, bad)
    src = BpfSource(BpfConfig(binary=sim_binary))
    with pytest.raises(SourceError, match=r"cannot attach uprobe .*halSqTaskSend"):
        src.start()
    assert src.objects == {}


@pytest.mark.privileged
def test_compile_failure(no_leak: None, tmp_path: Path) -> None:
    bpf_dir = tmp_path / "bpf"
    shutil.copytree(ROOT / "bpf", bpf_dir)
    (bpf_dir / "irq.bpf.c").write_text('#include "npu_trace.h"\nint broken( {\n')
    with pytest.raises(SourceError, match=r"cannot compile/load irq\.bpf\.c") as exc:
        BpfSource(BpfConfig(hal=False, irq=True), bpf_dir=bpf_dir).start()
    assert exc.value.exit_code == 3


def test_missing_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpf_source, "headers_dir", lambda: "/nonexistent/build")
    monkeypatch.setattr(bpf_source, "KHEADERS", "/nonexistent/kheaders.tar.xz")
    with pytest.raises(KernelFeatureError, match="kernel headers missing: /nonexistent/build"):
        BpfSource(BpfConfig(hal=False, irq=True)).start()


def test_bcc_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpf_source, "check_headers", lambda: None)
    monkeypatch.setitem(sys.modules, "bcc", None)
    with pytest.raises(KernelFeatureError, match="bcc is not importable"):
        BpfSource(BpfConfig(hal=False, irq=True)).start()


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from npu_trace.cli import main

    assert main(["bpf", "--bpf-binary", "/nonexistent/hal.so"]) == 2
    assert main(["bpf", "--no-hal", "--irq", 'bad"name']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["npu-trace: binary/library not found: /nonexistent/hal.so", err[1]] and "bad IRQ name" in err[1]


def build_generator(tmp_path: Path) -> str:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        pytest.skip("no C compiler")
    exe = str(tmp_path / "gen_syscalls")
    subprocess.run([gcc, "-O2", "-o", exe, str(ROOT / "benchmarks" / "gen_syscalls.c")], check=True)
    return exe


@pytest.mark.privileged
def test_compile_check_compiles_here_and_names_a_compile_failure() -> None:
    """What `doctor` reports: bcc compiles the HAL program here; a broken program is one clear error."""
    from pathlib import Path

    from npu_trace.bpf import kernel
    from npu_trace.bpf.source import compile_check

    variant = kernel.detect(os.uname().release).name  # the one this kernel loads
    assert compile_check() == f"compiled hal_uprobes.bpf.c ({variant}) from {ROOT / 'bpf'}"  # editable: the checkout's
    broken = Path(__file__).parent / "data" / "bpf_broken"
    with pytest.raises(SourceError, match=r"bcc cannot compile hal_uprobes\.bpf\.c"):
        compile_check(broken)
