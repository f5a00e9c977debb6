"""Regenerate tests/data/uevent/sim_reset.json: the simulator's synthetic reset uevents as the kernel sends them.

Run as root: `.venv/bin/python tests/capture_sim_uevents.py`. For the reset of device 0 (`ecc-reset`) and of
device 2 (`mixed` with 3 devices) it writes each planned uevent (npu_trace.sim.side_channels.UeventChannel's text,
with fixed UUIDs) into the sysfs `uevent` file the simulator uses, receives the kernel's datagram on a
NETLINK_KOBJECT_UEVENT socket and saves it as hex, with the step, device and simulated variables it stands for.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any, Dict, List

from pyroute2.netlink import NETLINK_KOBJECT_UEVENT

from npu_trace.sim.scenarios import plan
from npu_trace.sim.side_channels import UEVENT_PATH, UeventChannel

DEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "uevent", "sim_reset.json")


def capture() -> List[Dict[str, Any]]:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
    sock.bind((0, 1))
    sock.settimeout(2)
    out: List[Dict[str, Any]] = []
    for scenario, devices in (("ecc-reset", 1), ("mixed", 3)):
        ch = UeventChannel(plan(scenario, 1, 2.0, 200, devices))
        for i, (_, dev, step, env) in enumerate(ch.events):
            token = f"00000000-0000-4000-8000-{len(out):012d}"
            text = ch.texts[i].replace(ch.uuids[i], token)
            with open(UEVENT_PATH, "w") as f:
                f.write(text)
            while True:
                data = sock.recv(65536)
                if token.encode() in data:
                    break
            out.append({"scenario": scenario, "step": step, "dev": dev, "env": env, "hex": data.hex()})
    return out


def main() -> int:
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 3
    records = capture()
    os.makedirs(os.path.dirname(DEST), exist_ok=True)
    with open(DEST, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    print(f"{len(records)} uevents -> {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
