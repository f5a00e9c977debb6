"""The exception tree. The CLI turns each into one clear line and an exit code."""

from __future__ import annotations

from typing import Optional

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_USAGE = 2
EXIT_PRIVILEGE = 3


class NpuTraceError(Exception):
    """Base of every error npu-trace raises on purpose."""

    exit_code = EXIT_USAGE


class UsageError(NpuTraceError):
    """Bad command-line arguments or an input the user named (exit 2)."""


class InputError(NpuTraceError):
    """An input file or value that cannot be used (exit 2)."""


class DecodeError(InputError):
    """Bytes or a format description that cannot be decoded."""


class FormatError(DecodeError):
    """A tracefs `format` or `header_page` text that cannot be parsed, or that describes a record no kernel
    writes (damaged). `event`: the format ("system:name") when known, `field`: the field at fault, if one."""

    def __init__(self, message: str, event: Optional[str] = None, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.event = event
        self.field = field


class RecordingError(InputError):
    """A recording file that cannot be written or read (exists, cut inside its header, corrupt, unknown schema).
    `errno`: the OS error's number when one caused it (ENOSPC: the disk is full), else None."""

    def __init__(self, message: str, errno: Optional[int] = None) -> None:
        super().__init__(message)
        self.errno = errno


class SourceError(NpuTraceError):
    """A source could not start or read (exit 3 by default: kernel side)."""

    exit_code = EXIT_PRIVILEGE


class PrivilegeError(SourceError):
    """Missing privilege (root / CAP_SYS_ADMIN / CAP_BPF)."""


class KernelFeatureError(SourceError):
    """The running kernel lacks a feature (tracefs, uprobes, kprobes, BPF, ...)."""


class SimulatorError(NpuTraceError):
    """The simulated NPU could not be built, loaded or run."""

    exit_code = EXIT_PRIVILEGE
