"""The BPF source: the only module that imports bcc (lazily, in `_bcc()`).

`BpfSource(config)` checks everything it can before touching the kernel (sources, headers, binary, symbols,
kprobes, the tracepoints' format files and the fields their programs read), compiles and attaches the
programs, and on any failure detaches everything it attached (`close()` runs bcc's cleanup on every BPF
object). `read(batch)` drains the buffers without blocking and appends decoded `TraceEvent`s and `Loss`
items; the caller polls it on an interval (the kernel side submits with BPF_RB_NO_WAKEUP: nothing wakes per
event).

Readers: each program's ring buffer is mapped and decoded in bulk by `ringbuf.RingBufReader` (no callback per
record); where that cannot be set up (`config.ringbuf_direct` off, a mapping refused) bcc's
`ring_buffer_consume()` with a per-record ctypes callback is the fallback, and the perf buffer (kernels
before 5.8, `config.perf_buffer`) always goes through bcc's callbacks, its lost samples through the lost
callback. `readers` says which reader each program got and why.

Tracepoints read by offsets (`config.tracepoints`): their format files are read from tracefs and resolved by
`tracepoints.plan` (with the profile's struct layouts) into one slot of `trs_tracepoints.bpf.c` each, before
anything is compiled; a tracepoint that does not exist is a KernelFeatureError and nothing is loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npu_trace.bpf import abi, kernel, layout, uprobes
from npu_trace.bpf.config import OPTIONAL_HAL_SYMBOLS, BpfConfig
from npu_trace.bpf.files import program_dir
from npu_trace.bpf.records import Decoder
from npu_trace.bpf.ringbuf import RawRecords, RingBufError, RingBufReader
from npu_trace.bpf.tracepoints import TRS_SPECS, StructLayouts, TpPlan, TpSpec, plan
from npu_trace.elf import Elf
from npu_trace.errors import InputError, KernelFeatureError, SimulatorError, SourceError
from npu_trace.events import Loss, LossLedger
from npu_trace.pipeline.batch import COMMIT_MARGIN_NS, Batch, Mark

if TYPE_CHECKING:
    from importlib.abc import Traversable

KPROBE_PMU = "/sys/bus/event_source/devices/kprobe"
KHEADERS = "/sys/kernel/kheaders.tar.xz"
LOST_KINDS = {layout.NPU_LOST_RESERVE: "dropped", layout.NPU_LOST_PENDING: "unpaired"}
TP_PROGRAM = "trs_tracepoints"


def _bcc() -> Any:
    try:
        import bcc  # the one import of bcc in npu_trace
    except ImportError as exc:
        raise KernelFeatureError(f"bcc is not importable ({exc}); install python3-bpfcc, run scripts/setup") from None
    return bcc


def headers_dir() -> str:
    return f"/lib/modules/{os.uname().release}/build"


def check_headers() -> None:
    if not os.path.isdir(headers_dir()) and not os.path.exists(KHEADERS):
        raise KernelFeatureError(f"kernel headers missing: {headers_dir()} (bcc cannot compile; run scripts/setup)")


def compile_check(bpf_dir: Optional[Traversable] = None) -> str:
    """Compile the HAL program of `bpf_dir` (default: the installed programs), attach nothing, unload it: can
    bcc build programs here? Raises KernelFeatureError/SourceError saying why not; returns what it compiled."""
    check_headers()
    bcc = _bcc()
    variant = kernel_variant(BpfConfig())
    with program_dir(bpf_dir) as folder:
        _compile(bcc, folder, "hal_uprobes", with_variant(BpfConfig(), variant).hal_cflags()).cleanup()
    return f"compiled hal_uprobes.bpf.c ({variant.name}) from {folder}"


def read_tracepoint_format(tracepoint: str) -> Optional[str]:
    """The tracefs format text of "system:name", None when this kernel has no such tracepoint."""
    from npu_trace.ftrace.tracefs import Tracefs

    system, name = tracepoint.split(":", 1)
    fs = Tracefs.find()
    if not fs.has_event_format(system, name):
        return None
    return fs.event_format(system, name)


def tracepoint_cflags(config: BpfConfig, plans: Sequence[TpPlan]) -> List[str]:
    return [*config.tracepoint_cflags(), *(flag for p in plans for flag in p.cflags())]


def compile_tracepoints(
    plans: Sequence[TpPlan], config: Optional[BpfConfig] = None, bpf_dir: Optional[Traversable] = None
) -> str:
    """Compile the tracepoint program for `plans` and load each slot's function into the kernel (the verifier
    checks it) without attaching anything, then unload it: would these offsets run here? Raises SourceError
    saying why not. bpf_dir: the programs' directory (default: the installed programs)."""
    check_headers()
    bcc = _bcc()
    cflags = tracepoint_cflags(config or BpfConfig(hal=False), plans)
    with program_dir(bpf_dir) as folder:
        obj = _compile(bcc, folder, TP_PROGRAM, cflags)
        try:
            for p in plans:
                _load_tracepoint_func(bcc, obj, p)
        finally:
            obj.cleanup()
    return f"compiled {TP_PROGRAM}.bpf.c and loaded {', '.join(p.function for p in plans)} (nothing attached)"


