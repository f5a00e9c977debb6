"""The health source: `npu-smi` polled at an interval, and the sysfs PCIe link of vendor 0x19e5 devices.

A background thread polls (`npu-smi info` for the devices, then `info -t ecc|temp|health|pcie-err -i <npu>
-c <chip>` per chip); `read()` never blocks: it returns the NpuEvents gathered since the last call.

From `npu-smi info` alone (inside containers the `-t` queries often fail with DCMI errors) come, every poll,
each chip's reading and each process row (npu_trace.device.npusmi_events: "log" events op "npu_smi" and
"npu_smi_process", stamped when the `info` call started, on the device the trace's events use), and the health
and temperature changes (npu_trace.device.npusmi.HealthTracker: "thermal", "log" op "health"). The `-t`
queries add ECC counts ("ecc"), health error codes and PCIe error counters ("link" op "pcie_err") where they
work. A query that fails is named once (per way of failing, whatever the chip), then left out of that chip's
next 1, 2, 4 ... 64 polls and tried again; "works again" is said when it does.

Every npu-smi run has a timeout and output bounds (its stderr too: the last line of it goes into the note): a
hanging, garbage-printing or missing npu-smi gives a note, never a stall. Notes are in `notes()` and as "log"
events op "health_note".

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
from typing import Any, Dict, List, Optional, Set, Tuple

from npu_trace.device.npusmi import ChipInfo, HealthTracker, InfoTable, parse_fields, parse_table
from npu_trace.device.npusmi_events import devices, info_fields, table_events
from npu_trace.events import NpuEvent

VENDOR = "0x19e5"
PCI_ROOT = "/sys/bus/pci/devices"
MAX_OUTPUT = 256 * 1024  # bytes of one npu-smi output kept
MAX_STDERR = 4096  # bytes of its error output kept (its last line goes into a note)
NOTE_EVERY_S = 60.0
QUERIES = ("ecc", "temp", "health", "pcie-err")
MAX_BACKOFF = 64  # polls a failing query of one chip is left out at most before it is tried again
QUERY_SAYS = {"ecc": "ECC counts", "temp": "the chip temperature beyond the table's",
              "health": "health error codes", "pcie-err": "PCIe error counters"}  # fmt: skip


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def run_bounded(argv: List[str], timeout_s: float, limit: int = MAX_OUTPUT) -> Tuple[str, str]:
    """(status, stdout): status "ok", "timeout", "too_long", "failed:<rc>" or "missing"."""
    status, out, _ = run_capture(argv, timeout_s, limit)
    return status, out


def run_capture(argv: List[str], timeout_s: float, limit: int = MAX_OUTPUT) -> Tuple[str, str, str]:
    """(status, stdout, the last line of stderr): both pipes read as they come, never more than `limit`
    bytes of stdout nor MAX_STDERR of stderr kept; killed at the timeout or past the limit."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError:
        return "missing", "", ""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Drain(proc.stdout.fileno(), limit), _Drain(proc.stderr.fileno(), MAX_STDERR)
    status = _read_until_done(out, err, time.monotonic() + timeout_s)
    if status != "ok":
        proc.kill()
    proc.stdout.close()
    proc.stderr.close()
    rc = proc.wait()
    if status == "ok" and rc != 0:
        status = f"failed:{rc}"
    return status, out.text(), last_line(err.text())


