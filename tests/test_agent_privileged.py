"""`npu-trace agent` for real: a real Prometheus server (Debian's, on 127.0.0.1) scrapes it while the simulator
runs the ecc-reset scenario, and its HTTP API tells what was counted (the dump it ships to a real S3 server read
back by `npu-trace cluster`); SIGTERM, SIGKILL and the next start,
SIGHUP and an unwritable textfile each say one clear line and lose nothing counted.

Every wait is on a condition (a line in the log, a value in Prometheus), bounded only to fail instead of
hanging."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from npu_trace import sim
from npu_trace.cluster.store import client, list_dumps, parse_url
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.recording.host import read_identity
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sinks.flight.dumps import is_dump
from s3_support import BUCKET, PREFIX

CLI = [sys.executable, "-m", "npu_trace"]
WAIT_S = 90.0  # a failing wait gives up after this (never reached when things work)
# The agents whose counts are compared with a scenario's truth trace this process and the tasks it starts (the
# executor) only: another simulator on the host (another session's, a developer's demo) adds its own tasks and
# resets to an unscoped agent's (seen: "waited 90 s for 76 tasks" while other suites ran the simulator).
OWN = ("--pid", str(os.getpid()))
SHIP = f"s3://{BUCKET}/{PREFIX}"


STARTED: List[Agent] = []


@pytest.fixture(autouse=True)
def no_agent_outlives_its_test() -> Iterator[None]:
    """A test that fails half-way still stops the agents it started (SIGKILL: their instance goes with the
    next session's start, or `npu-trace cleanup`; SIGTERM first so it is removed now)."""
    yield
    while STARTED:
        agent = STARTED.pop()
        if agent.proc.poll() is None:
            agent.proc.terminate()
            try:
                agent.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait()
        agent.err.close()


class Agent:
    """`npu-trace agent` started (its start line read: the port it listens on); `log_file`: where it logs
    (its --log-file), else its stderr. Killed when its start fails: no agent outlives its test."""

    def __init__(self, tmp: Any, *args: str, name: str = "agent", log_file: Optional[str] = None,
                 port: int = 0) -> None:  # fmt: skip
        self.err_path = str(tmp / f"{name}.stderr")
        self.log = log_file or self.err_path
        self.err = open(self.err_path, "w")  # noqa: SIM115 (the process's stderr, closed in stop)
        self.proc = subprocess.Popen([*CLI, "agent", "--metrics-addr", f"127.0.0.1:{port}", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.err, text=True)  # fmt: skip
        STARTED.append(self)
        try:
            line = wait_for(lambda: self.line("tracing "), f"{name} to start")
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        self.port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line).group(1))  # type: ignore[union-attr]

    def text(self) -> str:
        if not os.path.exists(self.log):
            return ""
        with open(self.log) as f:
            return f.read()

    def line(self, words: str) -> Optional[str]:
        if self.proc.poll() is not None:
            with open(self.err_path) as f:
                raise AssertionError(f"the agent exited ({self.proc.returncode}): {self.text()}{f.read()}")
        return next((ln for ln in self.text().splitlines() if words in ln), None)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as resp:
            return str(resp.read().decode())

    def value(self, name: str, **labels: str) -> Optional[float]:
        return sample(self.metrics(), name, **labels)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=WAIT_S)
        self.err.close()
        return rc


def sample(text: str, name: str, **labels: str) -> Optional[float]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def wait_for(what: Callable[[], Any], why: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S:g} s for {why}")
        time.sleep(0.1)