def _compile(bcc: Any, folder: Path, program: str, cflags: Sequence[str]) -> Any:
    """bcc.BPF of `<folder>/<program>.bpf.c` with `folder` on the include path (loads nothing yet)."""
    src = folder / f"{program}.bpf.c"
    try:
        return bcc.BPF(src_file=str(src).encode(), cflags=[f"-I{folder}", *cflags])
    except Exception as exc:  # bcc raises plain Exception for compile failures
        raise SourceError(f"bcc cannot compile {src.name}: {exc}") from None


def _load_tracepoint_func(bcc: Any, obj: Any, p: TpPlan) -> None:
    try:
        obj.load_func(p.function.encode(), bcc.BPF.TRACEPOINT)
    except Exception as exc:  # bcc: plain Exception; the verifier's log went to stderr
        raise SourceError(f"cannot load {p.function} for tracepoint {p.spec.tracepoint}: {exc}") from None


def kernel_variant(config: BpfConfig) -> kernel.Variant:
    """The variant `config.compat` names, else the running kernel's."""
    if config.compat is not None:
        return kernel.forced(config.compat)
    return kernel.detect(os.uname().release)


def with_variant(config: BpfConfig, variant: kernel.Variant) -> BpfConfig:
    """`config` with what `variant` needs (a perf buffer, the legacy read helpers) on top of what it asks."""
    return replace(config, perf_buffer=config.perf_buffer or variant.perf_buffer,
                   legacy_read=config.legacy_read or variant.legacy_read)  # fmt: skip


def check_kprobes(symbols: Tuple[str, ...]) -> None:
    if not symbols:
        return
    if not os.path.isdir(KPROBE_PMU):
        raise KernelFeatureError(
            f"kprobes requested ({', '.join(symbols)}) but this kernel has none (CONFIG_KPROBES off)"
        )
    raise KernelFeatureError("kprobe programs on driver symbols are not implemented yet")


def check_binary(path: Optional[str], symbols: Tuple[str, ...]) -> str:
    if not path:
        raise InputError("HAL uprobes need a binary or library path (--bpf-binary)")
    if not os.path.isfile(path):
        raise InputError(f"binary/library not found: {path}")
    try:
        found = Elf.open(path).functions()
    except (OSError, SimulatorError) as exc:
        raise InputError(f"cannot read ELF symbols of {path}: {exc}") from None
    missing = [s for s in symbols if s not in found]
    if missing:
        raise InputError(f"symbol {', '.join(missing)} not in {path}")
    return path


