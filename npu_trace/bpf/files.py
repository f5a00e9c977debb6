"""Where the BPF programs are on disk. bcc compiles `src_file=` with `-I<dir>`: it needs a real directory.

The programs (`*.bpf.c`, `npu_trace.h`, `output.h`) live in the repository's `bpf/` folder and install as the
package `npu_trace.bpf_programs` (pyproject.toml's `package-dir`): a wheel carries them as package data, an
editable install maps the package onto `bpf/` itself, so developers' edits take effect at once.
`program_dir()` finds them through `importlib.resources`; a package that is not a plain folder (imported from
a zip) is copied into a temporary directory that lives as long as the context (`importlib.resources.as_file`
only takes directories from Python 3.12 on).
"""

from __future__ import annotations

import contextlib
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from npu_trace.errors import SourceError

if TYPE_CHECKING:
    from importlib.abc import Traversable

PACKAGE = "npu_trace.bpf_programs"
SUFFIXES = (".c", ".h")  # what bcc reads: the programs and the headers they include


def packaged() -> Traversable:
    """The installed programs' folder: a Path, or another Traversable (a zip's folder)."""
    try:
        return resources.files(PACKAGE)
    except ModuleNotFoundError as exc:
        raise SourceError(f"the BPF programs are not installed ({exc}); reinstall npu-trace") from None


@contextlib.contextmanager
def program_dir(folder: Optional[Traversable] = None) -> Iterator[Path]:
    """A real directory holding the programs of `folder` (default: the installed ones), valid until exit."""
    root = packaged() if folder is None else folder
    if isinstance(root, Path):
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="npu-trace-bpf-") as tmp:
        yield extract(root, Path(tmp))


def extract(folder: Traversable, dest: Path) -> Path:
    """Copy the programs and headers of `folder` into `dest`; returns `dest`."""
    for item in folder.iterdir():
        if item.is_file() and item.name.endswith(SUFFIXES):
            (dest / item.name).write_bytes(item.read_bytes())
    return dest
