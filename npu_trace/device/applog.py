"""Application logs (CANN's plog and error reports, torch_npu, and the frameworks that print them): the errors that
point at the driver, as values. Pure: lines in, `AppError`s out.

What a line can be (found anywhere in it: pastes carry prefixes, `grep -n` numbers, docker-compose service
names, and the frameworks put theirs on every line, `(EngineCore_DP0 pid=N) ERROR 03-25 06:14:02 [file:N] `):
- a plog record: `[ERROR] RUNTIME(27271,ker_DP7_EP7):2026-02-27-16:24:15.595.677 [npu_driver.cc:1534]34603 ...`
  (damaged as published: the `[` missing, `ERR0R`);
- a CANN error report, newer header `[PID: 389] 2026-05-01-10:59:14.702.326 Device_Absent/Abnormal(EL0001): ...`
  or older `EL0004: [PID: 1] 2025-09-17-04:55:13.065.712 Failed ...`, then its indented `TraceBack` lines;
- torch_npu's `[ERROR] 2025-11-19-11:14:58 (PID:356, Device:0, RankID:-1) ERR00100 PTA call acl api failed` and
  `RuntimeError: ... NPU function error: ..., error code is 507033`;
- the continuation of the previous record: indented, or a line cut in two (the rest of it on the next line), or
  records fused into one line (a literal `\\n` inside a JSON string, a second header further on).

`AppLogParser.feed(line)` returns the reports the line completed, `flush()` the last one. A report is a block of
lines (a header and its traceback, or plog records of one process less than `PLOG_GAP_NS` apart); it is an
`AppError` when its text names a driver-level error (`CLASSES`, most specific first): heartbeat lost (507010), a
collective that timed out (HCCL's EI0002 notify wait timeout, EI0006 getting a socket timed out, the runtime's
507048 task execution timeout, torch's watchdog on a collective: what every rank of a job shows when one of them
stopped), stream synchronize timeout (507046), memory allocation failure (EL0004,
`halMemAlloc`/`halMemCreate`/`rtMalloc` failed, 207001), device open failure (507033, 107001, `halDeviceOpen`),
device absent (EL0001, `NPU is not available`), or another driver return code (`drvRetCode`). Its device is the
first the text names (`device_id=1`, `Device[1]`, `open device 0`, `Device:0`, ...), else the last one its
process named (then `device_inferred`). The ids are the application's (logical) ones: inside a container they
may differ from the driver's `dev_id`.

Times are the writer's wall clock in local time (`tz`, default this host's), with the resolution of the form
(µs for CANN, ms or s for the frameworks); a form without a year (vLLM's `03-25 06:14:02`) takes the year of the
last full date seen, else `year`. Every regex is bounded and lines are cut at MAX_LINE first: linear time.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from npu_trace.events import NpuEvent

MAX_LINE = 4096
MAX_BLOCK_LINES = 40
PLOG_GAP_NS = 50_000_000  # plog records of one process this close belong to one report
US, MS, S = 1_000, 1_000_000, 1_000_000_000

CLASSES: Tuple[str, ...] = (
    "heartbeat_lost", "collective_timeout", "stream_sync_timeout", "alloc_fail", "device_open", "device_absent",
    "driver_error",
)  # fmt: skip

_WALL = r"\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3}"
_PLOG = re.compile(
    r"\[?(?P<lvl>ERR[O0]R|WARNING|INFO|DEBUG|EVENT)\] (?P<mod>[A-Z][A-Z0-9_]{1,31})\((?P<pid>\d{1,10}),"
    r"(?P<pname>[^)]{0,64})\) ?: ?(?P<wall>" + _WALL + r"|\S{1,40}) (?P<msg>.{0,4096})"
)
_NEW = re.compile(
    r"(?:(?P<code0>E[A-Z0-9]\d{4}))?\[PID: (?P<pid>\d{1,10})\] (?P<wall>" + _WALL + r") "
    r"(?:(?P<title>[\w/ .]{0,64}?)\((?P<code>[A-Z][A-Z0-9]{1,3}\d{4})\): ?)?(?P<msg>.{0,4096})"
)
_OLD = re.compile(
    r"(?P<code>E[A-Z0-9]\d{4}): (?:\[PID: (?P<pid>\d{1,10})\] )?(?P<wall>" + _WALL + r") (?P<msg>.{0,4096})"
)
_PTA = re.compile(
    r"\[(?P<lvl>ERROR|WARNING)\] (?P<wall>\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d) \(PID:(?P<pid>\d{1,10}), "
    r"Device:(?P<dev>-?\d{1,6}), RankID:-?\d{1,6}\) (?P<code>ERR\d{5}) (?P<msg>.{0,4096})"
)
_RUNTIME = re.compile(r"RuntimeError: (?P<msg>.{0,4096})|(?<!\w)\S{0,200}NPU function error: ")
_ANCHORS = ((_OLD, "old"), (_NEW, "new"), (_PTA, "pta"), (_PLOG, "plog"), (_RUNTIME, "runtime"))
_CHAIN = {"runtime": ("pta", "old", "new"), "pta": ("old", "new")}  # forms that continue a report of these
_FUSED = re.compile(
    r"(?<=\S)\s{0,8}(?=\[?(?:ERR[O0]R|WARNING|EVENT)\] [A-Z]{2,31}\(\d|E[A-Z0-9]\d{4}: \[PID: |\[PID: \d)"
)

# framework prefixes: torch.distributed's rank on every line of a rank's output, vLLM's process tag and logger,
# loguru, Python logging, docker compose
_RANK_TAG = re.compile(r"^\[rank\d{1,6}\]: ?")
_PROC_TAG = re.compile(r"\((?P<name>[\w.\-]{1,64}) pid=(?P<pid>\d{1,10})\) ")
_VLLM = re.compile(r"(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) (?P<m>\d\d)-(?P<d>\d\d) (?P<hms>\d\d:\d\d:\d\d)"
                   r"(?:\.\d{1,6})? \[[^\]]{1,128}\] ")  # fmt: skip
_ISO = re.compile(r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,6}))?")

_DEVICE = tuple(
    re.compile(rx)
    for rx in (
        r"\bdevice_id[= ](?P<d>\d{1,6})", r"\bDevice\[(?P<d>\d{1,6})\]", r"\bdeviceId[=\[ ](?P<d>\d{1,6})",
        r"\bdevId=(?P<d>\d{1,6})", r"\bopen device (?P<d>\d{1,6})", r"\bdevice[=:](?P<d>\d{1,6})\b",
        r"\(PID:\d{1,10}, Device:(?P<d>\d{1,6})", r"\bchipId:(?P<d>\d{1,6})", r"\bdevice (?P<d>\d{1,6})\b",
    )
)  # fmt: skip
_RESULT = re.compile(r"(?:runtime result = |error code is |ErrCode=)(?P<r>\d{6})\b")
_DRV = re.compile(r"\b(?:drvRetCode|drv_ret_code)=(?P<r>-?\d{1,10})")
_INNER = re.compile(r"\b(?:InnerCode|retCode)=0x(?P<r>[0-9a-fA-F]{1,8})")
_SUFFIX = re.compile(r"\[FUNC:[^\]]{0,128}\]\[FILE:[^\]]{0,128}\]\[LINE:\d{1,7}\]$")
_SITE = re.compile(r"(?<=\d) \[[\w.\-]{1,64}:\d{1,6}\]")
_CODE = re.compile(r"\b(?P<c>E[A-Z0-9]\d{4})\b")

_RULES: Tuple[Tuple[str, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(rx, re.IGNORECASE if cls == "heartbeat_lost" else 0))
    for cls, rx in (
        ("heartbeat_lost", r"\b507010\b|lost heartbeat|heartbeat lost|heart beat lost"),
        ("collective_timeout", r"\bEI000[26]\b|Notify register times out|Getting socket times out|"
                               r"Watchdog caught collective operation timeout|\b507048\b"),
        ("stream_sync_timeout", r"\b507046\b|[Ss]tream synchroni[sz]e timeout|synchroni[sz]e stream timeout"),
        ("alloc_fail", r"\bEL0004\b|Memory_Allocation_Failure|\b207001\b|(?:halMemAlloc|halMemCreate|rtMalloc|"
                       r"aclrtMalloc)\w{0,16}[: ]{0,2}(?:execut\w{1,4} )?failed|malloc physical memory failed"),
        ("device_open", r"\b507033\b|\b107001\b|open device \d{1,6} failed|halDeviceOpen failed|"
                        r"Failed to open device"),
        ("device_absent", r"\bEL0001\b|Device_Absent|Device not found or invalid|NPU is not available|"
                          r"no valid device"),
        ("driver_error", r"\b(?:drvRetCode|drv_ret_code)=-?\d|\[drv api\] ?\w{1,64} failed"),
    )
)  # fmt: skip


class AppLine(NamedTuple):
    form: str  # old, new, pta, plog, runtime, more (a continuation), none (not an application log line)
    pid: int
    wall_ns: Optional[int]
    res_ns: int  # the resolution of wall_ns
    text: str  # the record's text from its header on (prefixes removed)
    prefix: str  # the framework's process tag, when there is one ("EngineCore_DP0")
    indented: bool


class AppError(NamedTuple):
    wall_ns: Optional[int]
    res_ns: int
    cls: str
    classes: List[str]
    dev: Optional[int]
    dev_inferred: bool
    pid: int
    codes: List[str]  # CANN error codes (EL0001, EE9999, ...)
    results: List[int]  # runtime results and ErrCodes (507010, 207001, ...)
    drv_ret_code: Optional[int]
    inner_code: Optional[str]
    lines: List[str]
    line_no: int  # of the report's first line in its file (1-based)
    prefix: str


class _Block:
    def __init__(self, line: AppLine, no: int) -> None:
        self.head = line
        self.no = no
        self.lines = [line.text]
        self.last_wall = line.wall_ns
        self.first: Tuple[Optional[int], int] = (line.wall_ns, line.res_ns)  # the earliest time in the report
        self.open_end = False  # the last line looked cut (its rest may be on the next line)

    def add(self, line: AppLine) -> None:
        self.first = _earliest(self.first, (line.wall_ns, line.res_ns))
        text = line.text.strip()
        if self.open_end and self.lines and line.form == "more":  # a header of its own never ends a cut line
            self.lines[-1] = self.lines[-1] + text
        elif len(self.lines) < MAX_BLOCK_LINES:
            self.lines.append(text)
        if line.wall_ns is not None:
            self.last_wall = line.wall_ns


LATEST_NS = (1 << 63) - 1  # the latest time a recording holds (2262-04-11)
MIN_YEAR, MAX_YEAR = 1970, 2261  # the years whose times a recording holds whole
HALF_YEAR_NS = 183 * 86_400 * S  # a year-less stamp this far before the one before it is of the next year


def rolls_over(wall: Optional[int], last: Optional[int], year: int) -> bool:
    """Whether a year-less stamp (syslog's, vLLM's), read as of `year`, is of the next year: it falls half a year
    or more before the year-less stamp before it (Dec 31, then Jan 1)."""
    return wall is not None and last is not None and wall <= last - HALF_YEAR_NS and year < MAX_YEAR


def local_ns(y: int, mo: int, d: int, hms: str, tz: Optional[tzinfo], extra_ns: int) -> Optional[int]:
    """A log's local date and time (`tz`, else this host's zone, daylight saving included) as ns since the epoch;
    None for a time that does not exist or that a recording cannot hold (before 1970, after 2262)."""
    try:
        h, mi, s = (int(x) for x in hms.split(":"))
        when = datetime(y, mo, d, h, mi, s, tzinfo=tz)
        if tz is None:
            when = when.astimezone()
    except (ValueError, OverflowError, OSError):
        return None
    ns = int(when.timestamp()) * S + extra_ns
    return ns if 0 <= ns <= LATEST_NS else None


class AppLogParser:
    """feed(line) -> [AppError] the line completed; flush() -> the last report's."""

    def __init__(self, tz: Optional[tzinfo] = None, year: Optional[int] = None) -> None:
        self.tz = tz
        self.year = year if year is not None else datetime.now().year
        self.block: Optional[_Block] = None
        self.last_yearless: Optional[int] = None  # the last year-less (vLLM) stamp's wall time
        self.line_no = 0
        self.last_dev: Dict[int, int] = {}  # pid -> the last device its reports named
        self.stats: Dict[str, int] = {"lines": 0, "reports": 0, "errors": 0, "other": 0}

    def feed(self, raw: str) -> List[AppError]:
        self.line_no += 1
        self.stats["lines"] += 1
        out: List[AppError] = []
        for piece in split_fused(_RANK_TAG.sub("", raw[:MAX_LINE].rstrip("\r\n"), count=1)):
            out += self._line(self.read(piece))
        return out

    def flush(self) -> List[AppError]:
        return self._close()

    # ---- one line ---------------------------------------------------------------------------------
    def read(self, text: str) -> AppLine:
        """What one (unfused) line is."""
        best: Optional[Tuple[int, re.Match[str], str]] = None
        for rx, form in _ANCHORS:
            m = rx.search(text)
            if m and (best is None or m.start() < best[0]):
                best = (m.start(), m, form)
        prefix_text = text if best is None else text[: best[0]]
        tag, wall, res = self._prefix(prefix_text)
        if best is None:
            rest = _strip_prefixes(text)
            return AppLine("more" if rest.strip() else "none", -1, wall, res, rest, tag, rest[:1].isspace())
        _, m, form = best
        pid = int(m.group("pid")) if "pid" in m.groupdict() and m.group("pid") else -1
        own, own_res = self._wall(m.groupdict().get("wall"))
        if own is not None:
            wall, res = own, own_res
        return AppLine(form, pid, wall, res, text[best[0] :], tag, False)

    def _prefix(self, text: str) -> Tuple[str, Optional[int], int]:
        tags = _PROC_TAG.findall(text)
        tag = tags[-1][0] if tags else ""
        m = _VLLM.search(text)
        if m:
            return tag, self._yearless(int(m["m"]), int(m["d"]), m["hms"]), S
        m = _ISO.search(text)
        if m:
            frac = m["frac"] or ""
            wall = self._local_date(m["date"], m["hms"], int((frac + "000000")[:6]) * US if frac else 0)
            return tag, wall, (10 ** (9 - len(frac)) if frac else S)
        return tag, None, 0

    def _wall(self, text: Optional[str]) -> Tuple[Optional[int], int]:
        """CANN's `2026-05-01-10:59:14.702.326` (µs) or torch_npu's `2025-11-19-11:14:58` (s)."""
        if not text or len(text) < 19 or not text[:4].isdigit():
            return None, 0
        date, hms = text[:10], text[11:19]
        frac = text[20:].replace(".", "")
        extra = int(frac[:6].ljust(6, "0")) * US if frac.isdigit() else 0
        wall = self._local_date(date, hms, extra)
        return wall, (US if frac.isdigit() and len(frac) >= 6 else S)

    def _local_date(self, date: str, hms: str, extra_ns: int) -> Optional[int]:
        try:
            y, mo, d = (int(x) for x in date.split("-"))
        except ValueError:
            return None
        self.year = y
        return self._local(y, mo, d, hms, extra_ns)

    def _yearless(self, mo: int, d: int, hms: str) -> Optional[int]:
        """vLLM's `MM-DD hh:mm:ss`, of the year in force (the parser's, or the last dated line's), then of the
        next one from the first such stamp half a year or more before the one before it (Dec 31, then Jan 1)."""
        wall = self._local(self.year, mo, d, hms, 0)
        last = self.last_yearless
        if rolls_over(wall, last, self.year):
            self.year += 1
            wall = self._local(self.year, mo, d, hms, 0)
        self.last_yearless = wall if wall is not None else last
        return wall

    def _local(self, y: int, mo: int, d: int, hms: str, extra_ns: int) -> Optional[int]:
        return local_ns(y, mo, d, hms, self.tz, extra_ns)

    # ---- blocks -------------------------------------------------------------------------------------
    def _line(self, line: AppLine) -> List[AppError]:
        block = self.block
        if line.form == "none":
            return []
        if line.form == "more":
            if block is None:
                if not line.text.startswith((" ", "\t")):
                    self.stats["other"] += 1
                    return []
                self.block = _Block(line, self.line_no)  # a traceback whose header was cut off
                return []
            if line.indented or block.open_end or line.text.startswith((" ", "\t", "[Error]:")):
                block.add(line)
                block.open_end = _looks_cut(line.text)
                return []
            out = self._close()
            self.stats["other"] += 1
            return out
        if block is not None and line.form == "plog" and block.head.form == "plog" and self._same_plog(block, line):
            block.add(line)
            block.open_end = _looks_cut(line.text)
            return []
        if block is not None and block.head.form in _CHAIN and line.form in _CHAIN[block.head.form]:
            block.add(line)  # torch_npu's RuntimeError, its PTA line and CANN's report of one failure
            block.head = block.head._replace(form=line.form, pid=max(block.head.pid, line.pid))
            block.open_end = _looks_cut(line.text)
            return []
        out = self._close()
        self.block = _Block(line, self.line_no)
        self.block.open_end = _looks_cut(line.text)
        return out

    def _same_plog(self, block: _Block, line: AppLine) -> bool:
        """A plog record continues the report: same process, close in time, and not from the call site that
        began it (that site logging again is the next occurrence: two failed allocations 1 ms apart)."""
        if block.head.pid != line.pid or block.last_wall is None or line.wall_ns is None:
            return False
        site = _site(block.head.text)
        return 0 <= line.wall_ns - block.last_wall <= PLOG_GAP_NS and (not site or _site(line.text) != site)

    def _close(self) -> List[AppError]:
        block, self.block = self.block, None
        if block is None:
            return []
        self.stats["reports"] += 1
        error = self._classify(block)
        if error is None:
            self.stats["other"] += 1
            return []
        self.stats["errors"] += 1
        return [error]

    def _classify(self, block: _Block) -> Optional[AppError]:
        lines = [_SUFFIX.sub("", line).rstrip() for line in block.lines]
        text = "\n".join(lines)
        classes = [cls for cls, rx in _RULES if rx.search(text)]
        if not classes:
            return None
        head = block.head
        dev, inferred = _device(text), False
        if dev is None and head.pid in self.last_dev:
            dev, inferred = self.last_dev[head.pid], True
        elif dev is not None and head.pid >= 0:
            self.last_dev[head.pid] = dev
        results = sorted({int(m["r"]) for m in _RESULT.finditer(text)})
        drv = _DRV.search(text)
        inner = _INNER.search(text)
        codes = list(dict.fromkeys(m["c"] for m in _CODE.finditer(text)))
        wall, res = block.first
        return AppError(wall, res, classes[0], classes, dev, inferred, head.pid, codes, results,
                        int(drv["r"]) if drv else None, f"0x{inner['r'].lower()}" if inner else None, lines,
                        block.no, head.prefix)  # fmt: skip


