"""The simulator's kmsg channel: the real driver's message templates for the scenario's actions (reset steps,
heartbeat loss, driver timeouts), written to /dev/kmsg at the actions' planned times.

Companion of the C executor, run by the caller next to it (`KmsgChannel(actions).start(t0)` with t0 the executor's
start on CLOCK_MONOTONIC, `stop()` after): it never touches the executor or the plan. Lines carry the comm
`npu-sim` so they are recognisable; their text is exactly what the driver prints (npu_trace.kmsg parses them into
the same kinds, devices and reset-step names as the simulator's own probes).
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Sequence, Tuple

from npu_trace.sim.scenarios import Action

COMM = "npu-sim"
PCIE = "[ascend] [drv_pcie] [{func} {line}] <npu-sim:{pid}:{pid}> "
RESET_LINES: Dict[str, Tuple[str, str]] = {
    "ready_for_hotreset": ("devdrv_hot_reset_wait 5110",
                           "Device is ready for hotreset. (dev_id={dev}; ref_cnt=0; wait_cnt=1)"),
    "unbind": ("devdrv_hot_reset_unbind 5150", "Pcie hotreset, unbind driver. (bdf={bdf})"),
    "remove": ("drv_pcie_remove 2340", "Remove driver exit. (dev_id={dev}; bdf={bdf})"),
    "reset_begin": ("devdrv_hot_reset_device 5200", "Device hot reset begin. (dev_id={dev})"),
    "bus_remove": ("devdrv_hot_reset_bus_remove 5500", "Pcie hotreset, bus remove. (bdf={bdf})"),
    "rescan": ("devdrv_hot_reset_rescan 5600", "Pcie hotreset, rescan device. (bdf={bdf}; dev_num=1)"),
    "probe": ("drv_pcie_probe 2100", "Probe driver IN. (chip_type=5; davinci_dev_num=1; bdf={bdf})"),
    "hot_reset_success": ("devdrv_hot_reset_rescan 5650", "Pcie hotreset, hot reset success. (index_id={dev})"),
    "os_load_success": ("devdrv_load_finish 990", "Device os load success. (dev_id={dev})"),
    "half_probe_finish": ("devdrv_load_half_probe 1050", "Half probe finish, probe success. (dev_id={dev}; bdf={bdf})"),
}  # fmt: skip
HB_RESUME = "[ascend] [ERROR] [drv_soft_fault] [hb_host_start 236] <npu-sim:{pid},{pid}> Heartbeat already initialized, just start it. (dev_id={dev})"  # noqa: E501
HB_LOST = ("[ascend] [ERROR] [drv_soft_fault] [hb_read_process 205] <npu-sim:{pid},{pid}> "
           "Heartbeat lost! (device_id={dev}; old_count=100; current_count=100; lost_count={lost}; "
           "total_lost_count={lost}; miss_read_count=0; "
           "hb_read_fail_count=0).")  # fmt: skip
MBOX = ("[ascend] [ERROR] [trs_drv] [trs_hard_mbox_wait 337] <npu-sim:{pid}:{pid}:0> Mbox wait fail. (ret=-110; "
        "valid=0x0; tx_time_us=0; txdone_time_us=0; wakeup_time_us={wait})")  # fmt: skip


def bdf_of(dev: int) -> str:
    return f"{0x3B + dev:02x}:00.0"


def lines_for(a: Action, pid: int) -> List[str]:
    """The driver's kmsg lines for one planned action (empty for actions the driver does not log)."""
    dev = a.dev
    if a.func == "devdrv_reset_step":
        step = str(a.args[2])
        if step == "heartbeat_resume":
            return [HB_RESUME.format(pid=pid, dev=dev)]
        if step in RESET_LINES:
            func, text = RESET_LINES[step]
            return [
                PCIE.format(func=func.split()[0], line=func.split()[1], pid=pid) + text.format(dev=dev, bdf=bdf_of(dev))
            ]
    if a.func == "hb_report_heart_beat_lost_event":
        return [HB_LOST.format(pid=pid, dev=dev, lost=a.args[1])]
    if a.func == "drv_timeout" and int(a.args[1]) == 2:  # mbox
        return [MBOX.format(pid=pid, wait=a.args[3])]
    return []


def schedule(actions: Sequence[Action], pid: int) -> List[Tuple[int, str]]:
    """(planned offset ns, line) for every logged action, in time order."""
    return [(a.t_ns, "<5>" + line) for a in actions for line in lines_for(a, pid)]


class KmsgChannel:
    """Writes `schedule(actions)` to /dev/kmsg from a thread, each line at t0_mono_ns + its offset."""

    def __init__(self, actions: Sequence[Action], pid: int = 0, path: str = "/dev/kmsg") -> None:
        self.lines = schedule(actions, pid)
        self.path = path
        self.written = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread = threading.Thread(target=self._run, args=(0,), daemon=True)

    def start(self, t0_mono_ns: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(t0_mono_ns,), name="npu-sim-kmsg", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self, t0: int) -> None:
        from npu_trace.sources.kmsg_source import write_kmsg

        for offset, line in self.lines:
            wait = (t0 + offset - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) / 1e9
            if wait > 0 and self._stop.wait(wait):
                return
            try:
                write_kmsg(line, self.path)
                self.written += 1
            except OSError:
                self.errors += 1