class BpfSource:
    """Compiled and attached BPF programs; a context manager (close() detaches everything)."""

    def __init__(
        self,
        config: BpfConfig,
        bpf_dir: Optional[Traversable] = None,
        tracepoint_specs: Optional[Mapping[str, TpSpec]] = None,
        layouts: Optional[StructLayouts] = None,
    ) -> None:
        """bpf_dir: the programs' directory (default: the installed programs, `files.program_dir()`);
        tracepoint_specs: what each of `config.tracepoints` reads (default: the Ascend driver's five);
        layouts: the struct layouts of their struct-typed fields (default: the ascend profile's)."""
        self.config = config
        self.variant: Optional[kernel.Variant] = None  # what the running kernel (or --compat) loads, from start()
        self.bpf_root = bpf_dir
        self.bpf_dir: Optional[Path] = None  # the real directory bcc compiles from, from start() to close()
        self._files = contextlib.ExitStack()  # keeps that directory (a temporary copy, from a zip) alive
        self.tracepoint_specs: Mapping[str, TpSpec] = TRS_SPECS if tracepoint_specs is None else tracepoint_specs
        self.layouts = layouts
        self.tracepoint_plans: Tuple[TpPlan, ...] = ()
        self.decoder = Decoder(self.tracepoint_specs.values())
        self.objects: Dict[str, Any] = {}  # program name -> bcc.BPF
        self.lost_seen: Dict[Tuple[str, int, int], int] = {}  # (program, slot, cpu) -> count reported
        self.perf_lost = 0
        self.events_read = 0
        self.discarded = 0  # ring buffer records the programs discarded (none of ours do; not a loss)
        self.readers: Dict[str, str] = {}  # program -> "mmap" | "bcc callback (<why>)" | "perf buffer"
        self.hal_abis: Dict[str, str] = {}  # HAL file -> the ABI its uprobes read (npu_trace.bpf.abi)
        self.hal_symbols: Dict[str, Tuple[str, ...]] = {}  # HAL file -> the symbols uprobed in it
        self._rings: Dict[str, RingBufReader] = {}  # program -> its mapped ring buffer (the direct reader)
        self._records: List[bytes] = []
        self._callbacks: List[Any] = []  # keep ctypes callbacks alive
        self.hist_snapshot: Dict[Tuple[int, str], Dict[int, int]] = {}  # histograms() as close() found them

    # ---- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> BpfSource:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.config = cfg = self._with_variant()
        check_kprobes(cfg.kprobes)
        binary = check_binary(cfg.binary, cfg.hal_symbols) if cfg.hal else None
        more = [check_binary(path, cfg.hal_symbols) for path in cfg.more_binaries] if cfg.hal else []
        if not (cfg.hal or cfg.irq or cfg.tracepoints):
            raise InputError("nothing to trace: enable HAL uprobes, IRQs or tracepoints")
        check_headers()
        plans = self._plan_tracepoints() if cfg.tracepoints else ()
        bcc = _bcc()
        try:
            self._programs()
            if binary:
                self._attach_hal(bcc, [binary, *more])
            if cfg.irq:
                self._load(bcc, "irq", cfg.irq_cflags())
            if plans:
                self._attach_tracepoints(bcc, plans)
        except BaseException:
            self.close()
            raise

    def start_bench(self) -> None:
        """The benchmark's getpid tracepoint program only."""
        self.config = self._with_variant()
        check_headers()
        bcc = _bcc()
        try:
            self._load(bcc, "bench_getpid", self.config.bench_cflags())
        except BaseException:
            self.close()
            raise

    def _with_variant(self) -> BpfConfig:
        """The configuration with what the kernel's variant needs (found once)."""
        if self.variant is None:
            self.variant = kernel_variant(self.config)
        return with_variant(self.config, self.variant)

    def close(self) -> None:
        if self.objects:
            self.hist_snapshot = self.histograms()
        while self._rings:
            _, ring = self._rings.popitem()
            ring.close()
        while self.objects:
            _, obj = self.objects.popitem()
            obj.cleanup()
        self._files.close()
        self.bpf_dir = None

    # ---- loading --------------------------------------------------------------------------------------
    def _programs(self) -> Path:
        """The programs' directory, opened on first use and kept until close()."""
        if self.bpf_dir is None:
            folder = self._files.enter_context(program_dir(self.bpf_root))
            if not (folder / "npu_trace.h").is_file():
                raise SourceError(f"BPF sources not found in {folder}")
            self.bpf_dir = folder
        return self.bpf_dir

    def _load(self, bcc: Any, program: str, cflags: List[str]) -> Any:
        folder = self._programs()
        src = folder / f"{program}.bpf.c"
        try:
            obj = bcc.BPF(src_file=str(src).encode(), cflags=[f"-I{folder}", *cflags])
        except Exception as exc:  # bcc raises plain Exception for compile and load failures
            raise SourceError(f"cannot compile/load {src.name}: {exc} (clang's messages above)") from None
        self.objects[program] = obj
        self._open_output(obj, program)
        return obj

    def _attach_hal(self, bcc: Any, binaries: List[str]) -> None:
        obj = self._load(bcc, "hal_uprobes", self.config.hal_cflags())
        pids = self.config.pids
        pid = pids[0] if len(pids) == 1 else -1  # one process: the uprobes fire only in it (FILTER_PIDS checks too)
        for binary in binaries:
            self.hal_abis[binary] = abi.detect(binary, self.config.hal_abi)
        for binary, sym in ((b, s) for b in binaries for s in self._symbols(b)):
            entry = abi.ENTRY_FUNCS[self.hal_abis[binary]][sym]
            try:
                path, name = binary.encode(), sym.encode()
                uprobes.attach(bcc, obj, path, name, entry.encode(), pid, ret=False)  # no reference counter
                uprobes.attach(bcc, obj, path, name, b"hal_return", pid, ret=True)
            except Exception as exc:  # bcc: plain Exception
                raise SourceError(f"cannot attach uprobe {binary}:{sym}: {exc}") from None

    def _symbols(self, binary: str) -> Tuple[str, ...]:
        """The HAL symbols traced in `binary`: the configured ones, and for the real ABI the optional ones the
        file has (halSqMemGet, halSqMsgSend)."""
        optional: Tuple[str, ...] = ()
        if self.hal_abis[binary] == abi.REAL:
            functions = Elf.open(binary).functions()
            optional = tuple(s for s in OPTIONAL_HAL_SYMBOLS if s in functions)
        self.hal_symbols[binary] = (*self.config.hal_symbols, *optional)
        return self.hal_symbols[binary]

    def _plan_tracepoints(self) -> Tuple[TpPlan, ...]:
        layouts = self.layouts
        if layouts is None:
            from npu_trace.device.profiles import ASCEND_LAYOUTS

            layouts = ASCEND_LAYOUTS
        self.tracepoint_plans = plan(self.config.tracepoints, self.tracepoint_specs, read_tracepoint_format, layouts)
        return self.tracepoint_plans

    def _attach_tracepoints(self, bcc: Any, plans: Sequence[TpPlan]) -> None:
        obj = self._load(bcc, TP_PROGRAM, tracepoint_cflags(self.config, plans))
        for p in plans:
            _load_tracepoint_func(bcc, obj, p)
            tp = p.spec.tracepoint
            try:
                obj.attach_tracepoint(tp=tp.encode(), fn_name=p.function.encode())
            except Exception as exc:  # bcc: plain Exception
                if read_tracepoint_format(tp) is None:  # gone since it was planned (the driver was unloaded)
                    raise KernelFeatureError(f"tracepoint {tp} does not exist on this kernel") from None
                raise KernelFeatureError(f"cannot attach tracepoint {tp}: {exc}") from None

    def _open_output(self, obj: Any, program: str) -> None:
        table = obj[b"events"]
        if self.config.perf_buffer:
            cb, lost_cb = self._perf_callback(), self._lost_callback()
            self._callbacks += [cb, lost_cb]
            table.open_perf_buffer(cb, page_cnt=self.config.perf_pages, lost_cb=lost_cb, wakeup_events=1 << 20)
            self.readers[program] = "perf buffer"
            return
        why = "ringbuf_direct off"
        if self.config.ringbuf_direct:
            try:
                self._rings[program] = RingBufReader.open(int(table.map_fd), int(table.max_entries))
                self.readers[program] = "mmap"
                return
            except (RingBufError, AttributeError, TypeError, ValueError) as exc:
                why = str(exc)
        ring_cb = self._ring_callback()
        self._callbacks.append(ring_cb)
        table.open_ring_buffer(ring_cb)
        self.readers[program] = f"bcc callback ({why})"

    def _ring_callback(self) -> Callable[[Any, int, int], int]:
        append, string_at = self._records.append, ctypes.string_at

        def on_record(_ctx: Any, data: int, size: int) -> int:
            append(string_at(data, size))
            return 0  # bcc 0.26: a callback returning None costs an exception per record

        return on_record

    def _perf_callback(self) -> Callable[[Any, int, int], None]:
        append, string_at = self._records.append, ctypes.string_at

        def on_record(_cpu: Any, data: int, size: int) -> None:
            append(string_at(data, size))

        return on_record

    def _lost_callback(self) -> Callable[[int], None]:
        def on_lost(count: int) -> None:
            self.perf_lost += count

        return on_lost

    # ---- reading --------------------------------------------------------------------------------------
    def read(self, batch: List[Any], max_bytes: Optional[int] = None) -> int:
        """Drain every buffer without blocking; append decoded events then losses. Returns records read.

        max_bytes: read at most about that much of each mapped ring buffer (the rest stays for the next read;
        `pending()` says how much): a caller that keeps its batches small this way decodes faster (they stay
        in the CPU caches) and can poll again at once while `pending()` is large."""
        n = 0
        for program, obj in self.objects.items():
            ring = self._rings.get(program)
            if ring is not None:
                n += self._read_ring(program, ring, self.decoder, batch, max_bytes)
            elif self.config.perf_buffer:
                obj.perf_buffer_consume()
            else:
                obj.ring_buffer_consume()
        if self._records:
            records = self._records[:]
            self._records.clear()
            n += len(records)
            batch.extend(filter(None, map(self.decoder.decode, records)))
        self.events_read += n
        batch.extend(self.decoder.losses())
        batch.extend(self.losses())
        return n

    def _read_ring(
        self, program: str, ring: RingBufReader, decoder: Any, out: List[Any], max_bytes: Optional[int] = None
    ) -> int:
        try:
            got = ring.read(decoder, out, max_bytes)
        except RingBufError as exc:
            raise SourceError(f"ring buffer of {program}: {exc}") from None
        self.discarded += got.discarded
        return got.records

    def pending(self) -> int:
        """Bytes written to the mapped ring buffers and not read yet (0 for the callback readers: unknown)."""
        return sum(ring.pending() for ring in self._rings.values())

    def read_raw(self) -> List[bytes]:
        """Drain every buffer; the undecoded records (the benchmark's decode-free baseline)."""
        raw: List[Any] = []
        for program, obj in self.objects.items():
            ring = self._rings.get(program)
            if ring is not None:
                self._read_ring(program, ring, RawRecords(), raw)
            elif self.config.perf_buffer:
                obj.perf_buffer_consume()
            else:
                obj.ring_buffer_consume()
        raw += self._records
        self._records.clear()
        return raw

    def losses(self) -> List[Loss]:
        """New losses since the last call: per-CPU `lost` counters of every program, perf lost samples."""
        out: List[Loss] = []
        for program, obj in self.objects.items():
            out += self._map_losses(program, obj)
        if self.perf_lost:
            out.append(Loss("bpf", -1, "dropped", self.perf_lost))
            self.perf_lost = 0
        return out

    def _map_losses(self, program: str, obj: Any) -> List[Loss]:
        out = []
        table = obj[b"lost"]
        for slot, kind in LOST_KINDS.items():
            for cpu, total in enumerate(table[ctypes.c_int(slot)]):
                key = (program, slot, cpu)
                new = int(total) - self.lost_seen.get(key, 0)
                if new > 0:
                    self.lost_seen[key] = int(total)
                    out.append(Loss("bpf", cpu, kind, new))
        return out

    def lost_total(self) -> int:
        return sum(self.lost_seen.values())

    def histograms(self) -> Dict[Tuple[int, str], Dict[int, int]]:
        """Aggregate mode: {(dev, op): {log2 slot: count}}."""
        from npu_trace.bpf.formats import OPS

        obj = self.objects.get("hal_uprobes")
        if obj is None or not self.config.aggregate:
            return {}
        out: Dict[Tuple[int, str], Dict[int, int]] = {}
        for key, value in obj[b"hist"].items():
            op = OPS[key.op] if key.op < len(OPS) else str(key.op)
            out.setdefault((key.dev, op), {})[key.slot] = int(value.value)
        return out


