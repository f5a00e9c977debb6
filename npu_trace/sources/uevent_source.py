"""The netlink source: kobject uevents (NETLINK_KOBJECT_UEVENT, the kernel's multicast group) for the NPU's PCI
devices and the driver's `davinci*` class devices, plus thermal zone events, as NpuEvents (what they mean:
`npu_trace.device.uevents`).

The socket is a plain non-blocking AF_NETLINK datagram socket (pyroute2's `UeventSocket` is the same socket behind
a blocking reader thread; the protocol number comes from pyroute2). A uevent carries no timestamp: events get
CLOCK_MONOTONIC (the trace clock) at receive time, so their offset is 0 and their error the receive latency.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Any, Dict, List, Optional

from npu_trace.device.uevents import MAX_DATAGRAM, parse_uevent, to_event
from npu_trace.events import Loss, NpuEvent, lost_event

KERNEL_GROUP = 1
def sysfs_bdf_dev(root: str = "/sys/bus/pci/devices") -> Dict[str, int]:
    """PCI slot -> NPU device id from the driver's sysfs `dev_id` files (empty without the driver)."""
    out: Dict[str, int] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(root, name, "dev_id")) as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit():
            out[name.lower()] = int(text)
    return out


class UeventSource:
    """open() -> read() -> [NpuEvent] (non-blocking) -> close(). `keep_all` also returns every other uevent
    (kind "log", op "uevent") — for tests and debugging."""

    def __init__(self, keep_all: bool = False, bdf_dev: Optional[Dict[str, int]] = None) -> None:
        self.keep_all = keep_all
        self.bdf_dev = dict(bdf_dev) if bdf_dev is not None else sysfs_bdf_dev()
        self.sock: Optional[socket.socket] = None
        self.stats = {"received": 0, "events": 0, "dropped_overflow": 0}

    def __enter__(self) -> UeventSource:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> None:
        # pyroute2 is imported here, not with the module: its import costs every command ~0.1 s of start-up
        from pyroute2.netlink import NETLINK_KOBJECT_UEVENT

        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((0, KERNEL_GROUP))
        sock.setblocking(False)
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock else -1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def read(self) -> List[NpuEvent]:
        out: List[NpuEvent] = []
        while self.sock is not None:
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise  # the channel stops (npu_trace.sources.host_channels), a loss of its own
                # the socket overflowed: uevents were lost, how many the kernel does not say
                self.stats["dropped_overflow"] += 1
                out.append(lost_event(Loss("uevent", -1, "overflow", 0, time.clock_gettime_ns(time.CLOCK_MONOTONIC))))
                continue
            self._one(data, out)
        return out

    def _one(self, data: bytes, out: List[NpuEvent]) -> None:
        self.stats["received"] += 1
        env = parse_uevent(data)
        if not env:
            return
        ts = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ev = to_event(env, ts, self.bdf_dev)
        if ev is None and self.keep_all:
            ev = NpuEvent(ts, "log", None, "uevent", -1, -1, {"source": "uevent", **env})
        if ev is not None:
            self.stats["events"] += 1
            out.append(ev)
