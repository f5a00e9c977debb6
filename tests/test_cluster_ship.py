"""Dumps shipped to a real S3-compatible server (s3rver, installed by scripts/setup, started here in its own
process on 127.0.0.1 with its objects on disk): the store stopped while a host's dump is written and started
again, the dump arrives once, nothing is left unshipped or lost, retention removes only shipped dumps, and
`cluster s3://BUCKET/PREFIX` reads them back and finds the incident."""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, List

import pytest

from cluster_support import write_cluster
from npu_trace.cli import main
from npu_trace.cluster.ship import Shipper
from npu_trace.cluster.store import client, dump_time_ns, list_dumps, parse_url
from npu_trace.recording import RecordingReader
from npu_trace.sim.cluster_plan import plan_cluster
from npu_trace.sim.threads import SINGLE
from npu_trace.sinks.flight.dumps import dump_name, shipped_mark, to_remove
from npu_trace.sinks.metrics import AGENT_FIGURES
from s3_support import BUCKET, PREFIX, S3Server, until


def as_dump(src: str, spool: str, dev: int) -> str:
    """A host's recording put into its spool under a flight dump's name (its first event's wall time)."""
    anchor = RecordingReader(src).header["clock_anchor"]
    name = dump_name(anchor["mono_ns"] + 500_000_000, dev, "reset", anchor, os.listdir(spool))
    partial = os.path.join(spool, name + ".partial")
    shutil.copy(src, partial)
    os.replace(partial, os.path.join(spool, name))  # as the flight recorder finishes a dump
    return name


def test_a_dump_written_while_the_store_is_down_arrives_once_and_cluster_finds_the_incident(
    tmp_path: Any, s3_server: S3Server
) -> None:
    plan = plan_cluster(2, 2, "ecc-reset", 6, 4.0, 100, (1.0, 2.0), SINGLE)
    paths = write_cluster(str(tmp_path / "c"), plan, SINGLE)
    where = parse_url(f"s3://{BUCKET}/{PREFIX}")
    spools: Dict[str, str] = {}
    shippers: Dict[str, Shipper] = {}
    for h in plan.hosts:
        spools[h.name] = str(tmp_path / "spool" / h.name)
        os.makedirs(spools[h.name])
        shippers[h.name] = Shipper(spools[h.name], where, h.name, scan_s=0.05, backoff_s=0.05)
        shippers[h.name].start()
    first, second = (h.name for h in plan.hosts)
    try:
        a = as_dump(paths[first], spools[first], 0)
        until(lambda: shippers[first].shipped == 1, "the first host's dump shipped")
        s3_server.stop()  # the store goes down; the second host's incident is dumped meanwhile
        b = as_dump(paths[second], spools[second], 1)
        until(lambda: shippers[second].errors >= 2, "the second host's upload failing while the store is down")
        assert not shippers[second].removable(b) and shippers[second].pending() == [b]
        dumps = [(n, os.path.getsize(os.path.join(spools[second], n))) for n in os.listdir(spools[second])]
        assert to_remove(dumps, 0, 0, "", shippers[second].removable) == []  # retention keeps what is unshipped
        s3_server.start()
        took = until(lambda: shippers[second].shipped == 1, "the second host's dump shipped once the store is back")
    finally:
        for s in shippers.values():
            s.stop()
    s3 = client()
    keys = list_dumps(s3, where)
    assert keys == sorted([f"{PREFIX}/{first}/{a}", f"{PREFIX}/{second}/{b}"]), keys
    for host, dump in ((first, a), (second, b)):
        body = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{host}/{dump}")["Body"].read()
        with open(os.path.join(spools[host], dump), "rb") as f:
            assert body == f.read(), dump  # nothing lost: the same bytes
    assert all(s.pending() == [] for s in shippers.values()) and shippers[second].errors >= 2, took
    assert all(os.path.exists(os.path.join(spools[n], shipped_mark(d))) for n, d in ((first, a), (second, b)))

    report = str(tmp_path / "r.json")
    assert main(["cluster", f"s3://{BUCKET}/{PREFIX}", "--json", report, "-q", "--jobs", "1"]) == 1
    with open(report) as f:
        d = json.load(f)["findings"][0]["details"]
    origin = plan.hosts[plan.origin[0]]
    assert (d["origin"]["host"], d["origin"]["device"]) == (origin.name, plan.origin[1])
    times = sorted(t for t in (dump_time_ns(a), dump_time_ns(b)) if t is not None)
    after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(times[-1] // 1_000_000_000 + 5))
    assert main(["cluster", f"s3://{BUCKET}/{PREFIX}", "--from", after, "-q"]) == 2  # no dump in that window


def test_ship_options_and_metrics(tmp_path: Any, capsys: Any) -> None:
    assert main(["agent", "--ship", f"s3://{BUCKET}/{PREFIX}", "--metrics-addr", "off", "--textfile",
                 str(tmp_path / "m.prom")]) == 2  # fmt: skip
    assert "--ship needs --spool" in capsys.readouterr().err
    names: List[str] = [v[0] for v in AGENT_FIGURES.values()]
    assert "npu_trace_agent_shipped_total" in names and "npu_trace_agent_ship_errors_total" in names
    with pytest.raises(Exception, match="not a bucket name"):
        parse_url("s3://B/x")
