"""Where the BPF programs are found at run time (`npu_trace.bpf.files`): the editable install reads the
checkout's own `bpf/`; a package imported from a zip is copied into a temporary directory that lives exactly
as long as its user (a context, or a BpfSource from start() to close())."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from npu_trace.bpf import source as bpf_source
from npu_trace.bpf.config import BpfConfig
from npu_trace.bpf.files import packaged, program_dir
from npu_trace.bpf.source import BpfSource
from npu_trace.errors import SourceError

ROOT = Path(__file__).resolve().parents[1]
BPF = ROOT / "bpf"


def program_files(folder: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in (".c", ".h")}


def zip_programs(dest: Path) -> zipfile.Path:
    """The checkout's programs in a zip, as the folder `pkg/`."""
    with zipfile.ZipFile(dest, "w") as zf:
        for path in sorted(BPF.iterdir()):
            if path.is_file():
                zf.write(path, f"pkg/{path.name}")
    return zipfile.Path(zipfile.ZipFile(dest), "pkg/")


def test_editable_install_reads_the_checkouts_bpf_folder() -> None:
    root = packaged()
    assert isinstance(root, Path) and root.samefile(BPF)
    with program_dir() as folder:
        assert folder == root  # a plain folder is used in place, never copied
    assert {"hal_uprobes.bpf.c", "irq.bpf.c", "npu_trace.h", "output.h"} <= set(program_files(folder))


def test_a_zipped_folder_is_copied_and_removed_on_exit(tmp_path: Path) -> None:
    with program_dir(zip_programs(tmp_path / "programs.zip")) as folder:
        assert folder.is_dir() and not folder.is_relative_to(tmp_path)
        assert program_files(folder) == program_files(BPF)
        assert not (folder / "__init__.py").exists()  # only what bcc reads
    assert not folder.exists()


ZIP_PROBE = """
import json, os
from npu_trace.bpf.files import packaged, program_dir
with program_dir() as folder:
    print(json.dumps({"root": type(packaged()).__name__, "dir": str(folder), "files": sorted(os.listdir(folder))}))
print(os.path.exists(folder))
"""


def test_a_zip_imported_package_yields_a_real_directory(tmp_path: Path) -> None:
    """npu_trace imported from a zip (importlib.resources gives a zip's Traversable, not a Path)."""
    archive = tmp_path / "npu_trace.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((ROOT / "npu_trace").rglob("*.py")):
            zf.write(path, path.relative_to(ROOT).as_posix())
        for path in sorted(p for p in BPF.iterdir() if p.is_file()):
            zf.write(path, f"npu_trace/bpf_programs/{path.name}")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(archive)!r})\n{ZIP_PROBE}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    first, exists = proc.stdout.splitlines()
    seen = json.loads(first)
    assert seen["root"] != "PosixPath" and not seen["dir"].startswith(str(archive))
    assert seen["files"] == sorted(program_files(BPF)) and exists == "False"


class FakeTable:
    def open_ring_buffer(self, _callback: Any) -> None:
        return None


class FakeBPF:
    """Records, at compile time, what bcc would read: the source and the headers of its -I folder."""

    seen: List[Dict[str, Any]] = []

    def __init__(self, src_file: bytes, cflags: List[str]) -> None:
        include = Path(next(f for f in cflags if f.startswith("-I"))[2:])
        FakeBPF.seen.append({"src": Path(src_file.decode()), "headers": sorted(p.name for p in include.glob("*.h"))})

    def __getitem__(self, _name: bytes) -> FakeTable:
        return FakeTable()

    def cleanup(self) -> None:
        return None


class FakeBcc:
    BPF = FakeBPF


def test_a_copied_folder_lives_from_start_to_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpf_source, "check_headers", lambda: None)
    monkeypatch.setattr(bpf_source, "_bcc", lambda: FakeBcc)
    FakeBPF.seen = []
    src = BpfSource(BpfConfig(ringbuf_direct=False), bpf_dir=zip_programs(tmp_path / "p.zip"))
    src.start_bench()
    seen = FakeBPF.seen[0]
    assert seen["src"].name == "bench_getpid.bpf.c"
    assert seen["headers"] == ["compat.h", "npu_trace.h", "output.h", "scope.h"]
    assert src.bpf_dir is not None and src.bpf_dir.is_dir() and seen["src"].is_file()
    src.close()
    assert not seen["src"].parent.exists() and src.bpf_dir is None


def test_a_folder_without_the_header_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpf_source, "check_headers", lambda: None)
    monkeypatch.setattr(bpf_source, "_bcc", lambda: FakeBcc)
    src = BpfSource(BpfConfig(hal=False, irq=True), bpf_dir=tmp_path)
    with pytest.raises(SourceError, match=f"BPF sources not found in {tmp_path}$"):
        src.start()
    assert src.bpf_dir is None