class BpfStream:
    """A started `BpfSource` as a pump source (`npu-trace bpf`): each read drains the ring buffers, at most
    `read_bytes` of each, into one batch of decoded events on the channels' stream, with a watermark once
    everything was read (what is not reserved yet is stamped later, less the commit margin)."""

    def __init__(self, source: BpfSource, read_bytes: int = 256 << 10) -> None:
        self.source = source
        self.read_bytes = read_bytes
        self.ledger = LossLedger()  # the losses the BPF side reported (reserve failures, perf lost samples)
        self._ended = False

    def read(self) -> Batch:
        return self._read(self.read_bytes)

    def _read(self, max_bytes: Optional[int], final: bool = False) -> Batch:
        started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        items: List[Any] = []
        self.source.read(items, max_bytes)
        for loss in (item for item in items if isinstance(item, Loss)):
            self.ledger.add(loss)
        items.sort(key=_ts_ns)
        drained = not self.source.pending()
        return Batch([], items, Mark(started, (), started - COMMIT_MARGIN_NS if drained else None), final=final)

    def idle(self) -> bool:
        return self.source.pending() < self.read_bytes

    def done(self) -> bool:
        return self._ended

    def finish(self) -> Batch:
        self._ended = True
        return self._read(None, final=True)


def _ts_ns(item: Any) -> int:
    return int(item.ts_ns)
