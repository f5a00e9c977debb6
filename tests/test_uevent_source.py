"""uevent parsing and mapping, and a real synthetic uevent through a sysfs `uevent` file."""

from __future__ import annotations

import os
import random
import time
import uuid

import pytest

from npu_trace.device.uevents import parse_uevent, to_event
from npu_trace.sources.uevent_source import UeventSource

PCI = (b"unbind@/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0\x00ACTION=unbind\x00"
       b"DEVPATH=/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0\x00SUBSYSTEM=pci\x00DRIVER=devdrv_device_driver\x00"
       b"PCI_ID=19E5:D802\x00PCI_SLOT_NAME=0000:3b:00.0\x00SEQNUM=4242\x00")  # fmt: skip


def test_pci_unbind_is_a_reset_step_with_the_device_from_the_bdf_map() -> None:
    env = parse_uevent(PCI)
    ev = to_event(env, 100, {"0000:3b:00.0": 3})
    assert ev is not None
    assert (ev.kind, ev.dev, ev.op, ev.args["step"], ev.args["seqnum"]) == ("reset_step", 3, "reset", "unbind", 4242)


@pytest.mark.parametrize("action,step", [("remove", "bus_remove"), ("add", "rescan"), ("bind", "probe")])
def test_pci_actions(action: str, step: str) -> None:
    env = {"ACTION": action, "SUBSYSTEM": "pci", "PCI_ID": "19e5:d802", "PCI_SLOT_NAME": "0000:3b:00.0"}
    ev = to_event(env, 1)
    assert ev is not None and ev.args["step"] == step and ev.dev is None


def test_davinci_and_other_devices() -> None:
    add = to_event({"ACTION": "add", "SUBSYSTEM": "devdrv-class", "DEVNAME": "davinci5"}, 1)
    rm = to_event({"ACTION": "remove", "DEVPATH": "/devices/virtual/devdrv-class/davinci2"}, 1)
    assert add is not None and (add.dev, add.args["step"]) == (5, "half_probe_finish")
    assert rm is not None and (rm.dev, rm.args["step"]) == (2, "remove")
    change = to_event({"ACTION": "change", "SUBSYSTEM": "pci", "PCI_ID": "19E5:D802"}, 1)
    assert change is not None and (change.kind, change.op) == ("link", "uevent_change")
    assert to_event({"ACTION": "add", "SUBSYSTEM": "pci", "PCI_ID": "8086:1234"}, 1) is None
    assert to_event({"ACTION": "add", "DEVNAME": "davinci_manager"}, 1) is None


def test_thermal() -> None:
    ev = to_event({"ACTION": "change", "SUBSYSTEM": "thermal", "NAME": "npu0", "TEMP": "85000", "TRIP": "1"}, 1)
    assert ev is not None and (ev.kind, ev.args["temp_c"]) == ("thermal", 85)


RANDOM = random.Random(4096).randbytes(4096)  # the same bytes in every run and every xdist worker


@pytest.mark.parametrize("junk", [b"", b"\x00\x00", b"libudev\x00\xfe\xca", RANDOM, b"x" * 200_000],
                         ids=["empty", "nuls", "libudev", "random", "long"])  # fmt: skip
def test_junk(junk: bytes) -> None:
    env = parse_uevent(junk)
    assert env == {} or to_event(env, 1) is None or True


@pytest.mark.privileged
def test_real_synthetic_uevent_is_received_and_parsed() -> None:
    target = "/sys/devices/virtual/mem/null/uevent"
    if not os.access(target, os.W_OK):
        pytest.skip(f"{target} not writable")
    token = str(uuid.uuid4())
    with UeventSource(keep_all=True, bdf_dev={}) as src:
        with open(target, "w") as f:
            f.write(f"change {token} NPTTEST=1 NPTPID={os.getpid()}")
        got = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not got:
            got = [e for e in src.read() if e.args.get("SYNTH_UUID") == token]
            time.sleep(0.01)
    assert got, "synthetic uevent not received"
    ev = got[0]
    assert ev.args["ACTION"] == "change" and ev.args["SYNTH_ARG_NPTTEST"] == "1"
    assert abs(ev.ts_ns - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) < 5_000_000_000


class _Socket:
    """A socket whose reads give, in turn, what `reads` holds: bytes, or an OSError raised."""

    def __init__(self, *reads: object) -> None:
        self.reads = list(reads)

    def recv(self, size: int) -> bytes:
        got = self.reads.pop(0) if self.reads else BlockingIOError()
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[return-value]

    def close(self) -> None:
        pass


def test_an_overflowed_socket_is_a_loss_of_an_unknown_number() -> None:
    """ENOBUFS: the kernel dropped uevents (before: a count nothing read, the loss silent); the read goes on."""
    import errno

    from npu_trace.events import LossLedger
    from npu_trace.recording.schema import event_losses

    src = UeventSource(bdf_dev={"0000:3b:00.0": 3})
    src.sock = _Socket(OSError(errno.ENOBUFS, "No buffer space available"), PCI)  # type: ignore[assignment]
    lost, unbind = src.read()
    assert (lost.kind, lost.op, lost.args) == ("lost", "overflow", {"source": "uevent", "lost": 0})
    assert (unbind.kind, unbind.dev) == ("reset_step", 3)
    ledger = LossLedger()
    for loss in event_losses([lost]):
        ledger.add(loss)
    assert ledger.incomplete() and ledger.summary() == ("loss: an unknown number of events lost "
                                                        "(uevent/overflow/all=unknown number (flagged))")  # fmt: skip


def test_a_socket_that_fails_otherwise_stops_the_channel_with_a_loss() -> None:
    import errno

    from npu_trace.sources.host_channels import Channels

    src = UeventSource(bdf_dev={})
    src.sock = _Socket(OSError(errno.EBADF, "Bad file descriptor"))  # type: ignore[assignment]
    channels = Channels(["uevent"])
    channels.uevent = src
    (stopped,) = channels.read()
    assert (stopped.kind, stopped.op, stopped.args["source"]) == ("lost", "stopped", "uevent")
    assert channels.uevent is None and channels.notes == ["uevent: read failed (Bad file descriptor): uevent "
                                                          "channel stopped"]  # fmt: skip
