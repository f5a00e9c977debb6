"""Where the agent's metrics go: an HTTP endpoint for Prometheus, and files for node-exporter's textfile collector.

`MetricsServer` serves `/metrics` (Prometheus text format, or OpenMetrics when the Accept header asks for it;
gzip when Accept-Encoding allows it) and a small index at `/`; anything else is 404, a method other than GET
and HEAD 405, a malformed request 400, a request head over `MAX_HEAD_BYTES` (or `MAX_HEADER_LINES` lines)
431. A scrape renders the latest snapshot and never waits on the tracing thread, nor the tracing on it. It
binds where it is told (IPv4, `[::1]`, port 0: a port the kernel chooses); the agent's default is 127.0.0.1.

One thread runs the endpoint: a `selectors` loop that accepts, reads and writes without blocking, parses the
request head itself and answers with `Connection: close` (one request per connection). A client that holds a
connection costs a socket and a few bytes, never a thread, and cannot hold it for long (`Clients`):
- deadlines are totals, not idle timeouts: the request head must be whole `REQUEST_DEADLINE_S` after the
  connection was accepted, and the answer taken by the client `RESPONSE_DEADLINE_S` after the request was;
  a client trickling a byte a second is dropped at its deadline all the same;
- at most `MAX_PER_PEER` connections per client address and `MAX_CLIENTS` in all; a newcomer is never refused:
  when a limit is reached, the oldest connection (of that address, for the per-address limit) that has not
  sent a whole request is dropped to make room (one being answered only when every one is), so a scraper
  that sends its request at once is served however many clients trickle;
- each round serves the connections that are readable before it accepts (at most `ACCEPTS_PER_ROUND`), and a
  new connection is read as soon as it is accepted (its request is often there already).
What was dropped is counted by reason (`DROP_REASONS`; `EndpointCollector`:
`npu_trace_agent_endpoint_dropped_total{reason}`).

`TextfileWriter` writes the same exposition atomically (a temporary file in the same directory, then a
rename: node-exporter never reads half a file), mode 0644. A write that fails is said once, with the reason,
and again when writing works again; the figures stay in memory (and on `/metrics`) and the next write has
them all. `stale_temporaries` finds the temporary files a killed agent left.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import selectors
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, Hashable, Iterable, Iterator, List, Mapping, Optional, Tuple, TypeVar
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from npu_trace.errors import UsageError

REQUEST_DEADLINE_S = 5.0  # accepted -> the request head whole
RESPONSE_DEADLINE_S = 10.0  # the request whole -> the answer taken (Prometheus's default scrape timeout)
MAX_CLIENTS = 64  # connections held at once, in all
MAX_PER_PEER = 16  # ... from one client address
MAX_HEAD_BYTES = 16384  # request line and headers
MAX_HEADER_LINES = 100
ACCEPTS_PER_ROUND = 16  # at most MAX_PER_PEER: one accepted behind tricklers outlives its round (read in the next)
BACKLOG = 128
ACCEPT_PAUSE_S = 0.1  # out of file descriptors: accepting pauses this long
DRAIN_BYTES = 65536  # read (and ignored) after an answer, so that closing sends no reset over it
DROP_REASONS = ("request_deadline", "response_deadline", "peer_limit", "client_limit")
INDEX = b"<html><head><title>npu-trace agent</title></head><body><a href=\"/metrics\">metrics</a></body></html>\n"
Note = Callable[[str], None]
K = TypeVar("K", bound=Hashable)
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


def parse_addr(text: str) -> Tuple[str, int]:
    """ "HOST:PORT", "[::1]:PORT" or ":PORT" (127.0.0.1) -> (host, port); a UsageError otherwise."""
    m = re.match(r"^(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]*)):(\d{1,5})$", text.strip())
    port = int(m.group(3)) if m else -1
    if not m or not 0 <= port < 65536:  # 0: a port the kernel chooses (said at start)
        raise UsageError(f"--metrics-addr {text!r}: expected HOST:PORT (e.g. 127.0.0.1:9834, [::1]:9834, :9834)")
    host = m.group(1) if m.group(1) is not None else (m.group(2) or "127.0.0.1")
    return host, port


# ---- who holds the endpoint, and whom to drop (pure: the caller says what time it is) -------------------------
@dataclass
class _Held:
    peer: str
    deadline: float


class Clients(Generic[K]):
    """The connections held, each `reading` (its request not yet whole) or `answering`, with its deadline.

    `admit` takes a newcomer and says whom to close to make room, `answered` starts a connection's answer
    deadline, `expired` says whom to close now, `remove` forgets one closed for any other reason. Every
    connection this class tells the caller to close is counted in `dropped` by reason (DROP_REASONS)."""

    def __init__(self, max_clients: int = MAX_CLIENTS, max_per_peer: int = MAX_PER_PEER,
                 request_deadline_s: float = REQUEST_DEADLINE_S,
                 response_deadline_s: float = RESPONSE_DEADLINE_S) -> None:  # fmt: skip
        if max_clients < 1 or max_per_peer < 1:
            raise ValueError("the endpoint's limits must allow at least one connection")
        self.max_clients = max_clients
        self.max_per_peer = max_per_peer
        self.request_deadline_s = request_deadline_s
        self.response_deadline_s = response_deadline_s
        self.dropped: Dict[str, int] = dict.fromkeys(DROP_REASONS, 0)  # keys fixed: read from other threads
        self._reading: OrderedDict[K, _Held] = OrderedDict()  # oldest first
        self._answering: OrderedDict[K, _Held] = OrderedDict()
        self._per_peer: Dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._reading) + len(self._answering)

    def __contains__(self, key: object) -> bool:
        return key in self._reading or key in self._answering

    def reading(self, key: K) -> bool:
        return key in self._reading

    def admit(self, key: K, peer: str, now: float) -> List[K]:
        """`key` is held from `now` (its request due by now + request_deadline_s); the connections to close to
        make room for it: the oldest not yet answered of its peer, then of all, when a limit is reached."""
        out = []
        if self._per_peer.get(peer, 0) >= self.max_per_peer:
            out.append(self._drop(self._oldest(peer), "peer_limit"))
        if len(self) >= self.max_clients:
            out.append(self._drop(self._oldest(None), "client_limit"))
        self._reading[key] = _Held(peer, now + self.request_deadline_s)
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        return out

    def answered(self, key: K, now: float) -> None:
        """`key`'s request is whole: its answer is due to be taken by now + response_deadline_s."""
        held = self._reading.pop(key)
        held.deadline = now + self.response_deadline_s
        self._answering[key] = held

    def expired(self, now: float) -> List[K]:
        """The connections whose deadline has come (forgotten, counted)."""
        late = [(k, "request_deadline") for k, h in self._reading.items() if h.deadline <= now]
        late += [(k, "response_deadline") for k, h in self._answering.items() if h.deadline <= now]
        return [self._drop(k, why) for k, why in late]

    def next_deadline(self) -> Optional[float]:
        deadlines = [h.deadline for h in self._reading.values()] + [h.deadline for h in self._answering.values()]
        return min(deadlines) if deadlines else None

    def remove(self, key: K) -> None:
        """`key` was closed for another reason (answered, gone): forgotten, not counted."""
        held = self._reading.pop(key, None) or self._answering.pop(key, None)
        if held is not None:
            left = self._per_peer[held.peer] - 1
            if left:
                self._per_peer[held.peer] = left
            else:
                del self._per_peer[held.peer]

    def connections(self) -> List[K]:
        return [*self._reading, *self._answering]

    def _oldest(self, peer: Optional[str]) -> K:
        """The oldest connection still reading its request (of `peer`, when given); else the oldest answering."""
        for held in (self._reading, self._answering):
            for key, h in held.items():
                if peer is None or h.peer == peer:
                    return key
        raise AssertionError("a limit was reached with nothing held")  # the limits are at least 1

    def _drop(self, key: K, why: str) -> K:
        self.remove(key)
        self.dropped[why] += 1
        return key