def _earliest(had: Tuple[Optional[int], int], new: Tuple[Optional[int], int]) -> Tuple[Optional[int], int]:
    """The report's time: the earliest of its lines', a finer one preferred within a coarser one's resolution."""
    (t0, r0), (t, r) = had, new
    if t is None:
        return had
    if t0 is None or t + r <= t0 or (r < r0 and t0 <= t < t0 + r0):
        return new
    return had


def split_fused(line: str) -> List[str]:
    """A line holding several records: at literal `\\n` (a JSON string's) and before a second header."""
    parts = line.split("\\n") if "\\n" in line else [line]
    out: List[str] = []
    for part in parts:
        cuts = [m.end() for m in _FUSED.finditer(part) if m.end() > 0]
        start = 0
        for cut in cuts:
            if cut - start > 8 and part[start:cut].strip():
                out.append(part[start:cut].rstrip())
                start = cut
        out.append(part[start:])
    return out


def _site(text: str) -> str:
    """A plog record's call site: the `[file.cc:N]` after its time ("" if it has none)."""
    m = _SITE.search(text, 0, 200)
    return m.group(0) if m else ""


def _strip_prefixes(text: str) -> str:
    text = _PROC_TAG.sub("", text)
    m = _VLLM.search(text)
    return text[m.end() :] if m else text


