"""A real S3-compatible server for the tests that ship dumps: s3rver (npm, installed by scripts/setup) in its own
process on 127.0.0.1, its objects on disk (a store stopped and started again still holds them), and the
environment boto3's standard credential chain reads pointed at it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any, Callable, Generator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S3RVER = os.path.join(ROOT, ".venv", "s3rver", "node_modules", ".bin", "s3rver")
BUCKET, PREFIX = "npu-dumps", "fleet/a"
WAIT_S = 20.0
REQUIRE_ENV = "NPU_TRACE_REQUIRE_PRIVILEGED"  # tests/conftest.py: set by .ci/run, a missing server then fails


def free_port() -> int:
    """A free port below the kernel's ephemeral range: no socket bound to port 0 meanwhile can be given it (the
    server is stopped and started again on it)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for port in range(max(1024, low - 8192), low - 4096):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port below the ephemeral range (from {low})")


class S3Server:
    """s3rver in its own process, its data in `directory`: stopped and started again on the same port."""

    def __init__(self, directory: str) -> None:
        self.directory, self.port = directory, free_port()
        self.proc: Any = None

    def start(self) -> None:
        argv = [S3RVER, "-d", self.directory, "-a", "127.0.0.1", "-p", str(self.port), "-s",
                "--configure-bucket", BUCKET]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        until(self._answers, f"s3rver answering on 127.0.0.1:{self.port}")

    def _answers(self) -> bool:
        assert self.proc.poll() is None, self.proc.stderr.read().decode(errors="replace")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def until(cond: Callable[[], bool], what: str, within: float = WAIT_S) -> float:
    """Wait for `cond` (bounded); the seconds it took, or a failure naming what did not happen."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < within, f"{what}: not within {within:g} s"
        time.sleep(0.02)
    return time.monotonic() - start


def serve(tmp_path: Any, monkeypatch: Any) -> Generator[S3Server, None, None]:
    """The `s3_server` fixture's body (tests/conftest.py): the server started, boto3's environment pointed at it."""
    if not os.path.exists(S3RVER):
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{S3RVER} is missing: scripts/setup installs it")
        pytest.skip(f"{S3RVER} is missing: run scripts/setup")
    srv = S3Server(str(tmp_path / "store"))
    env = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{srv.port}", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    srv.start()
    yield srv
    srv.stop()
