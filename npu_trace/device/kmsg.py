"""Parsing of `/dev/kmsg` records and of the Ascend driver's log lines. Pure: bytes/text in, values out.

A `/dev/kmsg` read returns one record: `pri,seq,ts_us,flags[,...];message\\n` then continuation lines
` KEY=VALUE\\n` (the device dictionary). `parse_record` reads it; `SeqTracker` turns gaps in `seq` (records
overwritten before they were read; the read itself fails with EPIPE) into a count of lost records.

`KmsgMatcher` parses a message: the driver's prefix `[ascend] [ERROR] [module] [func line] `, the optional
caller context (`<comm:tgid:pid> `, `<comm:tgid:pid:cpu> `, `<comm:tgid,pid> `; comm may hold ':', so parsed
from the right), the `Text. (k1=v1; k2=v2)` payload, then the first matching rule of `npu_trace.device.kmsg_templates`
(kind, op, reset step, device). Lines without the prefix give nothing, except the kernel rules, the rate
limiter's `log_to_printk_and_ringbuf: N callbacks suppressed` (`suppressed()`, counted as lost driver
messages) and lines naming `[ascend]` that do not parse (kind "log", op "ascend:malformed").

Every regex is anchored or bounded (no nested quantifiers) and lines are cut at `MAX_LINE` characters first,
so hostile input costs linear time.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from npu_trace.device.kmsg_templates import DEV_FIELDS, RATELIMIT_FUNC, RULES, Rule
from npu_trace.events import NpuEvent

MAX_LINE = 4096  # the kernel's records are at most ~1 KiB of text; anything longer is cut here
MAX_RECORD = 16384  # bytes read per /dev/kmsg record (the kernel refuses reads smaller than a record)
ALL_DEVICES = 0xFF  # index_id of an all-device reset
FOUR_FIELD = frozenset(("trs_drv", "uda"))  # modules whose context is <comm:tgid:pid:cpu>
COMMA_FORM = frozenset(("devmm", "drv_soft_fault", "devdrv"))  # <comm:tgid,pid>; without the comma: <comm:pid>

_PREFIX = re.compile(
    r"^\[ascend\] (?:\[(?P<err>ERROR)\] )?\[(?P<mod>[^\]\[]{1,64})\] \[(?P<func>\w{1,128}) (?P<line>\d{1,7})\] ?"
)
_KV = re.compile(
    r"(?<![\w.])(?P<k>device id|lost count|miss times|[A-Za-z_]\w{0,63})"
    r"(?:[ ]?=[ ]?|:(?=[\w\"]))"
    r"(?P<v>\"[^\"\n]{0,256}\"|\[[^\]\n]{0,128}\]|[^;,()\s\"\[\]]{1,128})"
)
_INT = re.compile(r"^-?\d{1,20}$")
_HEX = re.compile(r"^0x[0-9a-fA-F]{1,16}$")
_SUPPRESSED = re.compile(r"^(?P<func>[\w.]{1,128}): (?P<n>\d{1,12}) callbacks suppressed$")


class KmsgRecord(NamedTuple):
    level: int  # syslog level (pri & 7)
    facility: int  # pri >> 3 (0 = kernel, 1 = user: lines written to /dev/kmsg)
    seq: int
    ts_us: int  # the kernel's local clock (CLOCK_MONOTONIC-like), µs
    flags: str  # "-" or "c" (continuation)
    msg: str
    props: Dict[str, str]  # continuation lines KEY=VALUE (SUBSYSTEM=, DEVICE=)


class Context(NamedTuple):
    comm: str
    tgid: int
    pid: int
    cpu: int  # -1: the form has no cpu


class Parsed(NamedTuple):
    kind: str
    op: str
    dev: Optional[int]
    module: str
    func: str
    line: int
    err: bool
    ctx: Optional[Context]
    msg: str  # the message after prefix and context
    kv: Dict[str, Any]
    step: str  # reset_step only


def parse_record(data: bytes) -> Optional[KmsgRecord]:
    """One /dev/kmsg record, or None when the header is malformed."""
    text = data[:MAX_RECORD].decode("utf-8", "replace")
    head, sep, body = text.partition(";")
    parts = head.split(",")
    if not sep or len(parts) < 4 or not all(p.lstrip("-").isdigit() for p in parts[:3]):
        return None
    lines = body.rstrip("\n").split("\n")
    props = {}
    for extra in lines[1:]:
        key, eq, value = extra.strip().partition("=")
        if eq and key:
            props[key] = value
    pri = int(parts[0])
    return KmsgRecord(pri & 7, pri >> 3, int(parts[1]), int(parts[2]), parts[3], lines[0], props)


class SeqTracker:
    """Counts records missing between consecutive sequence numbers (and after an EPIPE resync)."""

    def __init__(self) -> None:
        self.last: Optional[int] = None
        self.lost = 0

    def see(self, seq: int) -> int:
        """The number of records lost just before `seq` (0 when contiguous or first)."""
        gap = 0 if self.last is None or seq <= self.last else seq - self.last - 1
        self.last = seq if self.last is None else max(self.last, seq)
        self.lost += gap
        return gap


def suppressed(msg: str) -> Optional[Tuple[str, int]]:
    """(function, count) of a printk rate limiter's `func: N callbacks suppressed` line."""
    m = _SUPPRESSED.match(msg[:256])
    return (m.group("func"), int(m.group("n"))) if m else None


