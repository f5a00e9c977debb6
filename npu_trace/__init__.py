"""npu-trace: kernel-level tracing for Ascend NPU hosts (core library, runs headless)."""

import os

# npu-trace calls no BLAS routine, but numpy's OpenBLAS starts a thread per CPU when numpy is imported, and they
# spin before they sleep: 0.14 s of CPU for the import became 0.09 s with one (every command pays it, on the CPUs
# the tracer's own threads need). A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
__all__ = ["__version__"]
