"""Uevents of the NPU as the kernel sends them (pure: bytes in, NpuEvents out): the driver's PCI devices
(vendor 0x19e5: PCI_ID "19E5:...", or DRIVER=devdrv_device_driver), its `davinci*` class devices, thermal
zones, and the simulated NPU's synthetic uevents. The socket that receives them is
`npu_trace.sources.uevent_source`.

Mapping (a hot reset emits, in order: davinci remove, PCI unbind, PCI remove, PCI add, PCI bind, davinci add):
    davinci remove -> reset_step "remove"      PCI unbind -> reset_step "unbind"
    PCI remove     -> reset_step "bus_remove"  PCI add    -> reset_step "rescan"
    PCI bind       -> reset_step "probe"       davinci add -> reset_step "half_probe_finish"
(the driver creates davinciN once the device has finished its probe: the step its "Half probe finish, probe
success." kmsg line tells, so both channels tell one step)
    change (PCI/davinci) -> link "uevent_change"; thermal zone change -> thermal (temp_c from TEMP, m°C)
Device: davinciN -> N; PCI -> `bdf_dev[PCI_SLOT_NAME]` (seeded from sysfs `dev_id` when present), else None.

The simulated NPU (npu_trace.sim.side_channels) has no PCI device: it writes synthetic uevents into the sysfs `uevent`
file of a harmless device (`change <uuid> KEY=VALUE ...`), and the kernel sends them for that device with
SYNTH_UUID and SYNTH_ARG_<KEY>=<VALUE>. The kernel accepts only alphanumeric keys and values, so `synth_args`
writes each variable of the uevent the simulator stands for with its key's underscores removed and its value as
the hex of its UTF-8 bytes, plus the marker SYNTH_ARG_NPUSIM=1 and SYNTH_ARG_NPUDEVID (the device id the real
driver exposes in sysfs `dev_id`). `to_event` decodes such a uevent back (`simulated`) and maps it exactly like
the real one: the action is the simulated ACTION, never the `change` the simulator wrote.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from npu_trace.events import NpuEvent

MAX_DATAGRAM = 65536
VENDOR_ID = "19E5"
DRIVER = "devdrv_device_driver"
PCI_STEPS = {"unbind": "unbind", "remove": "bus_remove", "add": "rescan", "bind": "probe"}
DAVINCI_STEPS = {"remove": "remove", "add": "half_probe_finish"}
SIM_MARKER = "NPUSIM"  # SYNTH_ARG_NPUSIM=1: a synthetic uevent of the simulated NPU
SIM_DEVID = "NPUDEVID"  # SYNTH_ARG_NPUDEVID=<n>: the simulated device's id (the real driver's sysfs dev_id)
SIM_KEYS = ("ACTION", "DEVPATH", "SUBSYSTEM", "DRIVER", "PCI_CLASS", "PCI_ID", "PCI_SUBSYS_ID", "PCI_SLOT_NAME",
            "MODALIAS", "DEVNAME")  # fmt: skip


def parse_uevent(data: bytes) -> Dict[str, str]:
    """`action@devpath\\0KEY=VALUE\\0...` -> {"ACTION": ..., "DEVPATH": ..., KEY: VALUE}; {} for libudev/junk."""
    if data.startswith(b"libudev\x00"):
        return {}
    parts = data[:MAX_DATAGRAM].split(b"\x00")
    out: Dict[str, str] = {}
    for raw in parts[1:]:
        key, eq, val = raw.decode("utf-8", "replace").partition("=")
        if eq and key:
            out[key] = val
    head = parts[0].decode("utf-8", "replace")
    if "@" in head:
        action, _, path = head.partition("@")
        out.setdefault("ACTION", action)
        out.setdefault("DEVPATH", path)
    return out if "ACTION" in out else {}


def is_npu_pci(env: Dict[str, str]) -> bool:
    return env.get("SUBSYSTEM") == "pci" and (
        env.get("PCI_ID", "").upper().startswith(VENDOR_ID + ":") or env.get("DRIVER") == DRIVER
    )


def is_davinci(env: Dict[str, str]) -> bool:
    name = env.get("DEVNAME", "") or env.get("DEVPATH", "").rsplit("/", 1)[-1]
    return name.startswith("davinci") and name[7:].isdigit()


def synth_args(env: Mapping[str, str], dev: int) -> str:
    """The KEY=VALUE words of a synthetic uevent standing for the uevent `env` of simulated device `dev`."""
    words = [f"{SIM_MARKER}=1", f"{SIM_DEVID}={int(dev)}"]
    words += [f"{key.replace('_', '')}={env[key].encode().hex()}" for key in SIM_KEYS if env.get(key)]
    return " ".join(words)


def simulated(env: Mapping[str, str]) -> Optional[Tuple[Dict[str, str], Optional[int]]]:
    """(the uevent a simulator's synthetic uevent stands for, its device id), or None when `env` is not one."""
    if env.get("SYNTH_ARG_" + SIM_MARKER) != "1":
        return None
    out: Dict[str, str] = {}
    for key in SIM_KEYS:
        raw = env.get("SYNTH_ARG_" + key.replace("_", ""))
        if raw is None:
            continue
        try:
            out[key] = bytes.fromhex(raw).decode("utf-8")
        except ValueError:  # not hex, or not UTF-8
            return None
    if "ACTION" not in out:
        return None
    if "SEQNUM" in env:
        out["SEQNUM"] = env["SEQNUM"]
    return out, _int(env.get("SYNTH_ARG_" + SIM_DEVID))


def to_event(env: Dict[str, str], ts_ns: int, bdf_dev: Optional[Dict[str, int]] = None) -> Optional[NpuEvent]:
    """The NpuEvent of one uevent, or None when it is not the NPU's (nor a thermal zone's)."""
    sim = simulated(env)
    if sim is not None:
        env, dev_id = sim
        slot = env.get("PCI_SLOT_NAME", "").lower()
        if dev_id is not None and slot:
            bdf_dev = {**(bdf_dev or {}), slot: dev_id}
    action = env.get("ACTION", "")
    args: Dict[str, Any] = {"source": "uevent", "action": action, "devpath": env.get("DEVPATH", ""),
                            "subsystem": env.get("SUBSYSTEM", ""), "seqnum": _int(env.get("SEQNUM"))}  # fmt: skip
    if is_davinci(env):
        name = env.get("DEVNAME", "") or env.get("DEVPATH", "").rsplit("/", 1)[-1]
        return _step(ts_ns, int(name[7:]), DAVINCI_STEPS.get(action), action, args)
    if is_npu_pci(env):
        slot = env.get("PCI_SLOT_NAME", "")
        args.update(bdf=slot, pci_id=env.get("PCI_ID", ""), driver=env.get("DRIVER", ""))
        dev = (bdf_dev or {}).get(slot.lower())
        return _step(ts_ns, dev, PCI_STEPS.get(action), action, args)
    if env.get("SUBSYSTEM") == "thermal" and "TEMP" in env:
        temp = _int(env.get("TEMP"))
        args.update(zone=env.get("NAME", ""), trip=env.get("TRIP", ""), temp_c=None if temp is None else temp // 1000)
        return NpuEvent(ts_ns, "thermal", None, "thermal_zone", -1, -1, args)
    return None


def _step(ts: int, dev: Optional[int], step: Optional[str], action: str, args: Dict[str, Any]) -> NpuEvent:
    if step is None:
        return NpuEvent(ts, "link", dev, f"uevent_{action}", -1, -1, args)
    return NpuEvent(ts, "reset_step", dev, "reset", -1, -1, {**args, "step": step})


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