def driver_suppressed(msg: str) -> int:
    """Driver messages the Ascend host-log rate limiter dropped, by this line (0 if it is not that line)."""
    hit = suppressed(msg)
    return hit[1] if hit and hit[0] == RATELIMIT_FUNC else 0


def value(text: str) -> Any:
    """A kv value as written: int for decimal/hex numbers, str otherwise (quotes removed)."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]
    if _INT.match(text):
        return int(text)
    if _HEX.match(text):
        return int(text, 16)
    return text


def parse_kv(msg: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for m in _KV.finditer(msg):
        key = m.group("k").replace(" ", "_")
        out.setdefault(key, value(m.group("v")))
    return out


def parse_context(module: str, rest: str) -> Tuple[Optional[Context], str]:
    """The caller context at the start of `rest` (None if there is none; _context lists its forms) and the
    message after it."""
    if not rest.startswith("<"):
        return None, rest
    end = rest.find("> ", 1, 112)
    if end < 0:
        return None, rest
    ctx = _context(module, rest[1:end])
    return (ctx, rest[end + 2 :]) if ctx else (None, rest)


def _context(module: str, inner: str) -> Optional[Context]:
    """The forms the field shows: `<comm:tgid,pid>`, `<comm:tgid:pid:cpu>` (trs_drv, uda), `<comm:tgid:pid>`
    and `<comm:pid>` (a module's usual form is tried first; comm may hold ':', as kworker/u385:0 does). A
    three-part reading whose tgid is 0 but pid is not (`kworker/0:0:20353`) is the two-part form."""
    head, _, tail = inner.rpartition(":")
    if "," in tail:
        tgid, _, pid = tail.partition(",")
        return _ctx(head, tgid, pid, "")
    if module in FOUR_FIELD:
        parts = inner.rsplit(":", 3)
        ctx = _ctx(parts[0], parts[1], parts[2], parts[3]) if len(parts) == 4 else None
        if ctx is not None:
            return ctx
    parts = inner.rsplit(":", 2)
    if module not in COMMA_FORM and len(parts) == 3:
        ctx = _ctx(parts[0], parts[1], parts[2], "")
        if ctx is not None and not (ctx.tgid == 0 and ctx.pid != 0):
            return ctx
    return _ctx(head, tail, tail, "") if head else None


def _ctx(comm: str, tgid: str, pid: str, cpu: str) -> Optional[Context]:
    if not (tgid.isdigit() and pid.isdigit() and (cpu == "" or cpu.isdigit())):
        return None
    return Context(comm, int(tgid), int(pid), int(cpu) if cpu else -1)


class CompiledRule(NamedTuple):
    kind: str
    op: str
    text: str
    module: str
    step: str
    dev: Tuple[str, ...]
    const: Tuple[Tuple[str, Any], ...]
    contains: str
    extract: Optional[re.Pattern]


def compile_rules(rules: Sequence[Rule]) -> List[CompiledRule]:
    out = []
    for r in rules:
        extract = re.compile(r["extract"]) if r.get("extract") else None
        dev = tuple(r.get("dev", ())) + DEV_FIELDS
        const = tuple(r.get("set", {}).items())
        head = (r["kind"], r["op"], r["text"], r.get("module", ""), r.get("step", ""))
        out.append(CompiledRule(*head, dev, const, r.get("contains", ""), extract))
    return out


def _device(kv: Mapping[str, Any], fields: Sequence[str]) -> Optional[int]:
    for name in fields:
        v = kv.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            return None if name == "index_id" and v == ALL_DEVICES else v
    return None


class KmsgMatcher:
    """Message text -> Parsed (or None for lines that are not the driver's), by rules (data)."""

    def __init__(self, rules: Sequence[Rule] = RULES, kernel_rules: Sequence[Rule] = ()) -> None:
        from npu_trace.device.kmsg_templates import KERNEL

        self.rules = compile_rules(rules)
        self.kernel = compile_rules(kernel_rules or KERNEL)
        self.bdf_dev: Dict[str, int] = {}  # learned from lines naming both (and seeded by the source)

    def parse(self, text: str) -> Optional[Parsed]:
        line = text[:MAX_LINE]
        m = _PREFIX.match(line)
        if m is None:
            return self._other(line)
        module = m.group("mod")
        ctx, msg = parse_context(module, line[m.end() :])
        kv = parse_kv(msg)
        rule = self._rule(module, msg)
        if rule is not None and rule.extract is not None:
            hit = rule.extract.match(msg)
            kv.update({k: value(v) for k, v in (hit.groupdict() if hit else {}).items() if v is not None})
        fields = rule.dev if rule else DEV_FIELDS
        dev = self._dev(kv, fields)
        kind, op, step = (rule.kind, rule.op, rule.step) if rule else ("log", f"ascend:{module}", "")
        for key, val in rule.const if rule else ():
            kv.setdefault(key, val)
        return Parsed(kind, op, dev, module, m.group("func"), int(m.group("line")), bool(m.group("err")), ctx,
                      msg, kv, step)  # fmt: skip

    def _rule(self, module: str, msg: str) -> Optional[CompiledRule]:
        for r in self.rules:
            if msg.startswith(r.text) and (not r.module or r.module == module) and r.contains in msg:
                return r
        return None

    def _dev(self, kv: Dict[str, Any], fields: Sequence[str]) -> Optional[int]:
        dev = _device(kv, fields)
        bdf = kv.get("bdf")
        if isinstance(bdf, str):
            if dev is not None:
                self.bdf_dev[short_bdf(bdf)] = dev
            elif short_bdf(bdf) in self.bdf_dev:
                dev = self.bdf_dev[short_bdf(bdf)]
        if dev is None and kv.get("index_id") == ALL_DEVICES:
            kv["all_devices"] = 1
        return dev

    def _other(self, line: str) -> Optional[Parsed]:
        for r in self.kernel:
            if r.contains and r.contains in line:
                return Parsed(r.kind, r.op, None, "kernel", "", 0, False, None, line, parse_kv(line), "")
        if "[ascend]" in line:
            return Parsed("log", "ascend:malformed", None, "", "", 0, False, None, line, {}, "")
        return None


def short_bdf(bdf: str) -> str:
    """ "0000:3B:00.0" and "3b:00.0" -> "3b:00.0" (the driver's kmsg lines leave out the PCI domain 0000)."""
    bdf = bdf.strip().lower()
    return bdf[5:] if bdf.startswith("0000:") else bdf


def to_event(rec: KmsgRecord, p: Parsed, offset_ns: int) -> NpuEvent:
    """The NpuEvent of a parsed record; `offset_ns` converts the kmsg clock to the trace clock."""
    args: Dict[str, Any] = dict(p.kv)
    args.update(source="kmsg", seq=rec.seq, level=rec.level, module=p.module, func=p.func, line=p.line,
                err=int(p.err), msg=p.msg)  # fmt: skip
    if p.ctx is not None:
        args.update(comm=p.ctx.comm, tgid=p.ctx.tgid)
    if p.step:
        args["step"] = p.step
    pid = p.ctx.pid if p.ctx else -1
    cpu = p.ctx.cpu if p.ctx else -1
    return NpuEvent(rec.ts_us * 1000 + offset_ns, p.kind, p.dev, p.op, pid, cpu, args)


KMSG = "/dev/kmsg"


def write_kmsg(line: str, path: str = KMSG) -> Tuple[int, int]:
    """Write one record (a fresh open per record: the devkmsg rate limit is per open file; a record without a
    final newline stays open for a continuation and is not readable until the next record).
    Returns the CLOCK_MONOTONIC ns before and after the write."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        os.write(fd, line.encode()[:1000].rstrip(b"\n") + b"\n")  # no newline: the record stays open
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    finally:
        os.close(fd)
    return before, after