def fixed_port(avoid: int = 0) -> int:
    """A free port below the kernel's ephemeral range: no socket bound to port 0 (another test's, another
    program's) can be given it between now and when its server binds it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for port in range(max(1024, low - 4096), low):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port != avoid:
            return port
    raise AssertionError(f"no free port below the ephemeral range (from {low})")


class Prometheus:
    """Debian's prometheus server on 127.0.0.1, scraping the agent every second, its data in a temp dir."""

    def __init__(self, tmp: Any, target: int) -> None:
        exe = shutil.which("prometheus")
        if exe is None:
            pytest.skip("prometheus is missing: scripts/setup installs Debian's prometheus package")
        config = tmp / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                          f"  - job_name: npu-trace\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n")
        self.port = fixed_port(avoid=target)
        self.log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip

    def query(self, expr: str) -> List[Dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                data = json.load(resp)
        except OSError:
            return []  # not listening yet
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def scalar(self, expr: str) -> Optional[float]:
        got = self.query(expr)
        return float(got[0]["value"][1]) if len(got) == 1 else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=WAIT_S)
        self.log.close()


@pytest.fixture
def side() -> Iterator[SideChannels]:
    channels = SideChannels()
    yield channels


PROMETHEUS_TEST = "test_prometheus_sees_the_reset_the_tasks_and_the_states"


@pytest.fixture(scope="module", autouse=True)
def early_prometheus(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Optional[Tuple[Any, int]]]:
    """Prometheus started with this module when its test is to run, scraping the agent's port to be (chosen
    now, outside the ephemeral range): a server's first scrape waits for its service discovery's first
    update, about 5 s after its start, which the module's other tests then cover. None without prometheus
    (the test says so) or when that test is not selected."""
    wanted = any(item.name == PROMETHEUS_TEST for item in request.session.items)
    if not wanted or os.geteuid() != 0 or shutil.which("prometheus") is None:
        yield None
        return
    port = fixed_port()
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), port)
    try:
        yield prom, port
    finally:
        prom.stop()


def instances(fs: Tracefs) -> List[str]:
    return [n for n in fs.instance_names() if n.startswith("npu-trace-")]


@pytest.mark.privileged
def test_sigkill_then_the_next_start_cleans_up(sim_loaded: Tracefs, tmp_path: Any) -> None:
    textfile = tmp_path / "npu_trace.prom"
    agent = Agent(tmp_path, "--channels", "none", "--textfile", str(textfile), "--textfile-interval", "1")
    wait_for(textfile.exists, "the first textfile write")
    killed = agent.proc.pid
    assert agent.stop(signal.SIGKILL) == -signal.SIGKILL
    assert f"npu-trace-{killed}" in instances(sim_loaded)  # nothing ran: the instance is left behind
    whole = textfile.read_text()
    assert sample(whole, "npu_trace_agent_info", profile="sim") == 1  # an earlier write, whole (atomic rename)
    stale = tmp_path / f"npu_trace.prom.{killed}.tmp"
    stale.write_text("half a write")
    again = Agent(tmp_path, "--channels", "none", "--textfile", str(textfile), name="again")
    assert f"npu-trace-{killed}" not in instances(sim_loaded)  # removed by the next start
    assert not stale.exists() and f"removed {stale}, left by a killed agent" in again.text()
    assert again.stop() == 0
    assert f"npu-trace-{again.proc.pid}" not in instances(sim_loaded)


