"""The app_log channel follows its files like tail -F and puts their errors on the trace clock."""

from __future__ import annotations

import os
import time
from typing import Any

from npu_trace.sources.applog_source import AppLogSource
from npu_trace.sources.host_channels import Channels

HB = ("[PID: 9] {t} Device_Absent/Abnormal(EL0001): Device not found or invalid.\n"
      "        Device[{d}] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]\n")  # fmt: skip


def stamp(wall_ns: int) -> str:
    lt = time.localtime(wall_ns // 1_000_000_000)
    us = wall_ns // 1000 % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", lt) + f".{us // 1000:03d}.{us % 1000:03d}"


def test_it_reads_only_new_lines_then_follows_rotation_and_truncation(tmp_path: Any) -> None:
    path = tmp_path / "plog.log"
    path.write_text(HB.format(t=stamp(time.time_ns()), d=7))  # before the open: not read
    src = AppLogSource([str(path)])
    src.open()
    assert src.read() == []
    wall = time.time_ns()
    with open(path, "a") as f:
        f.write(HB.format(t=stamp(wall), d=1) + HB.format(t=stamp(wall), d=2))
    first = src.read()  # the second report waits for its end (the next report or a quiet file)
    assert [(e.kind, e.op, e.dev) for e in first] == [("app_error", "heartbeat_lost", 1)]
    anchor = src.anchor
    assert first[0].ts_ns == (wall // 1000) * 1000 - anchor["realtime_ns"] + anchor["mono_ns"]
    assert first[0].args["clock_error_ns"] == anchor["error_ns"] and first[0].args["time_resolution_ns"] == 1000
    os.rename(path, tmp_path / "plog.log.1")  # rotation: a new file under the name
    path.write_text(HB.format(t=stamp(wall), d=3))
    assert [e.dev for e in src.read()] == [2]  # the old file's last report, ended by the new file's first
    time.sleep(0.6)  # longer than QUIET_S: the report the new file ends with is over
    assert [e.dev for e in src.read()] == [3]
    path.write_text("[PID: 9] " + stamp(wall) + " Device_Absent/Abnormal(EL0001): Device[4] lost.\n")  # truncated
    assert src.read() == []  # read from the start again; its one report still open
    time.sleep(0.6)
    assert [e.dev for e in src.read()] == [4]
    src.close()


def test_the_last_read_ends_the_report_still_open(tmp_path: Any) -> None:
    """A report the application wrote last, read at the session's end before its file was quiet for QUIET_S:
    the final read ends it (it was lost with the session)."""
    path = tmp_path / "plog.log"
    path.write_text("")
    with Channels([], app_logs=[str(path)]) as ch:
        wall = time.time_ns()
        path.write_text(HB.format(t=stamp(wall), d=1) + HB.format(t=stamp(wall), d=2))
        assert [e.dev for e in ch.read()] == [1]  # the second report waits for its end
        assert [e.dev for e in ch.read(final=True)] == [2]


def test_a_missing_file_is_followed_once_it_appears(tmp_path: Any) -> None:
    path = tmp_path / "later.log"
    notes: list = []
    with Channels([], app_logs=[str(path)], on_note=notes.append) as ch:
        assert ch.running == ["app_log"] and "not there yet" in notes[0]
        assert ch.read() == []
        path.write_text(HB.format(t=stamp(time.time_ns()), d=5) + HB.format(t=stamp(time.time_ns()), d=6))
        got = ch.read()
        assert [e.dev for e in got] == [5]
        assert ch.watermark_ns <= got[0].ts_ns + 3_000_000_000
        assert ch.header()["app_log"]["paths"] == [str(path)]