class _Drain:
    """One pipe's bytes, kept up to a limit."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd, self.limit = fd, limit
        self.chunks: List[bytes] = []
        self.size = 0  # bytes read (kept or not)
        self.eof = False

    def read(self) -> None:
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
            return
        if self.size < self.limit:
            self.chunks.append(data)
        self.size += len(data)

    def text(self) -> str:
        return b"".join(self.chunks)[: self.limit].decode("utf-8", "replace")


def _read_until_done(out: _Drain, err: _Drain, deadline: float) -> str:
    while not out.eof:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        pipes = [d for d in (out, err) if not d.eof]
        ready, _, _ = select.select([d.fd for d in pipes], [], [], min(left, 0.1))
        for d in pipes:
            if d.fd in ready:
                d.read()
        if out.size > out.limit:
            return "too_long"
    return "ok"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


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


class Backoff:
    """A failing query of one chip is left out of the next 1, 2, 4 ... MAX_BACKOFF polls, then tried again (a
    device in reset fails its queries for a while; one that never answers costs a run per MAX_BACKOFF polls)."""

    def __init__(self) -> None:
        self.state: Dict[Any, Tuple[int, int]] = {}  # key -> (polls left out still, the next pause)

    def skip(self, key: Any) -> bool:
        left, pause = self.state.get(key, (0, 1))
        if left <= 0:
            return False
        self.state[key] = (left - 1, pause)
        return True

    def failed(self, key: Any) -> None:
        _, pause = self.state.get(key, (0, 1))
        self.state[key] = (pause, min(pause * 2, MAX_BACKOFF))

    def worked(self, key: Any) -> None:
        self.state.pop(key, None)


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
        self.backoff = Backoff()
        self.failing: Set[str] = set()  # queries whose last run failed
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
        """`npu-smi info` (its table alone makes every chip's and process's events), then each chip's `-t`
        queries (ECC, health codes, PCIe errors) where they work."""
        if shutil.which(self.npu_smi) is None:
            return self._note("missing", f"{self.npu_smi} not found on PATH: no npu-smi readings", once=True)
        started = mono_ns()
        status, text, err = run_capture([self.npu_smi, "info"], self.timeout)
        if status != "ok":
            return self._failed("info", status, err)
        table = parse_table(text)
        if not table.chips:
            return self._failed("info", "garbage", err, "no device table in its output")
        out = self._works("info") + self._table_notes(table)
        devs = devices(table, sysfs_dev_ids(self.pci_root))
        out += table_events(table, started, devs)
        for chip in table.chips:
            out.extend(self._chip(chip, devs[(chip.npu, chip.chip)]))
        return out

    def _table_notes(self, table: InfoTable) -> List[NpuEvent]:
        if not table.notes:
            return []
        return self._note("info:partial", f"npu-smi info: part of its table was not read ({table.notes[0]})",
                          once=True)  # fmt: skip

    def _chip(self, chip: ChipInfo, dev: Optional[int]) -> List[NpuEvent]:
        # stamped when the queries start: each value was read at or after this time, so for counters that only
        # grow (ECC) a reading never appears later than an event that raised it
        started = mono_ns()
        fields = info_fields(chip)  # what the table says; the queries' own values win
        out: List[NpuEvent] = []
        for query in QUERIES:
            key = (query, chip.npu, chip.chip)
            if self.backoff.skip(key):
                continue
            argv = [self.npu_smi, "info", "-t", query, "-i", str(chip.npu), "-c", str(chip.chip)]
            status, text, err = run_capture(argv, self.timeout)
            if status != "ok":
                self.backoff.failed(key)
                out.extend(self._failed(query, status, err, dev=dev))
                continue
            self.backoff.worked(key)
            out.extend(self._works(query))
            fields.update(parse_fields(text))
        return out if dev is None else out + self.tracker.update(dev, fields, started)

    def _failed(self, query: str, status: str, err: str, what: str = "", dev: Optional[int] = None) -> List[NpuEvent]:
        """A failing query is named once (per way of failing), not per poll or per chip."""
        self.failing.add(query)
        command = "npu-smi info" + ("" if query == "info" else f" -t {query}")
        detail = what or status
        text = f"{command}: {detail}" + (f" ({err})" if err and not what else "")
        if query != "info":
            text += f": {QUERY_SAYS[query]} not read while it fails (the info table's values go on)"
        return self._note(f"{query}:{status}", text, once=True, dev=dev)

    def _works(self, query: str) -> List[NpuEvent]:
        if query not in self.failing:
            return []
        self.failing.discard(query)
        command = "npu-smi info" + ("" if query == "info" else f" -t {query}")
        return self._note(f"{query}:works", f"{command} works again")

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


def sysfs_dev_ids(root: str = PCI_ROOT) -> Dict[str, int]:
    """PCI address -> the driver's dev_id (its sysfs attribute) of every Ascend function that has one."""
    out: Dict[str, int] = {}
    for bdf in npu_pci_devices(root):
        dev_id = _read(os.path.join(root, bdf, "dev_id"))
        if dev_id is not None and dev_id.isdigit():
            out[bdf.lower()] = int(dev_id)
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
