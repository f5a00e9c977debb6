"""Flight-recorder dumps in an S3-compatible object store: the layout `PREFIX/HOST/DUMP`, the client, uploading
one dump, listing and fetching a cluster's.

The client is boto3's with the standard credential chain (environment, shared files, instance roles) and the
standard endpoint settings (`AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, or `endpoint_url` in the profile): a
store of one's own (MinIO, Ceph RGW, ...) is named there, and is then addressed path-style. boto3 is imported
when a store is used (`pip install 'npu-trace[s3]'`); without it, one line and exit 3. botocore's own retries are
off: the caller retries (the agent's shipper, with backoff, its spool the buffer), so every failure is counted.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from typing import Any, List, NamedTuple, Optional, Sequence

from npu_trace.errors import InputError, KernelFeatureError

SCHEME = "s3://"
_DUMP_TIME = re.compile(r"^flight-(\d{8}T\d{6})\.(\d{3})Z-")
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 20.0


class Location(NamedTuple):
    bucket: str
    prefix: str  # without leading or trailing "/" ("" for the bucket's top)

    def key(self, host: str, dump: str) -> str:
        return "/".join(p for p in (self.prefix, host, dump) if p)

    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")


def parse_url(url: str) -> Location:
    """s3://BUCKET[/PREFIX] -> Location; an InputError for anything else."""
    if not url.startswith(SCHEME):
        raise InputError(f"{url!r} is not an s3://BUCKET/PREFIX location")
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    if not re.match(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$", bucket):
        raise InputError(f"{url}: {bucket!r} is not a bucket name (3-63 lowercase letters, digits, dots, hyphens)")
    return Location(bucket, prefix.strip("/"))


def client() -> Any:
    """A boto3 S3 client (see the module docstring)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise KernelFeatureError("s3:// needs boto3: pip install 'npu-trace[s3]'") from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=READ_TIMEOUT_S, s3={"addressing_style": "path" if endpoint else "auto"})  # fmt: skip
    return boto3.session.Session().client("s3", config=config)


def upload(s3: Any, where: Location, host: str, path: str) -> str:
    """Put one dump at PREFIX/HOST/DUMP (the same key every time: a retry after a lost answer overwrites it with
    the same bytes); its key. Raises what the client raises."""
    key = where.key(host, os.path.basename(path))
    with open(path, "rb") as f:
        s3.put_object(Bucket=where.bucket, Key=key, Body=f)
    return key


def dump_time_ns(name: str) -> Optional[int]:
    """A dump's trigger time from its name (flight-20250317T081502.117Z-...), ns since the epoch; None if not."""
    m = _DUMP_TIME.match(name)
    if not m:
        return None
    secs = time.mktime(time.strptime(m.group(1), "%Y%m%dT%H%M%S")) - time.timezone
    return int(secs) * 1_000_000_000 + int(m.group(2)) * 1_000_000


def list_dumps(s3: Any, where: Location, start: Optional[int] = None, stop: Optional[int] = None) -> List[str]:
    """The keys of the .npt dumps under the location (every host), those named within [start, stop] when given."""
    prefix = f"{where.prefix}/" if where.prefix else ""
    keys: List[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=where.bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".npt")]
    return sorted(k for k in keys if _within(os.path.basename(k), start, stop))


def _within(name: str, start: Optional[int], stop: Optional[int]) -> bool:
    if start is None and stop is None:
        return True
    t = dump_time_ns(name)
    return t is not None and (start is None or t >= start) and (stop is None or t <= stop)


class Fetched:
    """A temporary directory for what was fetched, removed at exit."""

    def __init__(self) -> None:
        self.dir: Optional[str] = None

    def __enter__(self) -> Fetched:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts: str) -> str:
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="npu-trace-cluster.")
        return os.path.join(self.dir, *parts)


def fetch_inputs(inputs: Sequence[str], fetched: Fetched, start: Optional[int], stop: Optional[int]) -> List[str]:
    """The inputs with every s3:// location replaced by a local directory of its dumps (HOST/DUMP below it)."""
    return [_fetch(arg, fetched, start, stop) if arg.startswith(SCHEME) else arg for arg in inputs]


def _fetch(url: str, fetched: Fetched, start: Optional[int], stop: Optional[int]) -> str:
    where = parse_url(url)
    s3 = client()
    try:
        keys = list_dumps(s3, where, start, stop)
        if not keys:
            raise InputError(f"{url}: no dumps (.npt) there" + (" in that window" if start or stop else ""))
        root = fetched.path(where.bucket, *where.prefix.split("/"))
        for key in keys:
            rel = key[len(where.prefix) :].lstrip("/") if where.prefix else key
            local = os.path.join(root, *rel.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            s3.download_file(where.bucket, key, local)
    except InputError:
        raise
    except Exception as exc:  # botocore's errors (no such bucket, refused, denied): one line
        raise InputError(f"{url}: {type(exc).__name__}: {exc}") from None
    return root
