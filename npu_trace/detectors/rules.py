"""`check` rules: a small TOML schema, its CI-gate defaults, and their evaluation against findings.

    [loss]
    allowed = false          # any lost event fails the check
    [truncated]
    allowed = false          # a recording cut by a crash (no trailer) fails the check too
    [timeouts]
    max = 0                  # timeout findings allowed (also: alloc_fail, reset_sequences, spikes, leaks)
    [spikes]
    max = -1                 # -1: reported, never a violation
    [timeouts.max_by_op]
    heartbeat = 0            # per operation (any count table): "no heartbeat lost"
    [kernel_faults]
    max = 0                  # default: a kernel fault (BUG, Oops, lockup, hung task, RCU stall, register dump) fails
    [device_faults]
    max = 0                  # default: the driver saying a device is abnormal or unreachable fails
    [app_errors]
    max = -1                 # default: application errors are reported (with the driver finding that explains them)
    [link_degraded]
    max = 0                  # a PCIe link trained below its maximum speed or width (default: reported only)
    [accounting_mismatch]
    max = 0                  # npu-smi's process table over the chip's used memory, or off the traced bytes
    [ecc]
    max_ce_delta = 100       # ECC counts may grow this much on any device over the session (default: no limit)
    max_uce_delta = 0
    [latency.p99_max_ns]
    halMemAlloc = 2_000_000  # per operation, over every device

Pure: parsing takes text, evaluation takes the findings and summary of an analysis.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npu_trace.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 hosts (openEuler 22.03)
    import tomli as tomllib

# rule table -> the finding kind it counts
COUNT_RULES = {
    "timeouts": "timeout",
    "alloc_fail": "alloc_fail",
    "reset_sequences": "reset_sequence",
    "spikes": "spike",
    "leaks": "leak",
    "link_degraded": "link_degraded",
    "health": "health",
    "accounting_mismatch": "accounting_mismatch",
    "kernel_faults": "kernel_fault",
    "device_faults": "device_fault",
    "app_errors": "app_error",
}
DEFAULT_MAX = {"timeouts": 0, "alloc_fail": 0, "reset_sequences": 0, "spikes": -1, "leaks": -1, "link_degraded": -1,
               "health": -1, "accounting_mismatch": -1, "kernel_faults": 0, "device_faults": 0,
               "app_errors": -1}  # fmt: skip
ECC_LIMITS = ("max_ce_delta", "max_uce_delta")
UNLIMITED = -1


class RulesError(InputError):
    """A rules file that cannot be used: says which file, which line, and what was expected."""


@dataclass(frozen=True)
class Rules:
    max_counts: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_MAX))
    loss_allowed: bool = False
    p99_max_ns: Mapping[str, int] = field(default_factory=dict)
    source: str = "defaults"
    max_by_op: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # table -> op -> limit
    ecc: Mapping[str, int] = field(default_factory=dict)  # max_ce_delta / max_uce_delta, per device
    truncated_allowed: bool = False

    def as_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "loss_allowed": self.loss_allowed,
            "truncated_allowed": self.truncated_allowed,
            "max_counts": dict(sorted(self.max_counts.items())),
            "max_by_op": {t: dict(sorted(ops.items())) for t, ops in sorted(self.max_by_op.items())},
            "ecc": dict(sorted(self.ecc.items())),
            "p99_max_ns": dict(sorted(self.p99_max_ns.items())),
        }


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    count: int = 0

    def as_dict(self) -> Dict[str, Any]:
        return {"rule": self.rule, "message": self.message, "count": self.count}


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"^\s*\[?\s*\"?{re.escape(key)}\"?\s*[=\].]", line):
            return number
    return 0


def _fail(name: str, text: str, key: str, expected: str) -> RulesError:
    line = next((n for part in reversed(key.split(".")) for n in [_line_of(text, part)] if n), 0)
    where = f"{name}:{line}" if line else name
    return RulesError(f"{where}: {key}: expected {expected}")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_rules(text: str, name: str = "rules.toml") -> Rules:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{name}: not valid TOML: {exc}") from None
    known = {*COUNT_RULES, "loss", "truncated", "latency", "ecc"}
    for key in data:
        if key not in known:
            raise _fail(name, text, key, f"one of the tables {', '.join(sorted(known))}")
    max_counts = dict(DEFAULT_MAX)
    by_op: Dict[str, Dict[str, int]] = {}
    for table in COUNT_RULES:
        max_counts[table], ops = _parse_max(data.get(table, {}), table, name, text, DEFAULT_MAX[table])
        if ops:
            by_op[table] = ops
    loss_allowed = _parse_allowed(data.get("loss", {}), "loss", name, text)
    truncated_allowed = _parse_allowed(data.get("truncated", {}), "truncated", name, text)
    p99 = _parse_latency(data.get("latency", {}), name, text)
    ecc = _parse_ecc(data.get("ecc", {}), name, text)
    return Rules(max_counts, loss_allowed, p99, name, by_op, ecc, truncated_allowed)


def _parse_max(table: Any, key: str, name: str, text: str, default: int) -> Tuple[int, Dict[str, int]]:
    if not isinstance(table, dict):
        raise _fail(name, text, key, "a table")
    for sub in table:
        if sub not in ("max", "max_by_op"):
            raise _fail(name, text, f"{key}.{sub}", "only `max` and `max_by_op` in this table")
    value = table.get("max", default)
    if not _int(value) or value < UNLIMITED:
        raise _fail(name, text, f"{key}.max", "an integer >= 0, or -1 for no limit")
    ops = table.get("max_by_op", {})
    if not isinstance(ops, dict):
        raise _fail(name, text, f"{key}.max_by_op", "a table of operation = count")
    for op, limit in ops.items():
        if not _int(limit) or limit < 0:
            raise _fail(name, text, f"{key}.max_by_op.{op}", "an integer >= 0")
    return int(value), {str(op): int(limit) for op, limit in ops.items()}


def _parse_ecc(table: Any, name: str, text: str) -> Dict[str, int]:
    if not isinstance(table, dict):
        raise _fail(name, text, "ecc", "a table")
    out: Dict[str, int] = {}
    for key, value in table.items():
        if key not in ECC_LIMITS:
            raise _fail(name, text, f"ecc.{key}", f"one of {', '.join(ECC_LIMITS)}")
        if not _int(value) or value < 0:
            raise _fail(name, text, f"ecc.{key}", "an integer >= 0")
        out[key] = int(value)
    return out


def _parse_allowed(table: Any, key: str, name: str, text: str) -> bool:
    if not isinstance(table, dict) or set(table) - {"allowed"}:
        raise _fail(name, text, key, "a table with `allowed = true|false`")
    value = table.get("allowed", False)
    if not isinstance(value, bool):
        raise _fail(name, text, f"{key}.allowed", "true or false")
    return value


def _parse_latency(table: Any, name: str, text: str) -> Dict[str, int]:
    if not isinstance(table, dict) or set(table) - {"p99_max_ns"}:
        raise _fail(name, text, "latency", "a table with a `p99_max_ns` sub-table")
    limits = table.get("p99_max_ns", {})
    if not isinstance(limits, dict):
        raise _fail(name, text, "latency.p99_max_ns", "a table of operation = nanoseconds")
    out: Dict[str, int] = {}
    for op, value in limits.items():
        if not _int(value) or value <= 0:
            raise _fail(name, text, f"latency.p99_max_ns.{op}", "a positive integer (nanoseconds)")
        out[op] = int(value)
    return out


def load_rules(path: Optional[str]) -> Rules:
    if path is None:
        return Rules()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"{path}: cannot read the rules file ({exc})") from None
    return parse_rules(text, path.rsplit("/", 1)[-1])


def evaluate(
    rules: Rules,
    findings: List[Mapping[str, Any]],
    op_p99: Mapping[str, int],
    lost: int,
    incomplete: bool,
    health: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> List[Violation]:
    """Violations of `rules` by these findings; `op_p99` is the p99 latency (ns) per operation; `health` the
    health detector's per-device summary (ECC deltas)."""
    counts: Dict[str, int] = {}
    op_counts: Dict[Tuple[str, str], int] = {}
    for finding in findings:
        counts[finding["kind"]] = counts.get(finding["kind"], 0) + 1
        key = (finding["kind"], str(finding.get("op") or ""))
        op_counts[key] = op_counts.get(key, 0) + 1
    cuts = [str(f["details"].get("where")) for f in findings if f["kind"] == "truncated"]
    return evaluate_counts(rules, counts, op_counts, op_p99, lost, incomplete, health, cuts)


