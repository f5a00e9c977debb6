"""Which variant of the BPF programs the running kernel loads: the helpers and the output map it has.

What the programs use that old kernels lack, the mainline release that brought it, and what stands in for it
(chosen by -D cflags only, `bpf/compat.h` and `bpf/output.h`):

    probe_read_user   bpf_probe_read_user/_kernel/_kernel_str   5.5   bpf_probe_read, bpf_probe_read_str
                                                                      (-DNPU_LEGACY_READ)
    ringbuf           the BPF ring buffer                       5.8   a perf event array (-DUSE_PERF_BUFFER)

The rest needs no variant, the programs being written for the oldest: every loop has a constant bound and is
unrolled (bounded loops came in 5.3), each program stays under the 4096 instructions a 4.x verifier takes (the
limit became a million in 5.2; tests/test_bpf_compat.py counts them), and bcc compiles against the kernel's
headers (no BTF needed).

A feature is found by its helper's function in /proc/kallsyms (`bpf_probe_read_user`, `bpf_ringbuf_reserve`), so
a vendor kernel that backported it (EulerOS, Kylin V10 4.19) gets it; when kallsyms cannot be read, the release
number decides. `--compat X.Y` forces the variant of release X.Y: how the old variants are proven on a new kernel.
The field's kernels: CentOS 7.6 4.14 (aarch64, 64 KiB pages), Kylin V10 and EulerOS 2.x 4.19, openEuler 22.03 5.10.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import FrozenSet, Iterable, Optional, Tuple

from npu_trace.errors import UsageError

KALLSYMS = "/proc/kallsyms"


@dataclass(frozen=True)
class Feature:
    name: str
    since: Tuple[int, int]
    symbol: str  # its helper's function in /proc/kallsyms
    what: str
    otherwise: str


FEATURES: Tuple[Feature, ...] = (
    Feature("probe_read_user", (5, 5), "bpf_probe_read_user", "bpf_probe_read_user", "bpf_probe_read"),
    Feature("ringbuf", (5, 8), "bpf_ringbuf_reserve", "the BPF ring buffer", "a perf event array"),
)
ALL = frozenset(f.name for f in FEATURES)
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def parse_release(release: str) -> Tuple[int, int]:
    """(major, minor) of a release string ("4.19.90-52.22.v2207.ky10.aarch64" -> (4, 19))."""
    m = _RELEASE.match(release.strip())
    if not m:
        raise UsageError(f"not a kernel release: {release!r} (e.g. 4.14, 4.19, 5.10)")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Variant:
    """The features a kernel has, how that was found, and what follows for the programs."""

    has: FrozenSet[str]
    how: str  # "/proc/kallsyms of 6.18.44", "release 4.19 (no /proc/kallsyms)", "--compat 4.14"

    @property
    def legacy_read(self) -> bool:
        return "probe_read_user" not in self.has

    @property
    def perf_buffer(self) -> bool:
        return "ringbuf" not in self.has

    @property
    def name(self) -> str:
        if not self.legacy_read and not self.perf_buffer:
            return "ringbuf"
        return "perf buffer" if not self.legacy_read else "legacy (4.x)"

    def cflags(self) -> Tuple[str, ...]:
        return ("-DNPU_LEGACY_READ",) if self.legacy_read else ()

    def describe(self) -> str:
        """ "legacy (4.x): bpf_probe_read for bpf_probe_read_user, a perf event array for the BPF ring buffer
        (--compat 4.14)" """
        uses = [f"{f.otherwise} for {f.what}" for f in FEATURES if f.name not in self.has]
        kept = [f.what for f in FEATURES if f.name in self.has]
        said = "; ".join(uses) if uses else ", ".join(kept)
        return f"{self.name}: {said} ({self.how})"


def of_release(release: str, how: str) -> Variant:
    version = parse_release(release)
    return Variant(frozenset(f.name for f in FEATURES if version >= f.since), how)


def of_symbols(names: Iterable[str], how: str) -> Variant:
    wanted = {f.symbol: f.name for f in FEATURES}
    return Variant(frozenset(wanted[n] for n in names if n in wanted), how)


def forced(release: str) -> Variant:
    """--compat X.Y: the variant that release loads (mainline)."""
    return of_release(release, f"--compat {release}")


def detect(release: str, kallsyms: str = KALLSYMS) -> Variant:
    """The running kernel's variant: from its kallsyms, else from its release number."""
    names = _kallsyms_names(kallsyms, {f.symbol for f in FEATURES})
    if names is None:
        return of_release(release, f"release {release} (no {kallsyms})")
    return of_symbols(names, f"{kallsyms} of {release}")


def _kallsyms_names(path: str, wanted: set) -> Optional[FrozenSet[str]]:
    """Which of `wanted` are function names in kallsyms text (`addr type name [module]` lines), None when it does
    not read (a restricted container)."""
    found = set()
    try:
        with open(path, errors="replace") as f:
            for line in f:
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[2] in wanted:
                    found.add(parts[2])
    except OSError:
        return None
    return frozenset(found)
