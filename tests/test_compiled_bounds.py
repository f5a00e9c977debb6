"""The compiled helpers' argument checks hold for any integers: a check that adds or multiplies two arguments
could wrap around and pass, and the call then read or wrote far outside its buffers (a crash: SIGSEGV, SIGFPE).
Only the project's own callers pass these values, and they keep them small: this holds the checks themselves
(found by a reading of the C files; each call is one that crashed before). Each runs in a process of its own,
so that a regression is a failed test, not a crashed run."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "wire: ncols * rows wraps to the size of no column": """
from npu_trace.export import _wire
prog, starts, which = np.array([2, 0], np.int32), np.array([0, 2], np.int32), np.zeros(4, np.int32)
_wire.assemble(prog, starts, which, np.zeros(0, np.int64), 1 << 62, (), (), bytearray())
""",
    "rows: width * 8 wraps to 0 (a division by zero)": """
from npu_trace.export import _rows
_rows.fill(np.zeros(4, np.int64), 1 << 61, np.zeros(0, np.int64), ())
""",
    "lines: (at + 2) * 8 wraps past the offsets' start": """
from npu_trace.sinks import _lines
_lines.interleave((b"a\\n",), (np.array([0, 2], np.int64).tobytes(),), np.zeros(1, np.int32),
                  np.array([(1 << 61) - 2], np.int64))
""",
    "texts: start + length wraps negative": """
from npu_trace.export import _texts
_texts.distinct((b"abc",), np.zeros(1, np.int64), np.array([1 << 62], np.int64), np.array([1 << 62], np.int64),
                np.empty(1, np.int64))
""",
    "handlers: a held count wraps the stack's size": """
from npu_trace.export import _handlers
z = lambda: np.zeros(1, np.int64)
_handlers.pairs(np.zeros(1, np.int64), np.ones(1, np.uint8), np.zeros(1, np.uint8), np.array([1 << 61], np.int64),
                z(), z(), z(), z())
""",
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_argument_check_cannot_wrap(case: str) -> None:
    code = f"import numpy as np\ntry:\n{_indented(CASES[case])}\nexcept ValueError:\n    raise SystemExit(0)\n"
    code += "raise SystemExit('taken: no ValueError')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())
