"""The wheel: built from this checkout, installed offline into a fresh virtual environment, run from outside
the checkout.

The build runs without isolation (`pip wheel --no-build-isolation --no-index`: isolation would fetch setuptools)
from a copy of the checkout (an in-tree build leaves `build/` behind, whose stale files a later wheel would
carry). The venv is made with `--system-site-packages` from the interpreter of the venv running these tests
(the distro's Python, whose bcc it sees); the wheel goes in with `--no-index --no-deps`, then a `.pth` file
adds this venv's site-packages for the dependencies (msgpack, zstandard, pyroute2, numpy, textual). Nothing is
downloaded. Every command runs with its cwd in a temporary directory, and each test checks what it imported
came from the new venv. Each wheel is built and installed once per test run, in pytest's temporary directory
of the run (shared by its workers).

The wheel is a platform wheel: it carries the compiled parts (npu_trace.ftrace._walk, npu_trace.sinks._lines,
npu_trace.export._wire, npu_trace.export._rows). A second one is built with CC=false, as on a host without a
compiler: it installs all the same and runs the pure-Python walker, lines, assembler and pieces' rows.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # a busy 2-vCPU machine: generous, never a measure
COMPILED_SOURCES = ("npu_trace/ftrace/_walk.c", "npu_trace/pipeline/_order.c", "npu_trace/sinks/_lines.c",
                    "npu_trace/export/_wire.c", "npu_trace/export/_rows.c")  # built into the wheel, not shipped
# *.so: the compiled parts the editable install built in place (the wheel builds its own)
NOT_BUILT = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    ".hypothesis", "*.so",
)  # fmt: skip

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    run_dir: Path  # the cwd of every command: outside the checkout
    where: Dict[str, str]  # what the venv's interpreter imported: npu_trace, tui, the BPF programs' folder

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    @property
    def site(self) -> Path:
        return Path(self.where["npu_trace"]).parent.parent

    @property
    def demo(self) -> Path:
        return self.site / "npu_trace" / "data" / "demo.npt"


def clean_env() -> Dict[str, str]:
    """No PYTHON*/PIP_* variables from the caller, no pip configuration (its indexes and find-links)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", NO_COLOR="1")
    return env


def run(cmd: Sequence[str], cwd: Path, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), cwd=cwd, env={**clean_env(), **env}, capture_output=True, text=True,
                          timeout=TIMEOUT_S)  # fmt: skip
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


def build_wheel(tmp: Path, **env: str) -> Path:
    src, out = tmp / "src", tmp / "dist"
    shutil.copytree(ROOT, src, ignore=NOT_BUILT)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(out), str(src)], cwd=tmp, **env)  # fmt: skip
    (wheel,) = out.glob("npu_trace-*.whl")
    return wheel


def dependency_paths() -> List[str]:
    """Where this venv's packages are (the dependencies npu-trace needs, installed by scripts/setup)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def make_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)  # the distro's python3 behind this venv
    run([base, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], cwd=tmp)
    python = str(venv / "bin" / "python")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--no-deps", "--no-compile",
         "-q", str(wheel)], cwd=tmp)  # fmt: skip
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip()
    (Path(site) / "npu_trace_test_deps.pth").write_text("".join(f"{p}\n" for p in dependency_paths()))
    return venv


WHERE = """
import json, npu_trace, tui
from npu_trace.bpf.files import program_dir
from npu_trace.ftrace import walk
with program_dir() as folder:
    print(json.dumps({"npu_trace": npu_trace.__file__, "tui": tui.__file__, "bpf": str(folder),
                      "walker": walk.IMPLEMENTATION, "walker_c": getattr(walk._walk, "__file__", "")}))
"""


def install(root: Path, variant: str, **env: str) -> Iterator[Installed]:
    """The wheel built and installed once per test run (xdist's workers share `root`: the first to get the lock
    builds, the others wait for it and use the same venv); each module runs its commands in a directory of its own."""
    base = root / f"wheel-{variant}"
    done = base / "installed.json"
    with open(root / f"wheel-{variant}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(base, ignore_errors=True)  # a build that failed half way
            base.mkdir()
            wheel = build_wheel(base, **env)
            venv = make_venv(base, wheel)
            done.write_text(json.dumps({"wheel": str(wheel), "venv": str(venv)}))
    paths = json.loads(done.read_text())
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    try:
        where = json.loads(run([str(Path(paths["venv"]) / "bin" / "python"), "-c", WHERE], cwd=run_dir).stdout)
        yield Installed(Path(paths["wheel"]), Path(paths["venv"]), run_dir, where)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def wheel_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The directory this run's workers share (pytest's base temporary directory of the run)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="module")
def installed(wheel_root: Path) -> Iterator[Installed]:
    yield from install(wheel_root, "compiled")


@pytest.fixture(scope="module")
def installed_without_compiler(wheel_root: Path) -> Iterator[Installed]:
    """CC=false: the extension's build fails, the install goes on (setup.py: optional=True)."""
    yield from install(wheel_root, "no-compiler", CC="false")


