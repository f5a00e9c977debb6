"""Reading a started command's stderr in tests."""

from __future__ import annotations

import subprocess


def read_until(proc: subprocess.Popen[str], words: str) -> str:
    """The process's stderr up to and with the line saying `words`: notes may come first (a channel that cannot
    run here, a scope), and a line that is not it is never followed by a read() that would wait for a process
    that does not end. The process exiting before it fails the test with what it said."""
    assert proc.stderr is not None
    said = ""
    while words not in said:
        line = proc.stderr.readline()
        assert line, f"exited before saying {words!r}: {said}"
        said += line
    return said
