"""The health source: `npu-smi` polled at an interval, and the sysfs PCIe link of vendor 0x19e5 devices.

A background thread polls (`npu-smi info` for the devices, then `info -t ecc|temp|health|pcie-err -i <npu>
-c <chip>` per chip); `read()` never blocks: it returns the NpuEvents gathered since the last call (see
`npu_trace.device.npusmi.HealthTracker` for the kinds). Every npu-smi run has a timeout and an output bound: a
hanging, garbage-printing or missing npu-smi gives a note (rate-limited: one per problem per `NOTE_EVERY_S`;
"missing" once), never a stall. Notes are in `notes()` and as "log" events op "health_note".

PCIe: /sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width} and the AER totals
(aer_dev_{correctable,nonfatal,fatal} "TOTAL_..." lines) -> "link" events op "pcie_link" when they change,
with `degraded` = 1 when the link runs below its maximum speed or width.
"""

from __future__ import annotations

import os
import queue
import select
import shutil
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from npu_trace.device.npusmi import HealthTracker, parse_fields, parse_info
from npu_trace.events import NpuEvent

VENDOR = "0x19e5"
PCI_ROOT = "/sys/bus/pci/devices"
MAX_OUTPUT = 256 * 1024  # bytes of one npu-smi output kept
NOTE_EVERY_S = 60.0
QUERIES = ("ecc", "temp", "health", "pcie-err")


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def run_bounded(argv: List[str], timeout_s: float, limit: int = MAX_OUTPUT) -> Tuple[str, str]:
    """(status, stdout): status "ok", "timeout", "too_long", "failed:<rc>" or "missing"."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    except OSError:
        return "missing", ""
    assert proc.stdout is not None
    chunks: List[bytes] = []
    size, deadline, status = 0, time.monotonic() + timeout_s, "ok"
    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.1))
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
        size += len(data)
        if size > limit:
            status = "too_long"
            break
    if status != "ok":
        proc.kill()
    proc.stdout.close()
    rc = proc.wait()
    if status == "ok" and rc != 0:
        status = f"failed:{rc}"
    return status, b"".join(chunks)[:limit].decode("utf-8", "replace")


class Notes:
    """Rate-limited notes: each key at most once per `every_s` (forever for once=True)."""

    def __init__(self, every_s: float = NOTE_EVERY_S) -> None:
        self.every = every_s
        self.shown: Dict[str, float] = {}
        self.suppressed: Dict[str, int] = {}

    def note(self, key: str, once: bool = False) -> bool:
        now = time.monotonic()
        last = self.shown.get(key)
        if last is not None and (once or now - last < self.every):
            self.suppressed[key] = self.suppressed.get(key, 0) + 1
            return False
        self.shown[key] = now
        return True


class HealthSource:
    def __init__(
        self, interval_s: float = 5.0, timeout_s: float = 3.0, npu_smi: str = "npu-smi", pci_root: str = PCI_ROOT
    ) -> None:
        self.interval = interval_s
        self.timeout = timeout_s
        self.npu_smi = npu_smi
        self.pci_root = pci_root
        self.tracker = HealthTracker()
        self.limiter = Notes()
        self.links: Dict[str, Dict[str, Any]] = {}
        self._queue: queue.Queue[NpuEvent] = queue.Queue()
        self._notes: List[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()  # orders the poll's start against a read's watermark
        self._busy_since: Optional[int] = None  # the running poll's start
        self.watermark_ns = 0  # no reading stamped before this can still come (set by read())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="npu-trace-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)
            self._thread = None

    def __enter__(self) -> HealthSource:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def read(self) -> List[NpuEvent]:
        with self._lock:  # before draining: a poll that starts after this stamps later than `now`
            now, busy = mono_ns(), self._busy_since
        self.watermark_ns = now if busy is None else busy
        out: List[NpuEvent] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def notes(self) -> List[str]:
        return list(self._notes)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._busy_since = mono_ns()
            for ev in self.poll():
                self._queue.put(ev)
            with self._lock:
                self._busy_since = None
            self._stop.wait(self.interval)

    # ---- one poll (synchronous; the thread calls it) ---------------------------------------------------
    def poll(self) -> List[NpuEvent]:
        return self.poll_npu_smi() + self.poll_pcie()

    def poll_npu_smi(self) -> List[NpuEvent]:
        if shutil.which(self.npu_smi) is None:
            return self._note("missing", f"{self.npu_smi} not found on PATH: no npu-smi readings", once=True)
        status, text = run_bounded([self.npu_smi, "info"], self.timeout)
        if status != "ok":
            return self._note(f"info:{status}", f"npu-smi info: {status}")
        chips = parse_info(text)
        if not chips:
            return self._note("info:garbage", "npu-smi info: no device table in its output")
        out: List[NpuEvent] = []
        for chip in chips:
            out.extend(self._chip(chip.npu, chip.chip))
        return out

    def _chip(self, npu: int, chip: int) -> List[NpuEvent]:
        # stamped when the queries start: each value was read at or after this time, so for counters that only
        # grow (ECC) a reading never appears later than an event that raised it
        started = mono_ns()
        fields: Dict[str, Any] = {}
        out: List[NpuEvent] = []
        for query in QUERIES:
            argv = [self.npu_smi, "info", "-t", query, "-i", str(npu), "-c", str(chip)]
            status, text = run_bounded(argv, self.timeout)
            if status != "ok":
                out.extend(self._note(f"{query}:{status}", f"npu-smi info -t {query}: {status}", dev=npu))
                continue
            fields.update(parse_fields(text))
        return out + self.tracker.update(npu, fields, started)

    def _note(self, key: str, text: str, once: bool = False, dev: Optional[int] = None) -> List[NpuEvent]:
        if not self.limiter.note(key, once):
            return []
        self._notes.append(text)
        return [NpuEvent(mono_ns(), "log", dev, "health_note", -1, -1, {"source": "health", "note": text})]

    # ---- sysfs PCIe --------------------------------------------------------------------------------------
    def poll_pcie(self) -> List[NpuEvent]:
        out: List[NpuEvent] = []
        for index, bdf in enumerate(npu_pci_devices(self.pci_root)):
            link = read_link(os.path.join(self.pci_root, bdf))
            if not link or link == self.links.get(bdf):
                continue
            self.links[bdf] = dict(link)
            dev = link.pop("dev_id", index)
            args = {"source": "sysfs", "bdf": bdf, **link}
            out.append(NpuEvent(mono_ns(), "link", dev, "pcie_link", -1, -1, args))
        return out


def npu_pci_devices(root: str = PCI_ROOT) -> List[str]:
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [n for n in names if _read(os.path.join(root, n, "vendor")) == VENDOR]


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read(4096).strip()
    except OSError:
        return None


def _aer_total(path: str) -> Optional[int]:
    text = _read(path)
    for line in (text or "").splitlines():
        if line.startswith("TOTAL_"):
            parts = line.split()
            return int(parts[-1]) if parts[-1].isdigit() else None
    return None


def read_link(dev_dir: str) -> Dict[str, Any]:
    """{speed, width, max_speed, max_width, degraded, aer_*} of one PCI device (missing files left out)."""
    out: Dict[str, Any] = {}
    for key, name in (("speed", "current_link_speed"), ("width", "current_link_width"),
                      ("max_speed", "max_link_speed"), ("max_width", "max_link_width")):  # fmt: skip
        value = _read(os.path.join(dev_dir, name))
        if value is not None:
            out[key] = int(value) if value.isdigit() else value
    if "speed" in out and "width" in out:
        slow = _gts(out["speed"]) < _gts(out.get("max_speed", out["speed"]))
        narrow = isinstance(out["width"], int) and out["width"] < out.get("max_width", out["width"])
        out["degraded"] = int(slow or narrow)
    for sev in ("correctable", "nonfatal", "fatal"):
        total = _aer_total(os.path.join(dev_dir, f"aer_dev_{sev}"))
        if total is not None:
            out[f"aer_{sev}"] = total
    dev_id = _read(os.path.join(dev_dir, "dev_id"))
    if dev_id is not None and dev_id.isdigit():
        out["dev_id"] = int(dev_id)
    return out


def _gts(speed: Any) -> float:
    """ "16.0 GT/s PCIe" -> 16.0 (0.0 when unknown)."""
    try:
        return float(str(speed).split()[0])
    except (ValueError, IndexError):
        return 0.0
