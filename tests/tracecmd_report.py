"""Reading `trace-cmd report` output (trace-cmd 3.x's default form) in tests: one event per line,
`comm-pid [cpu] seconds.micros: name: body`, a kernel stack's frames on the lines after it (`=> name (addr)`)."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

_LINE = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<secs>\d+)\.(?P<micros>\d{6}): "
                   r"(?P<name>[\w-]+):\s+(?P<body>.*)$")  # fmt: skip
_PAIR = re.compile(r"(?:^|(?<= ))(\w+)=(.*?)(?= \S+=|$)")
_FRAME = re.compile(r"^=> (?:(?P<name>\S+) \((?P<addr>[0-9a-f]+)\)|(?P<bare>[0-9a-f]+))$")


def parse(lines: Iterable[str]) -> List[Dict[str, Any]]:
    """Every event of a report: comm, pid, cpu, us (the time in whole microseconds, as printed), name, body,
    frames ([(name or None, address)] for a stack)."""
    out: List[Dict[str, Any]] = []
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("cpus=") or not line.strip():
            continue
        if line.startswith("=>"):
            out[-1]["frames"].append(frame(line))
            continue
        m = _LINE.match(line)
        assert m is not None, f"not a trace-cmd report line: {line!r}"
        out.append({"comm": m["comm"].strip(), "pid": int(m["pid"]), "cpu": int(m["cpu"]),
                    "us": int(m["secs"]) * 1_000_000 + int(m["micros"]), "name": m["name"], "body": m["body"],
                    "frames": []})  # fmt: skip
    return out


def frame(line: str) -> Tuple[Optional[str], int]:
    m = _FRAME.match(line)
    assert m is not None, f"not a stack frame: {line!r}"
    return (m["name"], int(m["addr"], 16)) if m["name"] else (None, int(m["bare"], 16))


def fields_agree(body: str, fields: Dict[str, Any]) -> Tuple[int, List[str]]:
    """The `key=value` pairs of a body whose key is one of `fields`: (how many were compared, those whose value
    differs: a decimal or 0x number against an integer field, the text against any other; a name printed for
    an integer field is not compared)."""
    compared, wrong = 0, []
    for m in _PAIR.finditer(body):  # a value runs to the next " key=" (a task name may hold spaces)
        key, value = m.group(1), m.group(2)
        if key not in fields:
            continue
        mine = fields[key]
        if isinstance(mine, int) and not isinstance(mine, bool):
            try:
                same = int(value, 16 if value.lower().startswith("0x") else 10) == mine
            except ValueError:
                continue  # a name the print fmt gives the number (__print_symbolic: ret=handled)
        else:
            same = str(mine) == value
        compared += 1
        if not same:
            wrong.append(f"{key}: {value} (trace-cmd) != {mine!r}")
    return compared, wrong