@pytest.mark.privileged
def test_sighup_reopens_the_log_and_rereads_the_rules(sim_loaded: Tracefs, tmp_path: Any) -> None:
    rules, log = tmp_path / "rules.toml", tmp_path / "agent-file.log"
    rules.write_text("[timeouts]\nmax = 100\n")
    agent = Agent(tmp_path, "--channels", "none", "--rules", str(rules), "--log-file", str(log), log_file=str(log))
    assert agent.value("npu_trace_rule_violated", rule="timeouts.max_by_op.heartbeat") is None
    os.rename(log, tmp_path / "agent-file.log.1")  # logrotate
    rules.write_text("[timeouts]\nmax = 100\nmax_by_op = { heartbeat = 0 }\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: log.exists() and "SIGHUP: log reopened, rules read again" in log.read_text(), "the reload")
    assert agent.value("npu_trace_rule_violated", rule="timeouts.max_by_op.heartbeat") == 0
    assert agent.value("npu_trace_agent_rules_reloads_total") == 1
    rules.write_text("[timeouts]\nmax = 'many'\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "the previous rules stay" in log.read_text(), "the refused reload")
    assert agent.value("npu_trace_agent_rules_reload_errors_total") == 1
    assert agent.value("npu_trace_rule_violated", rule="timeouts.max_by_op.heartbeat") == 0  # still in force
    assert agent.stop() == 0
    assert "agent stopped:" in log.read_text()


@pytest.mark.privileged
def test_an_unwritable_textfile_is_said_once_and_loses_no_metric(sim_loaded: Tracefs, tmp_path: Any) -> None:
    textfile = tmp_path / "npu_trace.prom"
    textfile.mkdir()  # a directory where the file should be: every write fails (root ignores permissions)
    agent = Agent(tmp_path, "--channels", "none", "--textfile", str(textfile), "--textfile-interval", "0.2")
    wait_for(lambda: agent.line("textfile: cannot write"), "the failure to be said")
    sim.run_scenario("steady", 2, 1.0, 300, 1, ensure_loaded=False)
    counted = wait_for(lambda: agent.value("npu_trace_events_total", kind="call"), "events counted")
    textfile.rmdir()
    wait_for(lambda: agent.line("works again"), "the textfile to be written again")
    assert agent.text().count("textfile: cannot write") == 1
    assert agent.stop() == 0
    final = textfile.read_text()
    assert (sample(final, "npu_trace_events_total", kind="call") or 0) >= counted
    assert (sample(final, "npu_trace_agent_textfile_errors_total") or 0) >= 1


def fill(path: Any) -> int:
    """Write `path` until its file system says ENOSPC (tmpfs: every page taken, not one byte more fits).
    Its size."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(b"\0" * 4096) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written


@pytest.mark.privileged
def test_a_full_spool_disk_is_said_and_loses_no_metric(sim_loaded: Tracefs, tmp_path: Any) -> None:
    """The spool on a small tmpfs that the test fills itself once the agent is up (not a size that a dump
    might or might not exceed): the reset's dump cannot be written; that is said, counted, and the reset is
    counted all the same, and nothing of the agent's is left in the spool (no unfinished .partial)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(spool)], check=True)
    agent: Optional[Agent] = None
    try:
        agent = Agent(tmp_path, "--channels", "kmsg,uevent", "--spool", str(spool), "--flight", "30", *OWN)
        filler = fill(spool / "filler")
        sim.run_scenario("ecc-reset", 4, 3.0, 200, 1, ensure_loaded=False, channels=SideChannels(npu_smi=False))
        wait_for(lambda: agent.line("failed (disk full)"), "the failed dump to be said")
        reset = 'npu_trace_findings_total{id="0",kind="reset_sequence"} 1.0'
        wait_for(lambda: reset in agent.metrics(), "the reset counted")  # its dump failed at its first step
        assert (agent.value("npu_trace_agent_spool_errors_total") or 0) >= 1
        assert agent.stop() == 0
        # no dump passed for whole, no unfinished .partial left holding it full; the filler untouched
        assert os.listdir(spool) == ["filler"] and os.path.getsize(spool / "filler") == filler
    finally:
        if agent is not None and agent.proc.poll() is None:
            agent.stop()
        subprocess.run(["umount", str(spool)], check=False)


@pytest.mark.privileged
def test_prometheus_sees_the_reset_the_tasks_and_the_states(sim_loaded: Tracefs, tmp_path: Any, side: SideChannels,
                                                            promtool: str, early_prometheus: Any,
                                                            s3_server: Any) -> None:  # fmt: skip
    """Last in this module: the Prometheus it reads was started with the module (`early_prometheus`). The agent
    ships its dump to a real S3 server (`--ship`), from where `npu-trace cluster` finds the incident."""
    if early_prometheus is None:
        pytest.skip("prometheus is missing: scripts/setup installs Debian's prometheus package")
    prom, port = early_prometheus
    smi = os.path.join(side.smi_dir or "", "npu-smi")
    textfile = tmp_path / "npu_trace.prom"
    spool = tmp_path / "spool"
    agent = Agent(tmp_path, "--npu-smi", smi, "--health-interval", "1", "--textfile", str(textfile),
                  "--textfile-interval", "1", "--spool", str(spool), "--flight", "30", "--ship", SHIP, *OWN,
                  port=port)  # fmt: skip
    try:
        wait_for(lambda: prom.scalar('up{job="npu-trace"}') == 1, "Prometheus to scrape the agent")
        truth = sim.run_scenario("ecc-reset", 4, 4.0, 200, 1, str(tmp_path / "truth.json"), ensure_loaded=False,
                                 channels=side)  # fmt: skip
        submits = sum(1 for a in truth["actions"] if a["func"] == "halSqTaskSend" and a["ret"] == 0)
        assert submits > 30
        task_count = 'npu_trace_op_latency_seconds_count{job="npu-trace",op="task",id="0"}'
        wait_for(lambda: prom.scalar(task_count) == submits, f"{submits} tasks in Prometheus")
        resets = 'npu_trace_findings_total{job="npu-trace",kind="reset_sequence",id="0"}'
        wait_for(lambda: prom.scalar(resets) == 1, "the reset sequence in Prometheus")
        wait_for(lambda: prom.scalar('npu_trace_device_state{job="npu-trace",id="0",state="ok"}') == 1, "ok again")
        assert prom.scalar(f"max_over_time({resets}[10m])") == 1  # counted once, never more
        assert prom.scalar(f"max_over_time({task_count}[10m])") == submits
        entered = prom.scalar('npu_trace_device_state_entered_total{job="npu-trace",id="0",state="resetting"}')
        assert entered is not None and entered >= 1
        assert prom.scalar('npu_trace_device_state_entered_total{job="npu-trace",id="0",state="degraded"}') == 1
        assert prom.scalar('npu_trace_timeouts_total{job="npu-trace",id="0",op="heartbeat"}') == 1
        assert prom.scalar('sum(npu_trace_lost_events_total{job="npu-trace"})') == 0
        wait_for(lambda: prom.scalar('npu_trace_agent_spool_dumps_total{job="npu-trace"}') == 1, "the dump")
        wait_for(lambda: prom.scalar('npu_trace_agent_shipped_total{job="npu-trace"}') == 1, "the dump shipped")
        assert prom.scalar('npu_trace_agent_ship_errors_total{job="npu-trace"}') == 0
        dumps = sorted(n for n in os.listdir(spool) if is_dump(n))
        assert len(dumps) == 1 and dumps[0].endswith("-dev0-reset.npt"), dumps
        host = read_identity()["hostname"]
        assert list_dumps(client(), parse_url(SHIP)) == [f"{PREFIX}/{host}/{dumps[0]}"]
        found = subprocess.run([*CLI, "cluster", SHIP, "--json", str(tmp_path / "cluster.json"), "-q"],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert found.returncode == 1, found.stderr  # the incident, read back from the store
        with open(tmp_path / "cluster.json") as f:
            origin = json.load(f)["findings"][0]["details"]["origin"]
        assert (origin["host"], origin["device"]) == (host, 0), origin
        checked = subprocess.run([*CLI, "check", str(spool / dumps[0]), "--json", str(tmp_path / "dump.json"), "-q"],
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        with open(tmp_path / "dump.json") as f:
            assert [x["kind"] for x in json.load(f)["findings"]].count("reset_sequence") == 1, checked.stderr
        temps = prom.query('npu_trace_device_temperature_celsius{job="npu-trace",id="0"}')
        assert temps, "the fake npu-smi's readings as gauges"
        exposition = agent.metrics()
        done = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True)
        assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout + done.stderr
    finally:
        rc = agent.stop()
    assert rc == 0, agent.text()
    log = agent.text()
    assert "Traceback" not in log and "agent stopped:" in log
    assert f"npu-trace-{agent.proc.pid}" not in instances(sim_loaded)  # SIGTERM: the instance removed
    final = textfile.read_text()  # written a last time at exit: everything counted is in it
    assert sample(final, "npu_trace_findings_total", kind="reset_sequence", id="0") == 1
    assert sample(final, "npu_trace_op_latency_seconds_count", op="task", id="0") == submits
