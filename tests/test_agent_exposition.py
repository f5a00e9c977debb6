"""The agent's endpoint and textfile: read-only HTTP that slow, malformed or too many clients cannot stall nor hold
(total deadlines, per-peer and total limits that drop the oldest unfinished connection), and atomic textfile writes
whose failures are said once and lose nothing counted."""

from __future__ import annotations

import gzip
import http.client
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from npu_trace.detectors.base import Finding
from npu_trace.errors import UsageError
from npu_trace.sinks.exposition import (
    DROP_REASONS,
    MAX_HEAD_BYTES,
    MAX_PER_PEER,
    BadRequest,
    Clients,
    EndpointCollector,
    MetricsServer,
    TextfileWriter,
    head_end,
    parse_addr,
    parse_head,
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
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert get(server)[0] == 200


def test_a_slow_client_does_not_hold_up_the_others(server: MetricsServer) -> None:
    """A client that sends half a request line and waits holds only its own connection."""
    with raw(server) as slow:
        slow.sendall(b"GET /metr")
        assert get(server)[0] == 200


def read_all(s: socket.socket) -> bytes:
    """What the server sends until it closes (bounded: the socket's timeout, a size)."""
    out = b""
    while len(out) < 1 << 20:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def is_closed(s: socket.socket) -> bool:
    """The server closed `s` (an end of file, or the reset a dropped connection gets); False: open, quiet."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        s.settimeout(30)


def wait_closed(s: socket.socket, limit_s: float = 20.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if is_closed(s):
            return True
        time.sleep(0.01)
    return False


def test_at_the_per_peer_limit_the_oldest_unfinished_is_dropped_and_the_scraper_served() -> None:
    """MAX_PER_PEER half requests held from 127.0.0.1: a scrape from there is served at once; the oldest of the
    half requests is dropped to make room for it (counted, and exposed), the others stay."""
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False))
    srv.registry.register(SnapshotCollector(state_with(3)))
    srv.registry.register(EndpointCollector(srv))
    srv.start()
    held: List[socket.socket] = []
    try:
        for _ in range(MAX_PER_PEER):
            s = raw(srv)
            s.sendall(b"GET /")
            held.append(s)
        wait_for(lambda: srv.held == MAX_PER_PEER, "every half request held")
        status, body = get(srv)
        assert status == 200
        assert 'npu_trace_agent_endpoint_dropped_total{reason="peer_limit"} 1.0' in body, body
        assert 'npu_trace_agent_endpoint_dropped_total{reason="request_deadline"} 0.0' in body, body
        assert is_closed(held[0]) or wait_closed(held[0])
        assert not any(is_closed(s) for s in held[1:])
        assert dict(srv.dropped) == {**dict.fromkeys(DROP_REASONS, 0), "peer_limit": 1}
    finally:
        for s in held:
            s.close()
        srv.close()


def wait_for(cond: Callable[[], bool], what: str, limit_s: float = 20.0) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, f"not within {limit_s:g} s: {what}"
        time.sleep(0.01)


def test_a_trickler_is_dropped_at_the_request_deadline_however_it_trickles() -> None:
    """A request line then a header line every 0.1 s, never the end of the head: an idle timeout would keep it
    for ever; it is dropped at the total deadline (1 s here; REQUEST_DEADLINE_S in production), while still
    trickling."""
    deadline = 1.0
    srv = MetricsServer("127.0.0.1:0", registry_of([SnapshotCollector(state_with(1))]), request_deadline_s=deadline)
    srv.start()
    try:
        t0 = time.monotonic()  # before the connect: the server's clock for this client starts after it
        with raw(srv) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            lines = 0
            while not is_closed(s) and lines < 200:  # 20 s at most: 20 deadlines
                try:
                    s.sendall(b"X-Trickle: %d\r\n" % lines)
                except (BrokenPipeError, ConnectionResetError):
                    break
                lines += 1
                time.sleep(0.1)
            held_s = time.monotonic() - t0
        assert lines < 200, "the trickler was kept for 20 s (20 times its deadline)"
        assert held_s >= deadline and lines >= 2, (held_s, lines)  # dropped at its deadline, not before
        assert srv.dropped["request_deadline"] == 1 and srv.held == 0
        assert get(srv)[0] == 200
    finally:
        srv.close()


class Big(Collector):
    """One family with a help text of `size` bytes: an answer larger than the kernel's socket buffers hold."""

    def __init__(self, size: int) -> None:
        self.size = size

    def collect(self) -> Iterator[Any]:
        yield GaugeMetricFamily("npu_trace_big", "x" * self.size, value=1)


def test_a_client_that_does_not_take_its_answer_is_dropped_at_the_response_deadline() -> None:
    size = 16 << 20
    srv = MetricsServer("127.0.0.1:0", registry_of([Big(size)]), response_deadline_s=1.0)
    srv.start()
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
        s.settimeout(30)
        with s:
            s.connect(("127.0.0.1", srv.port))
            t0 = time.monotonic()  # before the request is sent: its answer's deadline starts after it
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            wait_for(lambda: srv.dropped["response_deadline"] == 1, "the slow reader dropped")
            assert time.monotonic() - t0 >= 1.0
            got = 0
            try:
                while got <= size:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    got += len(chunk)
            except ConnectionResetError:
                pass
        assert got < size, f"the premise: an answer larger than the kernel holds for the client (got {got})"
        # still serving: its small page (its 16 MiB answer, read under the 1 s deadline on a loaded host, can be
        # dropped in turn, as this test's client was)
        assert srv.held == 0 and get(srv, "/")[0] == 200
    finally:
        srv.close()


@pytest.mark.parametrize("request_head,status", [
    (b"GET /metrics HTTP/1.0\r\n\r\n", b"200 OK"),
    (b"\r\nGET / HTTP/1.1\nHost: x\n\n", b"200 OK"),  # an empty line before the request, bare LFs
    (b"GET /metrics\r\n\r\n", b"400 Bad Request"),  # HTTP/0.9: not served
    (b"GET metrics HTTP/1.1\r\n\r\n", b"400 Bad Request"),
    (b"GET /metrics HTTP/1.1\r\nHost x\r\n\r\n", b"400 Bad Request"),
    (b"GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", b"400 Bad Request"),
    (b"GET /metrics HTTP/2.0\r\n\r\n", b"505 HTTP Version Not Supported"),
    (b"OPTIONS /metrics HTTP/1.1\r\n\r\n", b"405 Method Not Allowed"),
    (b"GET /metrics HTTP/1.1\r\n" + b"A: b\r\n" * 101 + b"\r\n", b"431 Request Header Fields Too Large"),
    (b"GET /metrics HTTP/1.1\r\nA: " + b"b" * MAX_HEAD_BYTES + b"\r\n\r\n", b"431 Request Header Fields Too Large"),
])  # fmt: skip
def test_request_heads(server: MetricsServer, request_head: bytes, status: bytes) -> None:
    with raw(server) as s:
        s.sendall(request_head)
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 " + status + b"\r\n"), answer[:200]
    assert b"\r\nConnection: close\r\n" in answer


def test_parse_head() -> None:
    req = parse_head(b"GET http://host:1/metrics?name%5B%5D=a HTTP/1.1\r\nAccept: a\r\naccept: b\r\n\r\n")
    assert (req.method, req.path, req.query) == ("GET", "/metrics", "name%5B%5D=a")
    assert req.headers == {"accept": "a, b"}
    with pytest.raises(BadRequest, match="bad request target"):
        parse_head(b"GET * HTTP/1.1\r\n\r\n")


def test_head_end() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nA: b\r\n") == -1
    assert head_end(b"GET / HTTP/1.1\r\n\r\nrest") == len(b"GET / HTTP/1.1\r\n\r\n")
    assert head_end(b"GET / HTTP/1.1\n\n") == len(b"GET / HTTP/1.1\n\n")


def http_get(port: int, path: str = "/metrics", method: str = "GET", headers: Optional[Dict[str, str]] = None,
             host: str = "127.0.0.1") -> Any:  # fmt: skip
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_head_has_the_headers_and_no_body(server: MetricsServer) -> None:
    status, headers, body = http_get(server.port, method="HEAD")
    _, _, whole = http_get(server.port)
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == len(whole)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


def test_openmetrics_and_gzip_when_asked(server: MetricsServer) -> None:
    status, headers, body = http_get(server.port, headers={
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        "Accept-Encoding": "gzip",
    })  # fmt: skip
    text = gzip.decompress(body).decode()
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert text.endswith("# EOF\n") and 'npu_trace_findings_total{id="0",kind="reset_sequence"} 3.0' in text


class Failing(Collector):
    def collect(self) -> Iterator[Any]:
        raise RuntimeError("collector failed")


def test_a_collector_that_fails_is_a_500_and_the_server_goes_on() -> None:
    srv = MetricsServer("127.0.0.1:0", registry_of([Failing()]))
    srv.start()
    try:
        status, _, body = http_get(srv.port)
        assert status == 500 and b"RuntimeError" in body
        assert http_get(srv.port, "/")[0] == 200
    finally:
        srv.close()


def test_ipv6_loopback() -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    srv = MetricsServer("[::1]:0", registry_of([SnapshotCollector(state_with(2))]))
    srv.start()
    try:
        assert srv.port > 0 and srv.address == f"[::1]:{srv.port}"
        status, _, body = http_get(srv.port, host="::1")
        assert status == 200 and b'npu_trace_findings_total{id="0",kind="reset_sequence"} 2.0' in body
    finally:
        srv.close()
    srv.close()  # twice: nothing more to do


# ---- the endpoint's bookkeeping, with the clock given ---------------------------------------------------------
def test_the_request_deadline_is_a_total_from_the_accept() -> None:
    c: Clients[str] = Clients(request_deadline_s=5.0, response_deadline_s=10.0)
    assert c.admit("a", "p", 0.0) == [] and c.next_deadline() == 5.0
    assert c.expired(4.99) == []  # whatever "a" sent meanwhile: nothing here could extend it
    assert c.expired(5.0) == ["a"] and len(c) == 0
    assert c.dropped["request_deadline"] == 1 and c.next_deadline() is None


def test_the_response_deadline_runs_from_the_request() -> None:
    c: Clients[str] = Clients(request_deadline_s=5.0, response_deadline_s=10.0)
    c.admit("a", "p", 0.0)
    c.answered("a", 3.0)
    assert not c.reading("a") and c.next_deadline() == 13.0
    assert c.expired(12.99) == [] and c.expired(13.0) == ["a"]
    assert c.dropped == {**dict.fromkeys(DROP_REASONS, 0), "response_deadline": 1}


def test_the_per_peer_limit_drops_the_oldest_unfinished_of_that_peer() -> None:
    c: Clients[str] = Clients(max_clients=10, max_per_peer=2)
    c.admit("a1", "A", 0.0)
    c.admit("b1", "B", 1.0)
    c.admit("a2", "A", 2.0)
    assert c.admit("a3", "A", 3.0) == ["a1"]  # not b1, older but of another peer
    c.answered("a2", 4.0)
    assert c.admit("a4", "A", 5.0) == ["a3"]  # not a2: its request is whole
    assert c.admit("a5", "A", 6.0) == ["a4"]
    c.answered("a5", 7.0)
    assert c.admit("a6", "A", 8.0) == ["a2"]  # every one answering: the oldest of them
    assert sorted(c.connections()) == ["a5", "a6", "b1"]
    assert c.dropped["peer_limit"] == 4 and c.dropped["client_limit"] == 0


def test_the_total_limit_drops_the_oldest_unfinished_of_all() -> None:
    c: Clients[str] = Clients(max_clients=3, max_per_peer=3)
    c.admit("a", "A", 0.0)
    c.admit("b", "B", 1.0)
    c.admit("c", "C", 2.0)
    c.answered("a", 2.5)
    assert c.admit("d", "D", 3.0) == ["b"]  # the oldest still reading, not "a" (answering)
    assert c.admit("e", "E", 4.0) == ["c"]
    assert c.dropped == {**dict.fromkeys(DROP_REASONS, 0), "client_limit": 2}


def test_the_per_peer_drop_makes_room_for_the_total_too() -> None:
    c: Clients[str] = Clients(max_clients=2, max_per_peer=1)
    c.admit("a", "A", 0.0)
    c.admit("b", "B", 1.0)
    assert c.admit("a2", "A", 2.0) == ["a"] and len(c) == 2  # one dropped, not two
    assert c.dropped["peer_limit"] == 1 and c.dropped["client_limit"] == 0


def test_a_newcomer_is_never_refused() -> None:
    c: Clients[int] = Clients(max_clients=4, max_per_peer=4)
    for i in range(100):
        c.admit(i, "A" if i % 2 else "B", float(i))
        assert i in c and len(c) <= 4
    assert c.dropped["client_limit"] == 96


def test_a_connection_closed_otherwise_is_forgotten_and_not_counted() -> None:
    c: Clients[str] = Clients(max_clients=1, max_per_peer=1)
    c.admit("a", "A", 0.0)
    c.remove("a")
    c.remove("a")  # twice: nothing
    assert c.admit("b", "A", 1.0) == [] and c.dropped == dict.fromkeys(DROP_REASONS, 0)


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError):
        Clients(max_clients=0)
    with pytest.raises(ValueError):
        Clients(max_per_peer=0)


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
    (["--textfile-interval", "nan", "--textfile", "/tmp/x.prom"], "--textfile-interval must be positive"),
    (["--textfile-interval", "1e9", "--textfile", "/tmp/x.prom"], "at most 86400 s"),
    (["--health-interval", "nan"], "--health-interval must be positive"),
    (["--health-interval", "1e10"], "--health-interval 1e+10: at most 86400 s"),
    (["--duration", "nan"], "--duration must be positive"),
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