def evaluate_counts(
    rules: Rules,
    counts: Mapping[str, int],
    op_counts: Mapping[Tuple[str, str], int],
    op_p99: Mapping[str, int],
    lost: int,
    incomplete: bool,
    health: Optional[Mapping[str, Mapping[str, Any]]] = None,
    cuts: Sequence[str] = (),
) -> List[Violation]:
    """evaluate() on counts already made: findings per kind and per (kind, op), where the input was cut (the
    agent counts as findings come and keeps none of them)."""
    violations: List[Violation] = []
    for table, kind in sorted(COUNT_RULES.items()):
        limit, seen = rules.max_counts[table], counts.get(kind, 0)
        if limit != UNLIMITED and seen > limit:
            violations.append(Violation(table, f"{seen} {kind} finding(s), at most {limit} allowed", seen))
        for op, op_limit in sorted(rules.max_by_op.get(table, {}).items()):
            seen = op_counts.get((kind, op), 0)
            if seen > op_limit:
                message = f"{seen} {kind} finding(s) of {op}, at most {op_limit} allowed"
                violations.append(Violation(f"{table}.max_by_op.{op}", message, seen))
    violations += _ecc_violations(rules, health)
    if incomplete and not rules.loss_allowed:
        count = f"{lost} event(s)" if lost else "an unknown number of events"  # flags of losses of unknown size only
        violations.append(Violation("loss", f"the trace is incomplete: {count} lost", lost))
    for where in cuts:
        if not rules.truncated_allowed:
            violations.append(Violation("truncated", f"the recording is cut: {where}", 1))
    for op, limit in sorted(rules.p99_max_ns.items()):
        p99 = op_p99.get(op)
        if p99 is not None and p99 > limit:
            violations.append(Violation(f"latency.{op}", f"p99 of {op} is {p99} ns, at most {limit} ns allowed", 1))
    return violations


