"""Write tests/data/fleet-kernels/<set>/: the tracefs headers, format files and hand-built ring-buffer pages of
the fleet's kernels, which npu-trace cannot run on here, from those kernels' sources (README.md there names
each source).

`.venv/bin/python tests/fleet_kernels.py` rewrites every set; tests/test_ftrace_kernels.py checks that the
stored files are exactly what this writes, then decodes the pages with the page decoder and both page walkers.

The pages are packed here by hand, from kernel/trace/ring_buffer.c's rules, without npu_trace's encoder:
- a page: u64 time_stamp (its first record's time), local_t commit (bytes of data; bit 31: events were lost
  before it; bit 30: their count is stored as an unsigned long right after the data), data, zeros;
- a record: u32 type_len:5 | time_delta:27, then
  * type_len 1..28: a data record of type_len * 4 bytes (payloads of at most 112 bytes);
  * type_len 0: array[0] = payload length + 4, then the payload (longer records);
  * 29 (padding): time_delta 0 ends the page; otherwise (a discarded record, or the end of a full page,
    rb_reset_tail's delta 1) array[0] bytes follow. Readers do not add a padding's delta (rb_update_read_stamp);
  * 30 (time extend): the delta is time_delta | array[0] << 27; the next record's own delta is 0;
  * 31 (absolute stamp, 4.17+): the time is time_delta | array[0] << 27 (59 bits; 6.x restores the top five
    bits from the previous stamp, rb_fix_abs_ts); never written before 4.17.
Each set's `expected.json` is the truth the pages were written from: every record's time, CPU, pid and fields,
and each page's losses.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
ROOT = os.path.join(DATA, "fleet-kernels")
DRIVER = os.path.join(DATA, "ascend-driver", "events")
TS_MASK = (1 << 27) - 1
MISSED_EVENTS, MISSED_STORED = 1 << 31, 1 << 30
ABS_TS_MASK = (1 << 59) - 1

COMMON = (
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
)


@dataclass(frozen=True)
class KernelSet:
    name: str
    release: str  # `uname -r` of such a host
    machine: str
    page_size: int
    char_signed: bool  # is_signed_type(char): x86-64 before 6.2
    time_stamp_line: bool  # header_event prints the time_stamp type (4.17+)
    ids: Dict[str, int] = field(default_factory=dict)  # event -> its id on such a host (assigned at boot)

    @property
    def forced_stamps(self) -> bool:
        """5.10+: an event that interrupted another's time update gets an absolute stamp (RB_ADD_STAMP_FORCE);
        4.17-5.9 write one only when the whole buffer keeps absolute stamps (a hist trigger's common_timestamp)."""
        major, minor = (int(x) for x in self.release.split(".")[:2])
        return (major, minor) >= (5, 10)


def _ids(irq_entry: int, first_driver: int) -> Dict[str, int]:
    """Event ids as such a host assigns them at boot: irq's exit just before its entry, ftrace:print TRACE_PRINT
    (5), the driver's five in the order its modules register them."""
    driver = ("trs_chan:sqe", "trs_chan:cqe", "trs_chan:recv", "trs_core:logic_cqe", "trs_core:logic_cq_recv")
    return {"irq:irq_handler_entry": irq_entry, "irq:irq_handler_exit": irq_entry - 1, "ftrace:print": 5,
            **{event: first_driver + i for i, event in enumerate(driver)}}  # fmt: skip


SETS = (
    KernelSet("centos-7.6-4.14-aarch64", "4.14.0-115.el7a.0.1.aarch64", "aarch64", 65536, False, False,
              _ids(120, 1392)),
    KernelSet("kylin-v10-4.19-aarch64", "4.19.90-23.55.v2101.ky10.aarch64", "aarch64", 65536, False, True,
              _ids(127, 1544)),
    KernelSet("openeuler-22.03-5.10-aarch64", "5.10.0-60.18.0.50.oe2203.aarch64", "aarch64", 4096, False, True,
              _ids(134, 1710)),
    KernelSet("openeuler-22.03-5.10-x86_64", "5.10.0-60.18.0.50.oe2203.x86_64", "x86_64", 4096, True, True,
              _ids(141, 1803)),
    KernelSet("ubuntu-24.04-6.8-x86_64", "6.8.0-51-generic", "x86_64", 4096, False, True, _ids(158, 2011)),
)  # fmt: skip


# ---- tracefs headers and format files ----------------------------------------------------------------------
def header_page(k: KernelSet) -> str:
    """ring_buffer_print_page_header(): offsetof/sizeof of struct buffer_data_page, BUF_PAGE_SIZE."""
    return ("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
            "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
            "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
            f"\tfield: char data;\toffset:16;\tsize:{k.page_size - 16};\tsigned:{int(k.char_signed)};\n")  # fmt: skip


def header_event(k: KernelSet) -> str:
    """ring_buffer_print_entry_header()."""
    stamp = "\ttime_stamp : type == 31\n" if k.time_stamp_line else ""
    return ("# compressed entry header\n\ttype_len    :    5 bits\n\ttime_delta  :   27 bits\n"
            "\tarray       :   32 bits\n\n\tpadding     : type == 29\n\ttime_extend : type == 30\n"
            f"{stamp}\tdata max type_len  == 28\n")  # fmt: skip


def _format(name: str, eid: int, fields: str, print_fmt: str) -> str:
    return f"name: {name}\nID: {eid}\nformat:\n{COMMON}\n{fields}\nprint fmt: {print_fmt}\n"


def formats(k: KernelSet) -> Dict[str, str]:
    """event -> its format file (trace_events.c f_show over the fields TRACE_EVENT/FTRACE_ENTRY define)."""
    char = int(k.char_signed)
    out = {
        "irq:irq_handler_entry": _format("irq_handler_entry", k.ids["irq:irq_handler_entry"],
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n"
            f"\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:{char};\n",
            '"irq=%d name=%s", REC->irq, __get_str(name)'),
        "irq:irq_handler_exit": _format("irq_handler_exit", k.ids["irq:irq_handler_exit"],
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:int ret;\toffset:12;\tsize:4;\tsigned:1;\n",
            '"irq=%d ret=%s", REC->irq, REC->ret ? "handled" : "unhandled"'),
        "ftrace:print": _format("print", k.ids["ftrace:print"],
            "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
            f"\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:{char};\n",
            '"%ps: %s", (void *)REC->ip, REC->buf'),
    }  # fmt: skip
    for event in ("trs_chan:sqe", "trs_chan:cqe", "trs_chan:recv", "trs_core:logic_cqe", "trs_core:logic_cq_recv"):
        out[event] = _driver_format(event, k.ids[event], char)
    return out


def _driver_format(event: str, eid: int, char: int) -> str:
    """The Ascend driver's format (tests/data/ascend-driver, from its TRACE_EVENTs) on this kernel: its id, and
    `__string(str)`'s signedness (is_signed_type(char)); the layout of its records is the same on every 64-bit
    kernel (natural alignment)."""
    system, name = event.split(":")
    with open(os.path.join(DRIVER, system, name, "format")) as f:
        lines = f.read().splitlines(keepends=True)
    out = []
    for line in lines:
        if line.startswith("ID: "):
            line = f"ID: {eid}\n"
        elif "__data_loc char[] str;" in line:
            line = line.replace("signed:0;", f"signed:{char};")
        out.append(line)
    return "".join(out)


# ---- record payloads (little-endian: x86-64 and aarch64 alike) -----------------------------------------------
def _pad4(raw: bytes) -> bytes:
    return raw + bytes(-len(raw) % 4)


def _common(eid: int, pid: int, flags: int = 0, preempt: int = 0) -> bytes:
    return struct.pack("<HBBi", eid, flags, preempt, pid)


def _loc(fixed: int, data: bytes) -> int:
    return len(data) << 16 | fixed


def irq_entry(k: KernelSet, pid: int, irq: int, name: str) -> Tuple[bytes, Dict[str, Any]]:
    raw = name.encode() + b"\0"
    payload = _common(k.ids["irq:irq_handler_entry"], pid, 0x0D, 1) + struct.pack("<iI", irq, _loc(16, raw)) + raw
    return _pad4(payload), {"irq": irq, "name": name}


def irq_exit(k: KernelSet, pid: int, irq: int, ret: int) -> Tuple[bytes, Dict[str, Any]]:
    return _common(k.ids["irq:irq_handler_exit"], pid, 0x0D, 1) + struct.pack("<ii", irq, ret), {"irq": irq, "ret": ret}


def marker(k: KernelSet, pid: int, text: str, ip: int = 0xFFFF000008123450) -> Tuple[bytes, Dict[str, Any]]:
    """trace_marker: tracing_mark_write() stores the text, a '\\n' when it has none, and a NUL."""
    buf = text if text.endswith("\n") else text + "\n"
    return _pad4(_common(k.ids["ftrace:print"], pid) + struct.pack("<Q", ip) + buf.encode() + b"\0"), {
        "ip": ip, "buf": buf}  # fmt: skip


def sqe(k: KernelSet, pid: int, dev: int, task: int, stream: int, sec: int, nsec: int) -> Tuple[bytes, Dict[str, Any]]:
    """trs_chan:sqe "Task Send": str@8, inst@12, sq_trace@20 (40 bytes), timestamp@64, str's data@80."""
    raw = b"Task Send\0"
    trace = (7, 1, 10, 11, 2, 3, 0, 1, task, stream)  # sqid status head tail chan types.type/sub_type type task stream
    payload = (_common(k.ids["trs_chan:sqe"], pid) + struct.pack("<I", _loc(80, raw)) + struct.pack("<II", dev, 0)
               + struct.pack("<10I", *trace) + bytes(4) + struct.pack("<qq", sec, nsec) + raw)  # fmt: skip
    names = ("sqid", "status", "sq_head", "sq_tail", "chan_id", "types.type", "types.sub_type", "type", "task_id",
             "stream_id")  # fmt: skip
    return _pad4(payload), {"str": "Task Send", "inst": {"devid": dev, "tsid": 0}, "sq_trace": dict(zip(names, trace)),
                            "timestamp": {"tv_sec": sec, "tv_nsec": nsec}}  # fmt: skip


def logic_cqe(k: KernelSet, pid: int, dev: int, task: int, stream: int, err: int,
              sec: int, nsec: int) -> Tuple[bytes, Dict[str, Any]]:  # fmt: skip
    """trs_core:logic_cqe "Logic Cq Enque": str@8, inst@12, cq_trace@24 (56 bytes: 12 u32 + u64), timestamp@80,
    str's data@96: a record of 112 bytes, the longest whose length fits in type_len (28 words)."""
    raw = b"Logic Cq Enque\0"
    words = (4, 9, 10, task, stream, 7, 11, 1, 1, err, 2 if err else 0, 0)
    head = _common(k.ids["trs_core:logic_cqe"], pid) + struct.pack("<I", _loc(96, raw)) + struct.pack("<II", dev, 1)
    payload = head + bytes(4) + struct.pack("<12IQ", *words, 88_000_000_123) + struct.pack("<qq", sec, nsec) + raw
    names = ("logic_cqid", "head", "tail", "task_id", "stream_id", "sqid", "sq_head", "sqe_type", "match_flag",
             "errcode", "errtype", "drop_flag")  # fmt: skip
    fields = {"str": "Logic Cq Enque", "inst": {"devid": dev, "tsid": 1},
              "cq_trace": {**dict(zip(names, words)), "timestamp": 88_000_000_123},
              "timestamp": {"tv_sec": sec, "tv_nsec": nsec}}  # fmt: skip
    return _pad4(payload), fields


# ---- pages ---------------------------------------------------------------------------------------------------
@dataclass
class CpuStream:
    """One CPU's pages, written record by record; `truth` is what a reader must make of them."""

    k: KernelSet
    cpu: int
    now: int = 0
    pages: List[bytes] = field(default_factory=list)
    truth: List[Dict[str, Any]] = field(default_factory=list)
    listing: List[str] = field(default_factory=list)
    _data: bytearray = field(default_factory=bytearray)
    _page_ts: int = 0
    _first: int = 0  # where this page's records start in `truth`

    def start(self, ts: int) -> CpuStream:
        """A new page whose first record is stamped `ts` (its own delta 0)."""
        self._data, self._page_ts, self.now, self._first = bytearray(), ts, ts, len(self.truth)
        self.listing.append(f"cpu{self.cpu} page {len(self.pages)}: time_stamp {ts}")
        return self

    def _put(self, raw: bytes, what: str) -> None:
        self.listing.append(f"  +{len(self._data):5d}  {raw[:8].hex(' ')}{' ..' if len(raw) > 8 else ''}  {what}")
        self._data += raw

    def event(self, delta: int, record: Tuple[bytes, Dict[str, Any]], event: str) -> CpuStream:
        payload, fields = record
        assert delta <= TS_MASK and len(payload) % 4 == 0
        if len(payload) <= 112:
            raw = struct.pack("<I", len(payload) // 4 | delta << 5) + payload
            how = f"type_len {len(payload) // 4}"
        else:
            raw = struct.pack("<II", delta << 5, len(payload) + 4) + payload
            how = f"type_len 0, array[0] {len(payload) + 4}"
        self.now += delta
        pid = struct.unpack_from("<i", payload, 4)[0]
        self.truth.append({"ts": self.now, "cpu": self.cpu, "pid": pid, "event": event, "fields": fields})
        self._put(raw, f"{event} ({how}, delta {delta}) ts {self.now}")
        return self

    def extend(self, delta: int) -> CpuStream:
        """A delta too long for 27 bits: a time extend carries it; the next record's delta is 0."""
        self.now += delta
        self._put(struct.pack("<II", 30 | (delta & TS_MASK) << 5, delta >> 27), f"time extend {delta} -> {self.now}")
        return self

    def stamp(self, ts: int, masked: bool = False) -> CpuStream:
        """An absolute stamp (4.17+). `masked`: 6.x writes the low 59 bits only (the reader restores the top five
        from the previous stamp)."""
        assert self.k.time_stamp_line, "no kernel before 4.17 writes an absolute stamp"
        value = ts & ABS_TS_MASK if masked else ts
        assert value < 1 << 59
        self.now = ts
        self._put(struct.pack("<II", 31 | (value & TS_MASK) << 5, value >> 27), f"absolute stamp {value} -> {ts}")
        return self

    def discard(self, delta: int, record: Tuple[bytes, Dict[str, Any]]) -> CpuStream:
        """A record discarded after it was written (rb_event_discard): padding with array[0] = its payload length,
        the payload's tail left in place; readers skip it without adding its delta."""
        payload = record[0]
        assert len(payload) <= 112 and delta
        raw = struct.pack("<II", 29 | delta << 5, len(payload)) + payload[4:]
        self._put(raw, f"discarded record (padding, delta {delta} not counted, {len(payload)} bytes)")
        return self

    def close(self, full: bool = False, missed: Optional[int] = None) -> CpuStream:
        """End the page. `full`: the writer moved on (rb_reset_tail): padding of delta 1 fills the rest and
        commit is the whole data area. `missed`: events lost before this page (0: count not stored)."""
        size = self.k.page_size - 16
        if full:
            rest = size - len(self._data)
            assert rest >= 8
            self._put(struct.pack("<II", 29 | 1 << 5, rest - 4) + bytes(rest - 8), f"end padding {rest} bytes")
        commit = len(self._data)
        tail = b""
        if missed is not None:
            commit |= MISSED_EVENTS
            loss = {"loss": "page_missed", "cpu": self.cpu, "ts": self._page_ts, "count": missed}
            self.truth.insert(self._first, loss)  # a reader says it before the page's records
            if missed:
                commit |= MISSED_STORED
                tail = struct.pack("<Q", missed)
                assert len(self._data) + 8 <= size
        page = struct.pack("<QQ", self._page_ts, commit) + self._data + tail
        self.pages.append(page + bytes(self.k.page_size - len(page)))
        self.listing.append(f"  commit {commit:#x}" + (f", {missed} missed" if missed is not None else ""))
        return self


def _filler(s: CpuStream, until: int, pid: int, irq: int) -> CpuStream:
    """IRQ entry/exit pairs until the page holds `until` bytes or more."""
    while len(s._data) < until:
        s.event(900, irq_entry(s.k, pid, irq, "cq_update_irq"), "irq:irq_handler_entry")
        s.event(1100, irq_exit(s.k, pid, irq, 1), "irq:irq_handler_exit")
    return s


def streams(k: KernelSet) -> List[CpuStream]:
    """The pages of one set: a submit, its completion IRQ and the completion, trace markers, a time extend, a
    discarded record, a long record, full pages ending in padding, losses; and the rules of the kernel's version
    (absolute stamps from 4.17, the 6.x top-bits rule)."""
    base = 7_200_000_000_000  # two hours of uptime
    cpu0 = CpuStream(k, 0).start(base)
    cpu0.event(0, sqe(k, 4242, 3, 100, 5, 7200, 1000), "trs_chan:sqe")
    cpu0.event(2500, irq_entry(k, 4242, 130, "cq_update_irq"), "irq:irq_handler_entry")
    if k.forced_stamps:  # 5.10+: a nested event whose delta was not trusted gets an absolute stamp, here earlier
        cpu0.stamp(cpu0.now - 800)
    cpu0.event(0 if k.forced_stamps else 1200, irq_exit(k, 4242, 130, 1), "irq:irq_handler_exit")
    cpu0.extend(400_000_000)  # 0.4 s: more than 27 bits of nanoseconds
    cpu0.event(0, logic_cqe(k, 0, 3, 100, 5, 0, 7200, 400_002_000), "trs_core:logic_cqe")
    cpu0.discard(5, irq_exit(k, 0, 131, 0))
    cpu0.event(30_000, marker(k, 4242, "step " + "x" * 120), "ftrace:print")  # 145-byte payload: type_len 0
    cpu0.event(7, irq_entry(k, 0, 131, "trs-mbox-3-0"), "irq:irq_handler_entry")
    _filler(cpu0, 640, 0, 131).close(full=True)
    cpu0.start(cpu0.now + 10_000_000)
    cpu0.event(0, irq_exit(k, 0, 131, 1), "irq:irq_handler_exit")
    cpu0.event(3000, sqe(k, 4242, 3, 101, 5, 7200, 410_005_000), "trs_chan:sqe")
    cpu0.close(missed=17)  # copied by the reader: 17 events overwritten before it, the count stored
    cpu1 = CpuStream(k, 1).start(base + 100_000)
    cpu1.event(0, marker(k, 4243, "begin"), "ftrace:print")
    cpu1.event(64, logic_cqe(k, 0, 2, 7, 1, 0x3A, 7200, 100_064), "trs_core:logic_cqe")
    _filler(cpu1, 320, 0, 130).close(full=True, missed=0)  # a full page: no room for the count
    out = [cpu0, cpu1]
    if k.release.startswith("6."):  # a clock with its top bits set (6.x: rb_fix_abs_ts)
        cpu2 = CpuStream(k, 2).start((1 << 59) + 5_000)
        cpu2.event(0, marker(k, 1, "top bits"), "ftrace:print")
        cpu2.stamp((1 << 59) + 9_000, masked=True)
        cpu2.event(0, irq_exit(k, 0, 130, 1), "irq:irq_handler_exit")
        out.append(cpu2.close())
    return out


# ---- writing a set -------------------------------------------------------------------------------------------
def files(k: KernelSet) -> Dict[str, bytes]:
    """Every file of the set, by path relative to its directory."""
    out = {"header_page": header_page(k).encode(), "header_event": header_event(k).encode()}
    for event, text in formats(k).items():
        system, name = event.split(":")
        out[f"events/{system}/{name}/format"] = text.encode()
    blob, index, truth, listing = bytearray(), [], [], []
    for s in streams(k):
        for page in s.pages:
            index.append([s.cpu, len(blob), len(page)])
            blob += page
        truth += s.truth
        listing += s.listing
    out["pages.bin"] = bytes(blob)
    out["pages.json"] = json.dumps({"kernel": k.release, "machine": k.machine, "pages": index}).encode()
    out["expected.json"] = ("[\n" + ",\n".join(json.dumps(t) for t in truth) + "\n]\n").encode()
    out["pages.txt"] = ("# the records of pages.bin, as written (tests/fleet_kernels.py)\n" + "\n".join(listing)
                        + "\n").encode()  # fmt: skip
    return out


def write(k: KernelSet, root: str = ROOT) -> None:
    for rel, raw in files(k).items():
        path = os.path.join(root, k.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(raw)


if __name__ == "__main__":
    for kset in SETS:
        write(kset)
        print(f"wrote {os.path.join(ROOT, kset.name)}", file=sys.stderr)