# ---- HTTP: the request head, the answers --------------------------------------------------------------------
class BadRequest(Exception):
    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names; repeated ones joined with ", "


_HEAD_END = re.compile(rb"\r?\n\r?\n")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VERSION = re.compile(r"^HTTP/(\d)\.(\d)$")


def head_end(buf: bytes, start: int = 0) -> int:
    """Where the request head in `buf` ends (after its empty line), searching from `start`; -1: not yet."""
    m = _HEAD_END.search(buf, max(0, start))
    return m.end() if m else -1


def parse_head(head: bytes) -> Request:
    """The request line and headers (a BadRequest with the status to answer when they are not acceptable)."""
    text = head.decode("latin-1")
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    while lines and not lines[0]:  # empty lines before the request line are ignored (RFC 9112 2.2)
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise BadRequest("400 Bad Request", "no request line")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]):
        raise BadRequest("400 Bad Request", "bad request line (expected: METHOD /path HTTP/1.1)")
    method, target, version = parts
    v = _VERSION.match(version)
    if v is None:
        raise BadRequest("400 Bad Request", "bad protocol version")
    if v.group(1) != "1":
        raise BadRequest("505 HTTP Version Not Supported", "HTTP/1.x only")
    if len(lines) - 1 > MAX_HEADER_LINES:
        raise BadRequest("431 Request Header Fields Too Large", f"more than {MAX_HEADER_LINES} header lines")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):  # also a folded line (leading white space): refused (RFC 9112 5.2)
            raise BadRequest("400 Bad Request", "bad header line")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if target.startswith("/"):
        path, _, query = target.partition("?")
    elif target.lower().startswith(("http://", "https://")):
        split = urlsplit(target)
        path, query = split.path or "/", split.query
    else:
        raise BadRequest("400 Bad Request", "bad request target")
    return Request(method, path, query, headers)


