"""The simulator's side channels: what a real host shows besides the driver's trace, at the planned times.

* kmsg (`KmsgChannel`): the real driver's message templates for the scenario's actions (reset steps, heartbeat
  loss, driver timeouts), written to /dev/kmsg. Lines carry the comm `npu-sim` (and the executor's pid) so they
  are recognisable; their text is exactly what the driver prints (npu_trace.device.kmsg parses them into the same
  kinds, devices and reset-step names as the simulator's own probes).
* uevents (`UeventChannel`): at the hot reset's steps, the uevents a real reset emits (PCI unbind, remove, add,
  bind with the device's PCI variables; davinciN remove/add), as synthetic uevents through the sysfs `uevent`
  file of /dev/kmsg's device (`UEVENT_PATH`): a device that exists on every Linux host, that the simulator
  already uses for its kmsg channel, and that nothing reacts to. The simulator always writes the action
  `change` (a synthetic `remove` or `unbind` of a real device could make udev act on it) and carries the
  simulated action and variables in SYNTH_ARG_* (encoding: npu_trace.device.uevents.synth_args).
* the application's log (`AppLogChannel`, with `app_log=PATH`): what CANN's runtime prints when the driver fails
  it, at the planned times of the scenario's driver errors (heartbeat lost -> EL0001 and 507010, a stream sync
  timeout 507046, a failed halMemAlloc, an open failing during the reset 507033), stamped with the wall clock.
* npu-smi (npu_trace.sim.fake_smi): an `npu-smi` executable in a directory (default `default_smi_dir()`,
  prepend it to PATH) answering with the scenario's ECC counts, temperatures and health over time.

`SideChannels` runs them next to the C executor (npu_trace.sim.runner): `prepare(actions, devices)` before the
executor starts, `start(t0, pid)` with t0 the executor's start on CLOCK_MONOTONIC, `stop()` after, `truth()` for
the truth file. Nothing here touches the executor or the plan. Writing /dev/kmsg and sysfs needs root: without
it those two channels are off, with one note (`notes`).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from npu_trace.sim import fake_smi
from npu_trace.sim.scenarios import US, Action, Share

COMM = "npu-sim"
KMSG_PATH = "/dev/kmsg"
UEVENT_PATH = "/sys/devices/virtual/mem/kmsg/uevent"
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


class _TimedWriter:
    """A thread writing planned items, each at t0_mono_ns + its offset (`offsets`), by `_emit(i)`; counts
    what it wrote and what failed (OSError), and keeps each write's time (`times`, what `_emit` returns) and
    CLOCK_MONOTONIC just before it began (`began`): what the write made (a kernel log line, a uevent) is
    stamped between the two, however long the thread waited for a CPU around it."""

    NAME = "npu-sim"

    def __init__(self, offsets: Sequence[int]) -> None:
        self.offsets = list(offsets)
        self.written = 0
        self.errors = 0
        self.times: List[Any] = [None] * len(self.offsets)
        self.began: List[Optional[int]] = [None] * len(self.offsets)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, t0_mono_ns: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(t0_mono_ns,), name=self.NAME, daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()
        self.join(timeout=2)

    def _run(self, t0: int) -> None:
        for i, offset in enumerate(self.offsets):
            if not _wait_until(t0 + offset, self._stop):
                return
            try:
                self.began[i] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                self.times[i] = self._emit(i)
                self.written += 1
            except OSError:
                self.errors += 1

    def _emit(self, i: int) -> Any:
        raise NotImplementedError


class KmsgChannel(_TimedWriter):
    """Writes `schedule(actions)` to /dev/kmsg from a thread, each line at t0_mono_ns + its offset."""

    NAME = "npu-sim-kmsg"

    def __init__(self, actions: Sequence[Action], pid: int = 0, path: str = KMSG_PATH) -> None:
        from npu_trace.device.kmsg import write_kmsg  # imported now: not late at the first line

        self._write = write_kmsg
        self.lines = schedule(actions, pid)
        self.path = path
        super().__init__([offset for offset, _ in self.lines])  # times: CLOCK_MONOTONIC of each line's write

    def _emit(self, i: int) -> int:
        self._write(self.lines[i][1], self.path)
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _wait_until(deadline_ns: int, stop: threading.Event) -> bool:
    """Sleep until CLOCK_MONOTONIC reaches the deadline; False when `stop` was set meanwhile."""
    wait = (deadline_ns - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) / 1e9
    return not (wait > 0 and stop.wait(wait))


# ---- the application's log -------------------------------------------------------------------------------------
APP_DELAY_NS = 300_000_000  # the application notices a driver error this long after it (its sync call returns)
APP_HB = ("[PID: {pid}] {t} Device_Absent/Abnormal(EL0001): Device not found or invalid.\n"
          "        Possible Cause: Device does not exist or is abnormal.\n"
          "        TraceBack (most recent call last):\n"
          "        Device[{dev}] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]\n"
          "        wait for compute device to finish failed, runtime result = 507010.[FUNC:ReportCallError]"
          "[FILE:log_inner.cpp][LINE:148]\n")  # fmt: skip
APP_SYNC = ("[ERROR] RUNTIME({pid},npu-sim):{t} [stream.cc:1234]{pid} StreamSynchronize:Stream synchronize timeout, "
            "device_id={dev}, runtime result = 507046.\n")  # fmt: skip
APP_ALLOC = ("[ERROR] RUNTIME({pid},npu-sim):{t} [npu_driver.cc:1534]{pid} DevMemAllocHugePageManaged:[drv api] "
             "halMemAlloc failed:size={size}(bytes), type=2, moduleId=3, drvRetCode=6, device_id {dev}, "
             "ErrCode=207001, desc=[driver error:out of memory], InnerCode=0x7020016\n")  # fmt: skip
APP_OPEN = ("EL0003: [PID: {pid}] {t} The argument is invalid.\n"
            "        [drv api] halDeviceOpen failed. device_id={dev}, drvRetCode=7.[FUNC:DeviceOpen]"
            "[FILE:npu_driver.cc][LINE:438]\n"
            "        open device {dev} failed, runtime result = 507033.[FUNC:ReportCallError][FILE:log_inner.cpp]"
            "[LINE:148]\n")  # fmt: skip


def app_schedule(actions: Sequence[Action]) -> List[Tuple[int, int, str, str]]:
    """(planned offset ns, device, what, template) of the application's reports of the scenario's driver errors:
    heartbeat lost (EL0001, 507010), a stream sync that timed out (507046, on a cq_wait timeout), a failed
    allocation (halMemAlloc, 207001) and an open that fails while the device resets (507033)."""
    out = []
    for a in actions:
        if a.func == "hb_report_heart_beat_lost_event":
            out.append((a.t_ns + APP_DELAY_NS, a.dev, "heartbeat_lost", APP_HB))
        elif a.func == "drv_timeout" and int(a.args[1]) == 1:
            out.append((a.t_ns + APP_DELAY_NS // 10, a.dev, "stream_sync_timeout", APP_SYNC))
        elif a.func == "halMemAlloc" and a.ret not in (None, 0):
            out.append((a.t_ns + a.delay_ns + 5 * US, a.dev, f"alloc_fail:{a.args[1]}", APP_ALLOC))
        elif a.func == "devdrv_reset_step" and str(a.args[2]) == "reset_begin":
            out.append((a.t_ns + APP_DELAY_NS // 3, a.dev, "device_open", APP_OPEN))
    return sorted(out)


def wall_text(wall_ns: int) -> str:
    """CANN's time: local, 2026-05-01-10:59:14.702.326."""
    lt = time.localtime(wall_ns // 1_000_000_000)
    us = wall_ns // 1000 % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", lt) + f".{us // 1000:03d}.{us % 1000:03d}"


class AppLogChannel(_TimedWriter):
    """Appends the application's reports (`app_schedule`) to a log file, each at t0 + its offset, stamped with
    the wall clock when written, as CANN's logger stamps them."""

    NAME = "npu-sim-applog"

    def __init__(self, actions: Sequence[Action], path: str, pid: int = 0,
                 extra: Sequence[Tuple[int, int, str, str]] = ()) -> None:  # fmt: skip
        """`extra`: more reports (offset, device, what, template) beside those of the actions' driver errors (a
        simulated cluster's collective failures, npu_trace.sim.cluster_plan)."""
        self.reports = sorted([*app_schedule(actions), *extra])
        self.path, self.pid = path, pid
        super().__init__([offset for offset, _, _, _ in self.reports])  # times: (mono, wall) of each write

    def start(self, t0_mono_ns: int, pid: int = -1) -> None:
        self.pid = pid if pid >= 0 else self.pid
        super().start(t0_mono_ns)

    def _emit(self, i: int) -> Tuple[int, int]:
        _, dev, what, template = self.reports[i]
        mono, wall = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.time_ns()
        size = what.partition(":")[2] or 0
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(template.format(pid=self.pid, t=wall_text(wall), t_s=wall_text(wall)[:19], dev=dev, size=size))
        return mono, wall

    def truth(self, t0: int) -> Dict[str, Any]:
        reports = [{"t_ns": t0 + off, "dev": dev, "class": what.partition(":")[0],
                    "written_ns": w[0] if w else None, "wall_ns": w[1] if w else None}
                   for (off, dev, what, _), w in zip(self.reports, self.times)]  # fmt: skip
        return {"path": self.path, "written": self.written, "errors": self.errors, "reports": reports}


# ---- uevents ----------------------------------------------------------------------------------------------
PCI_ID = "19E5:D802"  # vendor Huawei, device 910B (CLOUD_V2): the reference's PCI IDs
PCI_SUBSYS_ID = "19E5:0100"  # simulated (subsystem vendor 0x19e5 is one the driver accepts)
PCI_CLASS = "120000"  # processing accelerator
PCI_DRIVER = "devdrv_device_driver"
# reset step -> the uevent a real hot reset emits then: (device, action)
UEVENT_STEPS: Dict[str, Tuple[str, str]] = {
    "unbind": ("pci", "unbind"),
    "remove": ("davinci", "remove"),
    "bus_remove": ("pci", "remove"),
    "rescan": ("pci", "add"),
    "probe": ("pci", "bind"),
    "half_probe_finish": ("davinci", "add"),
}


def slot_name(dev: int) -> str:
    """The full PCI_SLOT_NAME of simulated device `dev` (0000:3b:00.0 for device 0)."""
    return "0000:" + bdf_of(dev)


def pci_env(dev: int, action: str) -> Dict[str, str]:
    """The variables of a real NPU PCI uevent (DRIVER only on bind: the kernel clears it before unbind)."""
    bus = 0x3B + dev
    vendor, device = PCI_ID.split(":")
    sub_vendor, sub_device = PCI_SUBSYS_ID.split(":")
    env = {
        "ACTION": action,
        "DEVPATH": f"/devices/pci0000:{bus - 1:02x}/0000:{bus - 1:02x}:00.0/{slot_name(dev)}",
        "SUBSYSTEM": "pci",
        "PCI_CLASS": PCI_CLASS,
        "PCI_ID": PCI_ID,
        "PCI_SUBSYS_ID": PCI_SUBSYS_ID,
        "PCI_SLOT_NAME": slot_name(dev),
        "MODALIAS": f"pci:v0000{vendor}d0000{device}sv0000{sub_vendor}sd0000{sub_device}"
        f"bc{PCI_CLASS[:2]}sc{PCI_CLASS[2:4]}i{PCI_CLASS[4:]}",
    }
    if action == "bind":
        env["DRIVER"] = PCI_DRIVER
    return env


def davinci_env(dev: int, action: str) -> Dict[str, str]:
    """The variables of the driver's davinciN class device uevent."""
    return {"ACTION": action, "DEVPATH": f"/devices/virtual/devdrv-class/davinci{dev}",
            "SUBSYSTEM": "devdrv-class", "DEVNAME": f"davinci{dev}"}  # fmt: skip


def uevent_schedule(actions: Sequence[Action]) -> List[Tuple[int, int, str, Dict[str, str]]]:
    """(planned offset ns, device, reset step, uevent variables) for every reset step that emits a uevent."""
    out = []
    for a in actions:
        if a.func != "devdrv_reset_step" or str(a.args[2]) not in UEVENT_STEPS:
            continue
        step = str(a.args[2])
        kind, action = UEVENT_STEPS[step]
        env = pci_env(a.dev, action) if kind == "pci" else davinci_env(a.dev, action)
        out.append((a.t_ns, a.dev, step, env))
    return out


class UeventChannel(_TimedWriter):
    """Writes `uevent_schedule(actions)` as synthetic uevents (`change <uuid> KEY=VALUE ...`) into `path`."""

    NAME = "npu-sim-uevent"

    def __init__(self, actions: Sequence[Action], path: str = UEVENT_PATH) -> None:
        from npu_trace.device.uevents import synth_args

        self.events = uevent_schedule(actions)
        self.path = path
        self.uuids = [str(uuid.uuid4()) for _ in self.events]
        self.texts = [f"change {u} {synth_args(env, dev)}" for u, (_, dev, _, env) in zip(self.uuids, self.events)]
        super().__init__([offset for offset, _, _, _ in self.events])  # times: CLOCK_MONOTONIC of each write

    def _emit(self, i: int) -> int:
        with open(self.path, "w") as f:
            f.write(self.texts[i])
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _comm(pid: int) -> str:
    """A process's name as npu-smi prints it (the kernel's comm), "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


# ---- all of them, next to the executor ---------------------------------------------------------------------
def is_root() -> bool:
    return os.geteuid() == 0


def default_smi_dir() -> str:
    """Where `sim run` puts the fake npu-smi by default (/var/lib/npu-trace/sim/bin as root)."""
    from npu_trace.sim import build

    return os.path.join(build.cache_root(), "bin")


class SideChannels:
    """The kmsg, uevent and npu-smi channels of one scenario run (each can be turned off)."""

    def __init__(
        self,
        kmsg: bool = True,
        uevents: bool = True,
        npu_smi: bool = True,
        npu_smi_dir: Optional[str] = None,
        kmsg_path: str = KMSG_PATH,
        uevent_path: str = UEVENT_PATH,
        app_log: Optional[str] = None,
    ) -> None:
        self.notes: List[str] = []
        self.app_log_path = app_log
        self.app_log: Optional[AppLogChannel] = None
        self.kmsg_path, self.uevent_path = kmsg_path, uevent_path
        self.smi_dir: Optional[str] = (npu_smi_dir or default_smi_dir()) if npu_smi else None
        want = [name for name, on in (("kmsg", kmsg), ("uevent", uevents)) if on]
        if want and not is_root():
            self.notes.append(f"not root: the simulator's {' and '.join(want)} channel(s) are off")
            kmsg = uevents = False
        if kmsg and not os.access(kmsg_path, os.W_OK):
            self.notes.append(f"cannot write {kmsg_path}: the simulator's kmsg channel is off")
            kmsg = False
        if uevents and not os.access(uevent_path, os.W_OK):
            self.notes.append(f"cannot write {uevent_path}: the simulator's uevent channel is off")
            uevents = False
        self.kmsg_on, self.uevents_on = kmsg, uevents
        self.kmsg: Optional[KmsgChannel] = None
        self.uevent: Optional[UeventChannel] = None
        self.smi_script: Optional[str] = None
        self.smi_steps: List[fake_smi.Step] = []
        self.smi_memory: List[fake_smi.MemoryStep] = []
        self.pids: List[int] = []
        self.devices = 0
        self.actions: Sequence[Action] = ()
        self.t0_ns: Optional[int] = None
        self.pid: Optional[int] = None

    def prepare(self, actions: Sequence[Action], devices: int, shares: Sequence[Share] = ()) -> None:
        """Plan every channel and install the fake npu-smi (before the executor starts); `shares`: the plan's
        shared mappings (npu-smi counts them in each process that maps them)."""
        self.actions, self.devices = actions, devices
        if self.kmsg_on:
            from npu_trace.device import kmsg  # noqa: F401  (imported now, not after t0)
        if self.uevents_on:
            self.uevent = UeventChannel(actions, self.uevent_path)
        if self.app_log_path is not None:
            self.app_log = AppLogChannel(actions, self.app_log_path)
        if self.smi_dir is not None:
            self.smi_steps = fake_smi.schedule(actions, devices)
            self.smi_memory = fake_smi.memory_schedule(actions, devices, shares)
            try:
                self.smi_script = fake_smi.install(self.smi_dir)
            except OSError as exc:
                self.notes.append(f"cannot write the fake npu-smi into {self.smi_dir}: {exc.strerror}")
                self.smi_dir = None

    def start(self, t0_ns: int, pid: int, pids: Optional[Sequence[int]] = None) -> None:
        """Start the channels on the executor's clock (t0 on CLOCK_MONOTONIC; pid: the executor's, for kmsg;
        pids: every executor process's, in order, for npu-smi's process rows)."""
        self.t0_ns, self.pid = t0_ns, pid
        self.pids = list(pids) if pids is not None else [pid]
        if self.smi_dir is not None:
            procs = [(k, p, _comm(p)) for k, p in enumerate(self.pids)]
            state = fake_smi.State(t0_ns, self.devices, self.smi_steps, self.smi_memory, procs)
            try:
                fake_smi.write_state(self.smi_dir, state)
            except OSError as exc:
                self.notes.append(f"cannot write the fake npu-smi's state into {self.smi_dir}: {exc.strerror}")
                self.smi_dir = None
        if self.kmsg_on:
            self.kmsg = KmsgChannel(self.actions, pid, self.kmsg_path)
            self.kmsg.start(t0_ns)
        if self.uevent is not None:
            self.uevent.start(t0_ns)
        if self.app_log is not None:
            self.app_log.start(t0_ns, pid)

    def stop(self, drain: bool = False) -> None:
        """Stop the channels; `drain`: first let them write what is due (the executor ended normally, so every
        planned time has passed)."""
        for channel in (self.kmsg, self.uevent, self.app_log):
            if channel is not None:
                if drain:
                    channel.join(timeout=2)
                channel.stop()

    def truth(self) -> Dict[str, Any]:
        """What the channels planned and did, on CLOCK_MONOTONIC (t_ns: planned, began_ns and written_ns: just
        before the write began and once it returned)."""
        t0 = self.t0_ns or 0
        out: Dict[str, Any] = {"t0_ns": self.t0_ns, "pid": self.pid, "pids": list(self.pids),
                               "notes": list(self.notes)}  # fmt: skip
        if self.kmsg is not None:
            lines = [{"t_ns": t0 + off, "began_ns": b, "written_ns": w, "line": line[3:]}
                     for (off, line), b, w in zip(self.kmsg.lines, self.kmsg.began, self.kmsg.times)]  # fmt: skip
            out["kmsg"] = {"path": self.kmsg_path, "written": self.kmsg.written, "errors": self.kmsg.errors,
                           "lines": lines}  # fmt: skip
        if self.uevent is not None:
            ch = self.uevent
            events = [{"t_ns": t0 + off, "began_ns": b, "written_ns": w, "dev": dev, "step": step, "uuid": u,
                       "action": env["ACTION"], "subsystem": env["SUBSYSTEM"], "env": env}
                      for (off, dev, step, env), u, b, w in zip(ch.events, ch.uuids, ch.began, ch.times)]  # fmt: skip
            out["uevent"] = {"path": self.uevent_path, "written": ch.written, "errors": ch.errors, "events": events}
        if self.app_log is not None:
            out["app_log"] = self.app_log.truth(t0)
        if self.smi_dir is not None:
            memory = [{"t_ns": t0 + off, "offset_ns": off, "dev": dev, "used_mb": fake_smi.HBM_USED_MB + fake_smi.mb(n),
                       "processes": [{"index": k, "pid": self.pids[k] if k < len(self.pids) else None,
                                      "memory_mb": fake_smi.mb(b)} for k, b in rows.items()]}
                      for off, dev, n, rows in self.smi_memory]  # fmt: skip
            out["npu_smi"] = {"dir": self.smi_dir, "script": self.smi_script,
                              **fake_smi.summary(self.smi_steps, t0), "memory": memory}  # fmt: skip
        return out
