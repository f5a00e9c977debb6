"""eBPF through bcc: HAL call latency (uprobes), IRQ handler durations (tracepoints), measured in the kernel;
the Ascend driver's tracepoints read by field offsets from their format files (`tracepoints`).

The kernel side lives in the repository's `bpf/` folder (`npu_trace.h` declares every event struct;
`layout` mirrors it), installed as the package `npu_trace.bpf_programs` and found by `files.program_dir()`.
`config.BpfConfig` specialises the programs through `-D` cflags; `decode` turns records into `TraceEvent`s
with synthetic `bpf:*` formats (`formats`), mapped to NpuEvents by `mapping.BPF_MAPPING`; `source.BpfSource`
is the only module that imports bcc.
"""

from __future__ import annotations

from npu_trace.bpf.config import BpfConfig

__all__ = ["BpfConfig"]