def _looks_cut(text: str) -> bool:
    """A line that stops mid-record (the rest of it printed on the next line)."""
    tail = text.rstrip()
    return bool(tail) and tail[-1].isalnum() and not _SUFFIX.search(tail) and "=" in tail[-48:]


def _device(text: str) -> Optional[int]:
    for rx in _DEVICE:
        m = rx.search(text)
        if m:
            return int(m["d"])
    return None


def utc_offset(text: str) -> tzinfo:
    """ "+08:00", "-0530", "UTC" -> a fixed-offset tzinfo (ValueError otherwise)."""
    if text.upper() in ("UTC", "Z"):
        return timezone.utc
    m = re.match(r"^([+-])(\d\d):?(\d\d)$", text)
    if not m or int(m.group(2)) > 23 or int(m.group(3)) > 59:
        raise ValueError(f"not a UTC offset: {text!r} (-23:59 to +23:59, e.g. +08:00)")
    delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return timezone(-delta if m.group(1) == "-" else delta)


def app_event(err: AppError, ts_ns: int, **extra: Any) -> NpuEvent:
    """The NpuEvent of an application error at `ts_ns` on the trace clock (kind "app_error", op its class)."""
    args: Dict[str, Any] = {
        "source": "app_log", "classes": list(err.classes), "codes": list(err.codes), "results": list(err.results),
        "text": "\n".join(err.lines), "line": err.line_no, "wall_ns": err.wall_ns, "time_resolution_ns": err.res_ns,
    }  # fmt: skip
    if err.drv_ret_code is not None:
        args["drv_ret_code"] = err.drv_ret_code
    if err.inner_code is not None:
        args["inner_code"] = err.inner_code
    if err.dev_inferred:
        args["device_inferred"] = 1
    if err.prefix:
        args["framework"] = err.prefix
    args.update(extra)
    return NpuEvent(ts_ns, "app_error", err.dev, err.cls, err.pid, -1, args)