def response(status: str, headers: Iterable[Tuple[str, str]], body: bytes, send_body: bool = True) -> bytes:
    """A whole HTTP/1.1 answer, Content-Length set, the connection closed after it (HEAD: no body)."""
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}",
             "Connection: close"]  # fmt: skip
    return "\r\n".join([*lines, "", ""]).encode("latin-1") + (body if send_body else b"")


def _text(status: str, body: str, extra: Iterable[Tuple[str, str]] = (), send_body: bool = True) -> bytes:
    return response(status, [("Content-Type", "text/plain; charset=utf-8"), *extra], body.encode(), send_body)


def answer(registry: CollectorRegistry, request: Request) -> bytes:
    """The answer to a parsed request (the metrics rendered now, in the format the client accepts)."""
    head_only = request.method == "HEAD"
    if request.method not in ("GET", "HEAD"):
        return _text("405 Method Not Allowed", "read-only: GET /metrics\n", [("Allow", "GET, HEAD")])
    if request.path == "/metrics":
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        params = parse_qs(request.query)
        source: Collector = registry.restricted_registry(params["name[]"]) if "name[]" in params else registry
        body = bytes(encoder(source))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(request.headers.get("accept-encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return response("200 OK", headers, body, not head_only)
    if request.path == "/":
        return response("200 OK", [("Content-Type", "text/html; charset=utf-8")], INDEX, not head_only)
    return _text("404 Not Found", "not found: GET /metrics\n", send_body=not head_only)


def answer_head(registry: CollectorRegistry, head: bytes) -> bytes:
    """The answer to a whole request head, whatever it holds (an error rendering: 500, said to the client)."""
    try:
        request = parse_head(head)
    except BadRequest as exc:
        return _text(exc.status, f"{exc.why}\n")
    try:
        return answer(registry, request)
    except Exception as exc:  # a collector that fails: this scrape fails, the endpoint goes on
        return _text("500 Internal Server Error", f"the metrics could not be rendered: {type(exc).__name__}\n")


# ---- the endpoint --------------------------------------------------------------------------------------------
class _Conn:
    __slots__ = ("inbuf", "out", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.out: Optional[memoryview] = None  # the answer still to send


class MetricsServer:
    """The /metrics endpoint on its own thread. `start()` binds (a UsageError naming the address when it
    cannot), `close()` stops it and waits for its thread. The limits and deadlines are the module's
    constants unless given (tests give shorter ones)."""

    def __init__(self, addr: str, registry: CollectorRegistry, *, max_clients: int = MAX_CLIENTS,
                 max_per_peer: int = MAX_PER_PEER, request_deadline_s: float = REQUEST_DEADLINE_S,
                 response_deadline_s: float = RESPONSE_DEADLINE_S) -> None:  # fmt: skip
        self.host, self.port = parse_addr(addr)
        self.registry = registry
        self.clients: Clients[_Conn] = Clients(max_clients, max_per_peer, request_deadline_s, response_deadline_s)
        self.served = 0  # answers sent whole
        self._listener: Optional[socket.socket] = None
        self._selector: Optional[selectors.BaseSelector] = None
        self._wake: Optional[Tuple[socket.socket, socket.socket]] = None
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._accept_paused_until: Optional[float] = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def dropped(self) -> Mapping[str, int]:
        """Connections dropped, by reason (DROP_REASONS)."""
        return self.clients.dropped

    @property
    def held(self) -> int:
        """Connections held now."""
        return len(self.clients)

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(BACKLOG)
        except OSError as exc:
            listener.close()
            raise UsageError(f"--metrics-addr {self.address}: cannot listen there ({exc.strerror or exc})") from None
        listener.setblocking(False)
        self.port = listener.getsockname()[1]  # port 0: the one the kernel chose
        self._listener = listener
        self._wake = socket.socketpair()
        self._wake[0].setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake[0], selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="npu-trace-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping = True
        assert self._wake is not None
        with contextlib.suppress(OSError):
            self._wake[1].send(b"x")
        thread.join()

    # ---- the loop (its thread only) -----------------------------------------------------------------------
    def _serve(self) -> None:
        assert self._selector is not None
        try:
            while not self._stopping:
                events = self._selector.select(self._timeout(time.monotonic()))
                now = time.monotonic()
                accept = False
                for key, mask in events:
                    if key.data == "listener":
                        accept = True
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            key.fileobj.recv(64)  # type: ignore[union-attr]
                    elif key.data in self.clients:  # not closed earlier in this round
                        self._ready(key.data, mask, now)
                for conn in self.clients.expired(now):
                    self._close(conn, abort=True)
                self._resume_accepting(now)
                if accept:
                    self._accept(now)
        finally:
            self._shut()

    def _timeout(self, now: float) -> Optional[float]:
        due = [t for t in (self.clients.next_deadline(), self._accept_paused_until) if t is not None]
        return max(0.0, min(due) - now) if due else None

    def _ready(self, conn: _Conn, mask: int, now: float) -> None:
        if mask & selectors.EVENT_READ and self.clients.reading(conn):
            self._read(conn, now)
        elif mask & selectors.EVENT_WRITE:
            self._write(conn)

    def _accept(self, now: float) -> None:
        assert self._listener is not None and self._selector is not None
        for _ in range(ACCEPTS_PER_ROUND):
            try:
                sock, addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._selector.unregister(self._listener)  # it stays readable: pause rather than spin
                    self._accept_paused_until = now + ACCEPT_PAUSE_S
                    return
                continue  # that one went away (ECONNABORTED, ...)
            sock.setblocking(False)
            conn = _Conn(sock, str(addr[0]))
            for victim in self.clients.admit(conn, conn.peer, now):
                self._close(victim, abort=True)
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._read(conn, now)  # the request is often there already

    def _resume_accepting(self, now: float) -> None:
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            assert self._listener is not None and self._selector is not None
            self._accept_paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")

    def _read(self, conn: _Conn, now: float) -> None:
        try:
            data = conn.sock.recv(MAX_HEAD_BYTES + 1 - len(conn.inbuf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._close(conn)
            return
        seen = len(conn.inbuf)
        conn.inbuf += data
        end = head_end(conn.inbuf, seen - 3)
        if end < 0 and len(conn.inbuf) <= MAX_HEAD_BYTES:
            return  # more to come (by the deadline)
        if end < 0 or end > MAX_HEAD_BYTES:
            out = _text("431 Request Header Fields Too Large", f"the request head is over {MAX_HEAD_BYTES} bytes\n")
        else:
            out = answer_head(self.registry, bytes(conn.inbuf[:end]))
        conn.inbuf = bytearray()
        self.clients.answered(conn, now)
        conn.out = memoryview(out)
        assert self._selector is not None
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            while conn.out:
                conn.out = conn.out[conn.sock.send(conn.out) :]
        except (BlockingIOError, InterruptedError):
            return  # the rest when the client takes it (by the deadline)
        except OSError:
            self._close(conn)
            return
        self.served += 1
        self._finish(conn)

    def _finish(self, conn: _Conn) -> None:
        """The answer is sent: what the client sent beyond its request head read (a close over unread bytes
        would send a reset, which can destroy the answer before the client reads it), then closed."""
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.recv(DRAIN_BYTES)
        self._close(conn)

    def _close(self, conn: _Conn, abort: bool = False) -> None:
        """`abort`: a dropped connection, reset at once (nothing it has not taken is kept for it in the kernel)."""
        self.clients.remove(conn)
        assert self._selector is not None
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        if abort:
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        conn.sock.close()

    def _shut(self) -> None:
        for conn in self.clients.connections():
            self._close(conn)
        assert self._selector is not None and self._listener is not None and self._wake is not None
        self._selector.close()
        self._listener.close()
        for s in self._wake:
            s.close()


class EndpointCollector(Collector):
    """The endpoint's own figures: connections dropped, by reason (every reason present from the start)."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("npu_trace_agent_endpoint_dropped", "Connections to the metrics endpoint dropped: "
                                "request_deadline (the request not whole in time), response_deadline (the answer "
                                "not taken in time), peer_limit, client_limit (the oldest not answered, to make "
                                "room for a newcomer)", labels=("reason",))  # fmt: skip
        dropped = self.server.dropped
        for reason in DROP_REASONS:
            c.add_metric((reason,), dropped.get(reason, 0))
        yield c


# ---- node-exporter's textfile collector ----------------------------------------------------------------------
def check_textfile_path(path: str) -> None:
    """A UsageError when `path` cannot be a textfile collector's file (wrong name, no such directory)."""
    if not path.endswith(".prom"):
        raise UsageError(f"--textfile {path}: node-exporter's textfile collector reads only files ending in .prom")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"--textfile {path}: no such directory {directory}")


def _temporary(path: str) -> str:
    return f"{path}.{os.getpid()}.tmp"


def stale_temporaries(path: str, alive: Callable[[int], bool]) -> List[str]:
    """Temporary files `path.<pid>.tmp` of agents no longer running (killed mid-write)."""
    directory, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(base) + r"\.(\d+)\.tmp$")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in sorted(names):
        m = pattern.match(name)
        if m and not alive(int(m.group(1))):
            out.append(os.path.join(directory, name))
    return out


class TextfileWriter:
    """write() -> True when the file now holds the latest figures."""

    def __init__(self, path: str, registry: CollectorRegistry, on_note: Optional[Note] = None) -> None:
        check_textfile_path(path)
        self.path = path
        self.registry = registry
        self.on_note = on_note or (lambda _text: None)
        self.writes = 0
        self.errors = 0
        self._failing: Optional[str] = None  # the reason said for the current run of failures

    def write(self) -> bool:
        data = generate_latest(self.registry)
        tmp = _temporary(self.path)
        try:
            _write_file(tmp, data)
            os.replace(tmp, self.path)
        except OSError as exc:
            self._failed(tmp, exc)
            return False
        self.writes += 1
        if self._failing is not None:
            self.on_note(f"textfile: writing {self.path} works again (every figure counted meanwhile is in it)")
            self._failing = None
        return True

    def _failed(self, tmp: str, exc: OSError) -> None:
        self.errors += 1
        with contextlib.suppress(OSError):  # never created, or its directory is gone: nothing left behind
            os.unlink(tmp)
        reason = exc.strerror or str(exc)
        if reason != self._failing:
            self.on_note(f"textfile: cannot write {self.path} ({reason}): the figures are kept and written at the "
                         "next try")  # fmt: skip
            self._failing = reason


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def render(registry: CollectorRegistry) -> bytes:
    """The exposition as the endpoint serves it (Prometheus text format 0.0.4)."""
    return bytes(generate_latest(registry))


def registry_of(collectors: Iterable[Any]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return registry