def package_data() -> Set[str]:
    """Every file of the package that is not Python code (the simulator's C sources and headers, the demo
    recording, type stubs...), as git tracks them, less the compiled parts' C sources (built, not shipped)."""
    listed = run(["git", "ls-files", "npu_trace", "tui"], cwd=ROOT).stdout.split()
    return {n for n in listed if not n.endswith(".py") and n not in COMPILED_SOURCES}


def checkout_packages() -> List[str]:
    found = [p.parent.relative_to(ROOT) for top in ("npu_trace", "tui") for p in (ROOT / top).rglob("__init__.py")]
    return sorted([".".join(p.parts) for p in found] + ["npu_trace.bpf_programs"])


def test_pyproject_lists_every_package() -> None:
    """packages.find cannot see npu_trace.bpf_programs (package-dir maps it to bpf/): the list is explicit."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(tool["packages"]) == checkout_packages()
    assert tool["package-dir"] == {"npu_trace.bpf_programs": "bpf"}


def test_the_wheel_holds_the_code_the_programs_the_simulator_and_the_demo(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        programs = {p.name: p.read_bytes() for p in (ROOT / "bpf").iterdir() if p.suffix in (".c", ".h")}
        assert not {f"npu_trace/bpf_programs/{n}" for n in programs} - names
        assert {n: whl.read(f"npu_trace/bpf_programs/{n}") for n in programs} == programs
    code = {p.relative_to(ROOT).as_posix() for top in ("npu_trace", "tui") for p in (ROOT / top).rglob("*.py")}
    assert code | package_data() <= names
    assert not {n for n in names if n.split("/")[0] in ("bpf", "tests", "benchmarks", "scripts")}
    parts = tuple(source[: -len("c")] for source in COMPILED_SOURCES)  # "npu_trace/ftrace/_walk." ...
    compiled = [n for n in names if n.startswith(parts) and n.endswith(".so")]
    assert len(compiled) == len(COMPILED_SOURCES)
    assert not installed.wheel.name.endswith("-none-any.whl")  # a platform wheel


def test_the_installed_package_is_imported_from_the_venv(installed: Installed) -> None:
    site = installed.site
    assert site.is_relative_to(installed.venv) and not site.is_relative_to(ROOT)
    assert Path(installed.where["tui"]).is_relative_to(site)
    assert Path(installed.where["bpf"]) == site / "npu_trace" / "bpf_programs"  # in place: a plain folder
    assert installed.where["walker"] == "c" and Path(installed.where["walker_c"]).is_relative_to(site)


def test_without_a_compiler_the_wheel_runs_the_pure_python_walker(installed_without_compiler: Installed) -> None:
    inst = installed_without_compiler
    with zipfile.ZipFile(inst.wheel) as whl:
        assert not [n for n in whl.namelist() if n.endswith(".so")]
    assert inst.where["walker"] == "python" and Path(inst.where["npu_trace"]).is_relative_to(inst.venv)
    proc = run([inst.bin("npu-trace"), "doctor", "--json"], cwd=inst.run_dir, check=False)
    for name in ("page walker", "text lines", "export assembler"):  # the compiled parts left out, twins named
        line = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == name)
        assert line["status"] == "--" and "pure Python" in line["detail"]


def test_installed_doctor(installed: Installed) -> None:
    """Exit 0, or 3 (a missing privilege or kernel feature, documented); its JSON says the same."""
    proc = run([installed.bin("npu-trace"), "doctor", "--json"], cwd=installed.run_dir, check=False)
    assert proc.returncode in (0, 3), proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == proc.returncode


def test_installed_replay_prints_the_demo_as_the_checkout_does(installed: Installed) -> None:
    cmd = ["replay", "--headless", "--max"]
    got = run([installed.bin("npu-trace"), *cmd, str(installed.demo)], cwd=installed.run_dir)
    want = run([sys.executable, "-m", "npu_trace", *cmd, str(ROOT / "npu_trace" / "data" / "demo.npt")], cwd=ROOT)
    assert got.stdout.count("\n") > 1000 and "ascend:ascend_halMemAlloc" in got.stdout
    assert got.stdout == want.stdout


def test_installed_check_writes_the_report_the_checkout_writes(installed: Installed) -> None:
    got = run([installed.bin("npu-trace"), "check", str(installed.demo), "--json", "got.json"],
              cwd=installed.run_dir, check=False)  # fmt: skip
    want = run([sys.executable, "-m", "npu_trace", "check", str(ROOT / "npu_trace" / "data" / "demo.npt"), "--json",
                str(installed.run_dir / "want.json")], cwd=ROOT, check=False)  # fmt: skip
    assert got.returncode in (0, 1) and got.returncode == want.returncode, got.stderr
    report = json.loads((installed.run_dir / "got.json").read_text())
    assert report["reading"]["events"] > 1000
    assert report == json.loads((installed.run_dir / "want.json").read_text())


COMPILE = "from npu_trace.bpf.source import compile_check\nprint(compile_check())"


@pytest.mark.privileged
def test_installed_bpf_compiles_and_attaches_from_its_package_data(installed: Installed) -> None:
    """compile_check (what doctor runs) and `npu-trace bpf` (the IRQ program: attach, read 1 s, detach)."""
    try:
        import bcc  # noqa: F401
    except ImportError:
        pytest.skip("bcc not importable")
    from npu_trace.bpf import kernel

    programs = installed.site / "npu_trace" / "bpf_programs"
    compiled = run([installed.bin("python"), "-c", COMPILE], cwd=installed.run_dir).stdout.strip()
    variant = kernel.detect(os.uname().release).name  # the variant this kernel loads
    assert compiled == f"compiled hal_uprobes.bpf.c ({variant}) from {programs}"
    proc = run([installed.bin("npu-trace"), "bpf", "--no-hal", "--irq", "virtio", "--duration", "1"],
               cwd=installed.run_dir)  # fmt: skip
    assert "BPF programs attached" in proc.stderr and "BPF events" in proc.stderr


def expectations_of(truth_path: Path) -> Dict[str, Any]:
    from npu_trace.sim.synth import truth_expectations

    return truth_expectations(json.loads(truth_path.read_text()))


@pytest.mark.privileged
def test_installed_commands_trace_the_simulator_end_to_end(installed: Installed) -> None:
    """From the installed wheel alone (its cwd outside the checkout): `sim load`, `bpf`, `demo --headless`,
    `record` while `sim run` runs a scenario, `check` (exactly what the scenario injected),
    `export` to Perfetto and Chrome JSON, and `sim unload` when it loaded the simulator."""
    from npu_trace import sim
    from npu_trace.ftrace.tracefs import Tracefs
    from proc_support import read_until
    from test_detectors_truth import check_against_truth

    npu = installed.bin("npu-trace")
    here = installed.run_dir
    was_loaded = sim.is_loaded(Tracefs.find())
    run([npu, "sim", "load"], cwd=here)
    try:
        # bpf beside the demo (each on its own: 2 s of the suite's serial path more); it measures the demo's calls
        bpf = subprocess.Popen([npu, "bpf", "--duration", "2"], cwd=here, env=clean_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            demo = run([npu, "demo", "--headless", "--rounds", "1", "--scenario", "spikes", "--duration", "2"],
                       cwd=here)  # fmt: skip
        finally:
            _, bpf_err = bpf.communicate(timeout=TIMEOUT_S)
        assert "ascend:ascend_halMemAlloc" in demo.stdout, demo.stderr[-2000:]
        assert bpf.returncode == 0 and "BPF programs attached" in bpf_err, bpf_err
        recording = here / "run.npt"
        # scoped to this process and what it starts (the scenario's `sim run`), no kernel log channel (the host's):
        # no other simulator or driver line on the host lands in the trace the truth is compared with
        argv = [npu, "record", "-o", str(recording), "-e", "ascend:*", "--channels", "none", "--pid", str(os.getpid())]
        rec = subprocess.Popen(argv, cwd=here, env=clean_env(), stderr=subprocess.PIPE, text=True)
        try:
            read_until(rec, "recording to")
            run([npu, "sim", "run", "--scenario", "ecc-reset", "--seed", "5", "--duration", "1", "--rate", "400",
                 "--devices", "2", "--truth", "truth.json", "--no-load"], cwd=here)  # fmt: skip
        finally:
            rec.send_signal(signal.SIGINT)
            _, err = rec.communicate(timeout=TIMEOUT_S)
        assert rec.returncode == 0 and "loss: none" in err, err
        checked = run([npu, "check", str(recording), "--json", "report.json", "--quiet"], cwd=here, check=False)
        assert checked.returncode in (0, 1), checked.stderr
        truth = json.loads((here / "truth.json").read_text())
        check_against_truth(json.loads((here / "report.json").read_text()), expectations_of(here / "truth.json"), truth)
        for out in ("run.pftrace", "run.json"):
            run([npu, "export", str(recording), "-o", out], cwd=here)
            assert (here / out).stat().st_size > 1000
        assert json.loads((here / "run.json").read_text())
    finally:
        if not was_loaded:
            run([npu, "sim", "unload"], cwd=here)
