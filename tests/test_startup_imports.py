"""What the commands that read a recording import at start-up, beyond what they need (each module a few tens of
ms of every run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.gen_recording import Spec, generate


def test_check_and_export_import_only_what_they_use(tmp_path: Path) -> None:
    """numpy 2's np.unique (and np.isin of a wide range, which calls it) imports numpy.ma at its first call,
    ~20 ms of a command: check and a Chrome JSON export of a recording whose memory and tasks need both (keys
    of a wide range: addresses; a block after the first) import nothing numpy itself did not; nor perfetto's
    protobuf classes (~30 ms), which only a Perfetto trace needs, nor the XML escaping of JUnit reports (it
    imports urllib and ssl, ~30 ms), nor the process pool of `check` of several recordings."""
    made = generate(str(tmp_path / "mixed.npt"), Spec(duration_s=2.0, rate=25_000.0))
    assert made.events > 1 << 16, made.events  # a block after the first: allocations live before it
    path = made.path
    script = ("import sys, numpy; before = 'numpy.ma' in sys.modules\n"
              "from npu_trace.cli import main\n"
              "for args in (['check', sys.argv[1], '-q', '--json', sys.argv[2]], "
              "['export', sys.argv[1], '-q', '-o', sys.argv[3]]):\n"
              "    try: code = main(args)\n"
              "    except SystemExit as stop: code = stop.code\n"
              "    assert code in (0, 1), (args[0], code)\n"  # 1: the check's findings
              "print(before, *(m in sys.modules for m in sys.argv[4:]))\n")  # fmt: skip
    unused = ["google.protobuf", "xml.sax.saxutils", "urllib.request", "concurrent.futures"]
    out = subprocess.run([sys.executable, "-c", script, path, str(tmp_path / "r.json"), str(tmp_path / "o.json"),
                          "numpy.ma", *unused],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    numpy_had, masked, *others = out[-2 - len(unused) :]
    assert masked == "False" or numpy_had == "True", "the analysis imported numpy.ma"
    assert [m for m, had in zip(unused, others) if had == "True"] == []
