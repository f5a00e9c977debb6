"""The agent's endpoint and textfile: read-only HTTP that slow, malformed or too many clients cannot stall, and
atomic textfile writes whose failures are said once and lose nothing counted."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Iterator, List

import pytest

from npu_trace.detectors.base import Finding
from npu_trace.errors import UsageError
from npu_trace.sinks.exposition import (
    MAX_CLIENTS,
    MetricsServer,
    TextfileWriter,
    parse_addr,
    registry_of,
    stale_temporaries,
)
from npu_trace.sinks.metrics import MetricsState, SnapshotCollector


def state_with(n: int) -> MetricsState:
    from npu_trace.sinks.metrics import Snapshot

    state = MetricsState()
    state.count([Finding("reset_sequence", 0, "reset", i) for i in range(n)])
    state.latest = Snapshot(findings=tuple(sorted((k, d, c) for (k, d), c in state.findings.items())))
    return state


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1:0", registry_of([SnapshotCollector(state_with(3))]))
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def get(srv: MetricsServer, path: str = "/metrics", method: str = "GET") -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_are_served(server: MetricsServer) -> None:
    status, body = get(server)
    assert status == 200
    assert 'npu_trace_findings_total{id="0",kind="reset_sequence"} 3.0' in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_nothing_changes_state(server: MetricsServer, method: str) -> None:
    status, _ = get(server, method=method)
    assert status == 405


def test_other_paths_are_not_found(server: MetricsServer) -> None:
    assert get(server, "/admin")[0] == 404
    assert get(server, "/")[0] == 200  # the index: a link to /metrics


def raw(srv: MetricsServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=30)


def test_a_malformed_request_gets_400_and_the_server_goes_on(server: MetricsServer) -> None:
    with raw(server) as s:
        s.sendall(b"\x00\x01garbage without a protocol\r\n\r\n")
        answer = s.recv(4096)
    assert b"400 - Bad request syntax" in answer, answer  # an HTTP/0.9-style answer: the request named no version
    assert get(server)[0] == 200


def test_a_slow_client_does_not_hold_up_the_others(server: MetricsServer) -> None:
    """A client that sends half a request line and waits holds only its own thread."""
    with raw(server) as slow:
        slow.sendall(b"GET /metr")
        assert get(server)[0] == 200


def test_too_many_clients_are_closed_at_once_and_the_rest_served(server: MetricsServer) -> None:
    held: List[socket.socket] = []
    try:
        for _ in range(MAX_CLIENTS):
            s = raw(server)
            s.sendall(b"GET /")  # each holds a slot, waiting for the rest of its request
            held.append(s)
        with raw(server) as extra:
            assert extra.recv(1) == b""  # closed without an answer
        assert server.refused >= 1
    finally:
        for s in held:
            s.close()
    assert answered(server)  # once the held slots are free (their threads see the close)


def answered(srv: MetricsServer) -> bool:
    """GET /metrics until it is served (refused while every slot is held): a condition, not a time bound."""
    while True:
        try:
            return bool(get(srv)[0] == 200)
        except (ConnectionError, urllib.error.URLError):
            time.sleep(0.01)


@pytest.mark.parametrize("text,want", [("127.0.0.1:9834", ("127.0.0.1", 9834)), (":9834", ("127.0.0.1", 9834)),
                                       ("[::1]:80", ("::1", 80)), ("0.0.0.0:1", ("0.0.0.0", 1))])  # fmt: skip
def test_addresses(text: str, want: Any) -> None:
    assert parse_addr(text) == want


@pytest.mark.parametrize("text", ["9834", "host:", "host:70000", "[::1:80", "a:b:c"])
def test_bad_addresses(text: str) -> None:
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        parse_addr(text)


def test_an_address_in_use_is_one_clear_error(server: MetricsServer) -> None:
    other = MetricsServer(f"127.0.0.1:{server.port}", server.registry)
    with pytest.raises(UsageError, match=f"127.0.0.1:{server.port}: cannot listen there"):
        other.start()


# ---- the textfile ----------------------------------------------------------------------------------------------
def test_the_textfile_is_written_whole(tmp_path: Any) -> None:
    path = str(tmp_path / "npu_trace.prom")
    writer = TextfileWriter(path, registry_of([SnapshotCollector(state_with(2))]))
    assert writer.write()
    text = (tmp_path / "npu_trace.prom").read_text()
    assert 'npu_trace_findings_total{id="0",kind="reset_sequence"} 2.0' in text
    assert os.listdir(tmp_path) == ["npu_trace.prom"]  # no temporary left
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_an_unwritable_textfile_is_said_once_and_loses_nothing(tmp_path: Any) -> None:
    """The path is a directory (root writes anywhere, so permissions cannot make it fail): each write fails,
    it is said once; when the path is writable again the file has every figure counted meanwhile."""
    path = tmp_path / "npu_trace.prom"
    path.mkdir()
    notes: List[str] = []
    state = state_with(1)
    writer = TextfileWriter(str(path), registry_of([SnapshotCollector(state)]), notes.append)
    assert not writer.write() and not writer.write()
    assert len(notes) == 1 and f"cannot write {path} (Is a directory)" in notes[0], notes
    assert writer.errors == 2 and os.listdir(tmp_path) == ["npu_trace.prom"]  # no temporary left
    state.latest = state_with(5).latest  # counted while failing
    path.rmdir()
    assert writer.write()
    assert "works again" in notes[-1] and len(notes) == 2
    assert 'npu_trace_findings_total{id="0",kind="reset_sequence"} 5.0' in path.read_text()


def test_a_vanished_directory_is_said(tmp_path: Any) -> None:
    sub = tmp_path / "textfile"
    sub.mkdir()
    notes: List[str] = []
    writer = TextfileWriter(str(sub / "a.prom"), registry_of([SnapshotCollector(state_with(1))]), notes.append)
    sub.rmdir()
    assert not writer.write()
    assert "No such file or directory" in notes[0]


@pytest.mark.parametrize("path,why", [("metrics.txt", "ending in .prom"), ("nowhere/x.prom", "no such directory")])
def test_bad_textfile_paths(tmp_path: Any, path: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        TextfileWriter(str(tmp_path / path), registry_of([]))


def test_temporaries_of_dead_agents_are_found(tmp_path: Any) -> None:
    path = tmp_path / "npu_trace.prom"
    for name in ("npu_trace.prom.111.tmp", "npu_trace.prom.222.tmp", "other.prom.111.tmp", "npu_trace.prom"):
        (tmp_path / name).write_text("")
    assert stale_temporaries(str(path), lambda pid: pid == 222) == [str(tmp_path / "npu_trace.prom.111.tmp")]


# ---- the agent's command line: every bad option one line, exit 2, before anything starts ----------------------
@pytest.mark.parametrize("args,words", [
    (["--metrics-addr", "nowhere"], "expected HOST:PORT"),
    (["--metrics-addr", "off"], "needs --textfile"),
    (["--textfile", "/tmp/metrics.txt"], "ending in .prom"),
    (["--textfile", "/nonexistent-dir/x.prom"], "no such directory"),
    (["--textfile-interval", "0", "--textfile", "/tmp/x.prom"], "--textfile-interval must be positive"),
    (["--flight", "30"], "--flight needs --spool"),
    (["--rules", "/nonexistent/rules.toml"], "cannot read the rules file"),
])  # fmt: skip
def test_agent_usage_errors(args: List[str], words: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "npu_trace", "agent", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NPU_TRACE_TRACEFS": "/nonexistent-tracefs"})  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
