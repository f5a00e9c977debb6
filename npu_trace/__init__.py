"""npu-trace: kernel-level tracing for Ascend NPU hosts (core library, runs headless)."""

__version__ = "0.1.0"
__all__ = ["__version__"]
