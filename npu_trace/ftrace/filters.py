"""ftrace event filter expressions (the per-event `filter` file), built from values: pure text, no tracefs.

The kernel parses what is written to `events/<system>/<event>/filter` (Documentation/trace/events.rst, "Event
filtering"): `field == value` predicates joined by `&&` / `||`, with parentheses. Two names are not fields of
the record: `comm` and `COMM` are the name of the task the event fires in (`current->comm`, at most 15
characters). An event that has a field of its own named `comm` (sched:sched_wakeup: the woken task's) shadows
the lower-case name, so `comm_expr` is told which spelling to use. A write of more than a page, or of an
expression the kernel cannot parse, fails with EINVAL (nothing is filtered then).
"""

from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

from npu_trace.errors import UsageError

MAX_FILTER_BYTES = 4000  # the kernel refuses a filter write of a page (4096 bytes) or more
COMM_LEN = 15  # TASK_COMM_LEN - 1: the kernel keeps this many characters of a task's name
OWN_COMM = "comm"  # a field of this name in a format shadows the task's name


def check_comm(name: str) -> str:
    """A task name a filter can hold: 1-15 printable characters, no quote or backslash (UsageError)."""
    if not name or len(name) > COMM_LEN:
        raise UsageError(f"--comm {name!r}: a task name has 1 to {COMM_LEN} characters (the kernel keeps no more)")
    if any(c in name for c in '"\\') or not name.isprintable():
        raise UsageError(f"--comm {name!r}: quotes, backslashes and control characters cannot be matched")
    return name


def comm_expr(names: Sequence[str], own_comm_field: bool = False) -> str:
    """`comm == "a" || comm == "b"` (COMM when the event has a `comm` field of its own)."""
    key = "COMM" if own_comm_field else "comm"
    return any_of(f'{key} == "{check_comm(name)}"' for name in names)


def int_ranges(values: Iterable[int]) -> List[Tuple[int, int]]:
    """Sorted distinct values as inclusive runs: [3, 1, 2, 7] -> [(1, 3), (7, 7)]."""
    runs: List[Tuple[int, int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def int_in(field: str, values: Iterable[int]) -> str:
    """`field == 3 || (field >= 5 && field <= 9)`: runs of three or more values as one range."""
    parts = []
    for low, high in int_ranges(values):
        if high - low >= 2:
            parts.append(f"({field} >= {low} && {field} <= {high})")
        else:
            parts.extend(f"{field} == {v}" for v in range(low, high + 1))
    if not parts:
        raise ValueError(f"no values for {field}")
    return any_of(parts)


def any_of(parts: Iterable[str]) -> str:
    """One predicate, or several joined by ||."""
    items = list(parts)
    return items[0] if len(items) == 1 else " || ".join(items)


def all_of(parts: Sequence[str]) -> str:
    """Predicates joined by &&, each a disjunction in parentheses; "" for none."""
    if len(parts) == 1:
        return parts[0]
    return " && ".join(f"({p})" if "||" in p else p for p in parts)


def fits(expr: str) -> bool:
    """Whether the kernel takes a filter this long."""
    return len(expr.encode()) + 1 < MAX_FILTER_BYTES
