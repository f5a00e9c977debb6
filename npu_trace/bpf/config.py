"""What the BPF programs trace, frozen before load and turned into `-D` cflags (never C text edits)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from npu_trace.bpf.kernel import parse_release
from npu_trace.bpf.layout import NPU_TP_SLOTS
from npu_trace.device.chips import LAYOUTS
from npu_trace.errors import UsageError

MAX_IRQ_FILTERS = 4  # IRQ_PREFIX_0..3 and IRQ_NUM_0..3 in irq.bpf.c
MAX_SCOPE_VALUES = 8  # NPU_SCOPE_MAX in scope.h: pids, task names, devices
IRQ_NAME_MAX = 31  # NPU_IRQ_NAME_LEN - 1
COMM_MAX = 15  # NPU_COMM_LEN - 1
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:+-]+$")
_TRACEPOINT = re.compile(r"^[A-Za-z0-9_]+:[A-Za-z0-9_]+$")
HAL_SYMBOLS: Tuple[str, ...] = ("halMemAlloc", "halMemFree", "halSqTaskSend", "halCqReportRecv")
# the real HAL's other task path (the 910's and 310P's runtime: a slot, then its commands), traced where the file
# has these symbols and gets the real ABI
OPTIONAL_HAL_SYMBOLS: Tuple[str, ...] = ("halSqMemGet", "halSqMsgSend")


@dataclass(frozen=True)
class BpfConfig:
    """hal: uprobes on the HAL symbols of `binary`; irq: handler durations of the IRQs named by `irq_names`
    (prefixes) or `irq_numbers` (none: every IRQ); kprobes: driver symbols (needs a kernel with kprobes);
    tracepoints: "system:name" of tracepoints read by field offsets (the driver's trs_chan:*, trs_core:*; see
    npu_trace.bpf.tracepoints), one program slot each, `devs` filtering them too (not `pids` nor `comms`).
    pids (thread-group ids: every thread of each process), comms (the task's own name) and devs scope the HAL
    calls in the kernel (bpf/scope.h); the IRQ program is scoped by its names and numbers only.
    ringbuf_direct chooses only how user space reads the ring buffer (no cflag): from its own mapping of it, or
    through bcc's per-record callback.
    The kernel's variant (npu_trace.bpf.kernel): `compat` "X.Y" loads the variant of that release, None the
    running kernel's (BpfSource.start finds it and sets `perf_buffer` / `legacy_read` accordingly; either set
    here forces it). `task_layout`: the chip's task layout (npu_trace.device.chips.LAYOUTS), where the real HAL's
    task descriptors carry their stream and task ids ("unknown": left empty)."""

    binary: Optional[str] = None
    more_binaries: Tuple[str, ...] = ()  # further copies of the HAL (a container's own), the same uprobes on each
    hal_abi: Optional[str] = None  # "real" / "sim" for every file; None: each file's own (npu_trace.bpf.abi)
    hal: bool = True
    hal_symbols: Tuple[str, ...] = HAL_SYMBOLS
    irq: bool = False
    irq_names: Tuple[str, ...] = ()
    irq_numbers: Tuple[int, ...] = ()
    kprobes: Tuple[str, ...] = ()
    tracepoints: Tuple[str, ...] = ()
    pids: Tuple[int, ...] = ()
    comms: Tuple[str, ...] = ()
    devs: Tuple[int, ...] = ()
    threshold_ns: int = 0
    aggregate: bool = False
    ringbuf_pages: int = 256
    ringbuf_direct: bool = True  # read the ring buffer from its mapping (npu_trace.bpf.ringbuf), not bcc's callback
    perf_buffer: bool = False
    perf_pages: int = 64
    max_pending: int = 10240
    legacy_read: bool = False  # bpf_probe_read instead of the _user/_kernel helpers (kernels before 5.5)
    compat: Optional[str] = None  # "4.14": the variant of that kernel release; None: the running kernel's
    task_layout: str = "unknown"

    def __post_init__(self) -> None:
        if self.ringbuf_pages <= 0 or self.ringbuf_pages & (self.ringbuf_pages - 1):
            raise UsageError(f"ring buffer pages must be a power of two, not {self.ringbuf_pages}")
        if self.threshold_ns < 0 or self.max_pending <= 0 or self.perf_pages <= 0:
            raise UsageError("threshold, pending and perf pages must not be negative")
        if len(self.irq_names) > MAX_IRQ_FILTERS or len(self.irq_numbers) > MAX_IRQ_FILTERS:
            raise UsageError(f"at most {MAX_IRQ_FILTERS} IRQ names and {MAX_IRQ_FILTERS} IRQ numbers")
        for name in self.irq_names:
            if not _SAFE_NAME.match(name) or len(name) > IRQ_NAME_MAX:
                raise UsageError(f"bad IRQ name prefix {name!r} (1-{IRQ_NAME_MAX} of [A-Za-z0-9_.:+-])")
        if len(self.tracepoints) > NPU_TP_SLOTS or len(set(self.tracepoints)) != len(self.tracepoints):
            raise UsageError(f"at most {NPU_TP_SLOTS} distinct tracepoints, not {list(self.tracepoints)}")
        for tp in self.tracepoints:
            if not _TRACEPOINT.match(tp):
                raise UsageError(f"bad tracepoint {tp!r} (system:name)")
        self._check_scope()
        if self.hal_abi is not None and self.hal_abi not in ("real", "sim"):
            raise UsageError(f"unknown HAL ABI {self.hal_abi!r} (real or sim)")
        unknown = set(self.hal_symbols) - set(HAL_SYMBOLS)
        if unknown:
            raise UsageError(f"unknown HAL symbols {sorted(unknown)} (known: {', '.join(HAL_SYMBOLS)})")
        if self.compat is not None:
            parse_release(self.compat)
        if self.task_layout not in LAYOUTS:
            raise UsageError(f"unknown task layout {self.task_layout!r} (one of {', '.join(LAYOUTS)})")

    def _check_scope(self) -> None:
        for name, values in (("pids", self.pids), ("comms", self.comms), ("devices", self.devs)):
            if len(values) > MAX_SCOPE_VALUES:
                raise UsageError(f"at most {MAX_SCOPE_VALUES} {name} for BPF, not {len(values)}")
        if any(p <= 0 for p in self.pids) or any(d < 0 for d in self.devs):
            raise UsageError("pids must be positive and devices not negative")
        for comm in self.comms:
            if not _SAFE_NAME.match(comm) or len(comm) > COMM_MAX:
                raise UsageError(f"bad task name {comm!r} for BPF (1-{COMM_MAX} of [A-Za-z0-9_.:+-])")

    def scope_cflags(self, tasks: bool = True, devices: bool = True) -> List[str]:
        """FILTER_PIDS / FILTER_COMMS (`tasks`) and FILTER_DEVS (`devices`) lists (bpf/scope.h)."""
        flags = []
        if tasks and self.pids:
            flags.append(f"-DFILTER_PIDS={','.join(map(str, self.pids))}")
        if tasks and self.comms:
            flags.append("-DFILTER_COMMS=" + ",".join(f'"{c}"' for c in self.comms))
        if devices and self.devs:
            flags.append(f"-DFILTER_DEVS={','.join(map(str, self.devs))}")
        return flags

    def common_cflags(self) -> List[str]:
        flags = [f"-DRINGBUF_PAGES={self.ringbuf_pages}"]
        if self.perf_buffer:
            flags.append("-DUSE_PERF_BUFFER")
        if self.legacy_read:
            flags.append("-DNPU_LEGACY_READ")
        if self.threshold_ns:
            flags.append(f"-DTHRESHOLD_NS={self.threshold_ns}ULL")
        return flags

    def hal_cflags(self) -> List[str]:
        flags = [*self.common_cflags(), f"-DMAX_PENDING={self.max_pending}", *self.scope_cflags()]
        flags += LAYOUTS[self.task_layout].cflags()
        if self.aggregate:
            flags.append("-DAGGREGATE")
        return flags

    def irq_cflags(self) -> List[str]:
        flags = self.common_cflags()
        flags += [f'-DIRQ_PREFIX_{i}="{name}"' for i, name in enumerate(self.irq_names)]
        flags += [f"-DIRQ_NUM_{i}={num}" for i, num in enumerate(self.irq_numbers)]
        return flags

    def tracepoint_cflags(self) -> List[str]:
        """The tracepoint program's common flags; each slot adds its offsets (tracepoints.TpPlan.cflags)."""
        return [*self.common_cflags(), *self.scope_cflags(tasks=False)]

    def bench_cflags(self) -> List[str]:
        return [*self.common_cflags(), *self.scope_cflags(devices=False)]