def _ecc_violations(rules: Rules, health: Optional[Mapping[str, Mapping[str, Any]]]) -> List[Violation]:
    out = []
    for name in ECC_LIMITS:
        if name not in rules.ecc:
            continue
        field_name = name[len("max_") :]
        for dev, info in sorted((health or {}).items()):
            delta = info.get(field_name)
            if isinstance(delta, int) and delta > rules.ecc[name]:
                what = field_name[: -len("_delta")]
                message = f"device {dev}: {what} count grew by {delta}, at most {rules.ecc[name]}"
                out.append(Violation(f"ecc.{name}", message, delta))
    return out


def rule_names(rules: Rules) -> List[Tuple[str, str]]:
    """(rule, description) for every rule in force, for reports that list passing rules too (JUnit)."""
    out = [("loss", "no lost events" if not rules.loss_allowed else "loss tolerated")]
    out.append(("truncated", "the recording is whole" if not rules.truncated_allowed else "a cut recording tolerated"))
    for table in sorted(COUNT_RULES):
        limit = rules.max_counts[table]
        out.append((table, "no limit" if limit == UNLIMITED else f"at most {limit}"))
    for table, ops in sorted(rules.max_by_op.items()):
        out += [(f"{table}.max_by_op.{op}", f"at most {n}") for op, n in sorted(ops.items())]
    out += [(f"ecc.{key}", f"at most {n} per device") for key, n in sorted(rules.ecc.items())]
    out += [(f"latency.{op}", f"p99 <= {ns} ns") for op, ns in sorted(rules.p99_max_ns.items())]
    return out
