"""Where the agent's metrics go: an HTTP endpoint for Prometheus, and files for node-exporter's textfile collector.

`MetricsServer` serves `/metrics` (Prometheus text format, or OpenMetrics when asked; gzip when accepted) from
its own threads: a scrape renders the latest snapshot and never waits on the tracing thread, nor the tracing
on it. It is read-only: GET and HEAD only (anything else: 405), `/metrics` and a small index at `/` (anything
else: 404). Each connection has a socket timeout (a client that sends nothing, or reads nothing, is dropped
after `CLIENT_TIMEOUT_S`) and at most `MAX_CLIENTS` are served at once (more are closed at once): a slow or
malformed client costs a thread for a few seconds, not the tracing. It binds where it is told; the agent's
default is 127.0.0.1.

`TextfileWriter` writes the same exposition atomically (a temporary file in the same directory, then a
rename: node-exporter never reads half a file), mode 0644. A write that fails is said once, with the reason,
and again when writing works again; the figures stay in memory (and on `/metrics`) and the next write has
them all. `stale_temporaries` finds the temporary files a killed agent left.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app

from npu_trace.errors import UsageError

CLIENT_TIMEOUT_S = 10.0
MAX_CLIENTS = 16
INDEX = b"<html><head><title>npu-trace agent</title></head><body><a href=\"/metrics\">metrics</a></body></html>\n"
Note = Callable[[str], None]


def parse_addr(text: str) -> Tuple[str, int]:
    """ "HOST:PORT", "[::1]:PORT" or ":PORT" (127.0.0.1) -> (host, port); a UsageError otherwise."""
    m = re.match(r"^(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]*)):(\d{1,5})$", text.strip())
    port = int(m.group(3)) if m else -1
    if not m or not 0 <= port < 65536:  # 0: a port the kernel chooses (said at start)
        raise UsageError(f"--metrics-addr {text!r}: expected HOST:PORT (e.g. 127.0.0.1:9834, [::1]:9834, :9834)")
    host = m.group(1) if m.group(1) is not None else (m.group(2) or "127.0.0.1")
    return host, port


class _Handler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_S  # StreamRequestHandler: the connection's socket timeout

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a scrape every few seconds would flood the journal)."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self.refused = 0
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or timed out: nothing to say (the base class prints a traceback)."""


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


def _app(registry: CollectorRegistry) -> Callable[..., Any]:
    metrics = make_wsgi_app(registry)

    def app(environ: Any, start_response: Any) -> Any:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"read-only: GET /metrics\n"]
        if path == "/metrics":
            environ["REQUEST_METHOD"] = "GET"  # HEAD: the same headers; the server sends no body
            return metrics(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [INDEX]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: GET /metrics\n"]

    return app


class MetricsServer:
    """The /metrics endpoint on its own threads. `start()` binds (a UsageError naming the address when it
    cannot), `close()` stops it and waits for its thread."""

    def __init__(self, addr: str, registry: CollectorRegistry) -> None:
        self.host, self.port = parse_addr(addr)
        self.registry = registry
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> None:
        cls = _IPv6Server if ":" in self.host else _Server
        try:
            server = make_server(self.host, self.port, _app(self.registry), server_class=cls, handler_class=_Handler)
        except OSError as exc:
            raise UsageError(f"--metrics-addr {self.address}: cannot listen there ({exc.strerror or exc})") from None
        self.port = server.server_port  # port 0: the one the kernel chose
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="npu-trace-metrics", daemon=True)
        self._thread.start()

    @property
    def refused(self) -> int:
        return self._server.refused if self._server is not None else 0

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


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
