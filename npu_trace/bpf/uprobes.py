"""The HAL's uprobes attached with no reference counter (`ref_ctr_offset` 0), whatever bcc's Python binding passes.

libbcc's `bpf_attach_uprobe` takes seven arguments, the last the offset of a USDT semaphore the kernel keeps a
reference count in (`ref_ctr_offset`); Debian 12's python3-bpfcc 0.26 calls it with six, so the seventh is
whatever lies on the stack (0x6, measured here). The kernel then ties that offset to the probed function, and
every other uprobe on the same function with another one (0: `perf probe`, bpftrace, an ftrace uprobe event such
as the simulator's `ascend` events) is refused while the BPF programs are attached: "ref_ctr_offset mismatch" in
the kernel log, EIO when such an event is enabled. Here the call is made with all seven through a prototype of
our own (an extra argument is harmless where a library takes six: x86-64 and arm64 pass it where it is not
read); the rest is what bcc's attach_uprobe and attach_uretprobe do: the event's name, the probe quota, the fd
kept where bcc's cleanup detaches it. `bcc` is the module the BPF source imported (this one imports none).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict

_PROTOTYPES: Dict[str, Any] = {}  # the library's name -> our prototype of its bpf_attach_uprobe


def attach(bcc: Any, obj: Any, binary: bytes, symbol: bytes, fn_name: bytes, pid: int, ret: bool) -> None:
    """A uprobe (`ret`: a uretprobe) on `symbol` of `binary` running BPF function `fn_name` of `obj` (a bcc.BPF),
    in process `pid` only (-1: every process). Raises Exception as bcc does when it cannot."""
    path, addr = bcc.BPF._check_path_symbol(binary, symbol, None, pid)
    obj._check_probe_quota(1)
    fn = obj.load_func(fn_name, bcc.BPF.KPROBE)
    ev_name = obj._get_uprobe_evname(b"r" if ret else b"p", path, addr, pid)
    fd = _attach_uprobe(bcc)(fn.fd, 1 if ret else 0, ev_name, path, addr, pid, 0)
    if fd < 0:
        raise Exception(f"Failed to attach BPF to {'uretprobe' if ret else 'uprobe'}")
    obj._add_uprobe_fd(ev_name, fd)


def _attach_uprobe(bcc: Any) -> Any:
    name = bcc.libbcc.lib._name
    proto = _PROTOTYPES.get(name)
    if proto is None:
        proto = ctypes.CDLL(name)["bpf_attach_uprobe"]  # a function object of its own: bcc's keeps its prototype
        proto.restype = ctypes.c_int
        proto.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                          ctypes.c_int, ctypes.c_uint32]  # fmt: skip
        _PROTOTYPES[name] = proto
    return proto
