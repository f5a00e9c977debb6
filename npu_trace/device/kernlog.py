"""Saved kernel logs as people keep and paste them: each line's kernel message and its times. Pure.

`read_line(text)` finds the first kernel-log form in the line (anywhere: pastes carry `grep -n` numbers and file
paths, docker or shell prefixes), and returns `KernelLine(uptime_ns, wall_ns, wall_res_ns, form, msg)`; a line
with none (a shell prompt, the application's output) has form "none". The forms:

- `dmesg`: `[  452.388493] msg` (the kernel's clock since boot, µs);
- `dmesg -T`: `[Wed Jul 24 10:00:01 2024] msg` (wall clock, 1 s: dmesg computes it from the boot time);
- `journalctl -k -o short-monotonic`: `[  452.388493] host kernel: msg`;
- syslog / `journalctl -k` / `-o short-iso`: `Jul 24 10:00:01 host kernel: [  452.388493] msg` (the `[uptime]`
  optional), `2024-07-24T10:00:01.123456+08:00 host kernel: msg`;
- device-side slog: `[EVENT] KERNEL(4128,sklogd):2024-01-22-05:03:02.259.649 [klogd.c:253][2572550.901383] msg`
  (`[klogd.c:N]` optional): both the device's wall clock (µs) and its uptime;
- a `/dev/kmsg` record: `6,1234,452388493,-;msg`.

Lines whose only prefix is the message itself (`dmesg -t`) have neither time. A form without a year (syslog's)
takes `year`; times are local (`tz`, default this host's). Every regex is bounded: linear time.
"""

from __future__ import annotations

import re
from datetime import datetime, tzinfo
from typing import NamedTuple, Optional

from npu_trace.device.applog import local_ns, utc_offset

MAX_LINE = 4096
S, US = 1_000_000_000, 1_000
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_MONTH_NO = {m: i + 1 for i, m in enumerate(_MONTHS.split("|"))}
_UP = r"\[\s{0,12}(?P<up>\d{1,10}\.\d{1,9})\]"

_FORMS = (
    ("slog", re.compile(
        r"\[(?:EVENT|ERROR|WARNING|INFO|DEBUG)\] KERNEL\(\d{1,10},[^)]{0,32}\):(?P<wall>\S{1,40}) "
        r"(?:\[klogd\.c:\d{1,6}\])?" + _UP + r"\s{0,4}(?P<msg>.*)")),
    ("kmsg", re.compile(r"^(?P<pri>\d{1,4}),(?P<seq>\d{1,20}),(?P<us>\d{1,20}),[^;]{0,32};(?P<msg>.*)")),
    ("syslog", re.compile(
        r"(?P<mon>" + _MONTHS + r") {1,2}(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d) \S{1,64} kernel: "
        r"(?:" + _UP + r" ?)?(?P<msg>.*)")),
    ("iso", re.compile(
        r"(?P<date>\d{4}-\d\d-\d\d)T(?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?(?P<tz>[+-]\d\d:?\d\d|Z)? "
        r"\S{1,64} kernel: (?:" + _UP + r" ?)?(?P<msg>.*)")),
    ("dmesg_t", re.compile(
        r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>" + _MONTHS + r") {1,2}(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d) "
        r"(?P<year>\d{4})\] ?(?P<msg>.*)")),
    ("dmesg", re.compile(_UP + r" ?(?:\S{1,64} kernel: )?(?P<msg>.*)")),
)  # fmt: skip
_BARE = re.compile(r"^\s{0,8}(?P<msg>\[ascend\] .*)")


class KernelLine(NamedTuple):
    form: str  # slog, kmsg, syslog, iso, dmesg_t, dmesg, bare (a driver line without time), none
    uptime_ns: Optional[int]
    wall_ns: Optional[int]
    wall_res_ns: int
    msg: str


NONE = KernelLine("none", None, None, 0, "")


def read_line(text: str, tz: Optional[tzinfo] = None, year: Optional[int] = None) -> KernelLine:
    line = text[:MAX_LINE].rstrip("\r\n")
    best = None
    for form, rx in _FORMS:
        m = rx.search(line) if form != "kmsg" else rx.match(line)
        if m and (best is None or m.start() < best[1].start()):
            best = (form, m)
    if best is None:
        bare = _BARE.match(line)
        return KernelLine("bare", None, None, 0, bare["msg"]) if bare else NONE
    form, m = best
    groups = m.groupdict()
    up = _uptime(groups.get("up"))
    if form == "kmsg":
        up = int(groups["us"]) * US
    wall, res = _wall(form, groups, tz, year)
    return KernelLine(form, up, wall, res, groups["msg"])


def _uptime(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    sec, _, frac = text.partition(".")
    return int(sec) * S + int(frac[:9].ljust(9, "0"))


def _wall(form: str, g: dict, tz: Optional[tzinfo], year: Optional[int]) -> tuple[Optional[int], int]:
    try:
        if form == "slog":
            w = g["wall"]
            if len(w) < 19 or not w[:4].isdigit():
                return None, 0  # a placeholder (YYYY-MM-DD-...) as documentation prints it
            frac = w[20:].replace(".", "")
            return local_ns(int(w[:4]), int(w[5:7]), int(w[8:10]), w[11:19], tz, int(frac[:6].ljust(6, "0")) * US), US
        if form in ("syslog", "dmesg_t"):
            y = int(g["year"]) if g.get("year") else (year or datetime.now().year)
            return local_ns(y, _MONTH_NO[g["mon"]], int(g["day"]), g["hms"], tz, 0), S
        if form == "iso":
            frac = g.get("frac") or ""
            extra = int(frac.ljust(9, "0")) if frac else 0
            zone = tz
            if g.get("tz"):
                zone = utc_offset(g["tz"] if g["tz"] == "Z" or ":" in g["tz"] else g["tz"][:3] + ":" + g["tz"][3:])
            d = g["date"]
            res = 10 ** (9 - len(frac)) if frac else S
            return local_ns(int(d[:4]), int(d[5:7]), int(d[8:10]), g["hms"], zone, extra), res
    except (ValueError, KeyError):
        return None, 0
    return None, 0


