"""Reports of `check`: one dict, rendered as text, JSON or JUnit XML. Deterministic: the same recording and
rules give byte-identical output (sorted keys, no wall-clock time, no absolute paths)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Sequence

from npu_trace.detectors.rules import Rules, Violation, rule_names
from npu_trace.pipeline.scope import Scope


def build_report(
    input_name: str,
    analysis: Mapping[str, Any],
    rules: Rules,
    violations: List[Violation],
    reading: Mapping[str, Any],
) -> Dict[str, Any]:
    return {
        "input": input_name,
        "reading": dict(reading),
        "rules": rules.as_dict(),
        "summary": analysis["summary"],
        "findings": list(analysis["findings"]),
        "violations": [v.as_dict() for v in violations],
        "verdict": "fail" if violations else "pass",
    }


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def _finding_line(f: Mapping[str, Any]) -> str:
    where = " ".join(p for p in (f"dev{f['device']}" if f.get("device") is not None else "", f.get("op") or "") if p)
    secs, nsecs = divmod(int(f["ts_ns"]), 1_000_000_000)
    details = ", ".join(f"{k}={_short(v)}" for k, v in sorted(f.get("details", {}).items())
                        if not isinstance(v, (dict, list)) and k not in ("text", "msg"))  # fmt: skip
    return f"  {secs:6d}.{nsecs:09d}  {f['kind']:<15} {where:<24} {details}"


def _short(v: Any) -> Any:
    """A value as one short line (a fault's block, an application's message: their first line, cut)."""
    if not isinstance(v, str):
        return v
    line = v.split("\n", 1)[0]
    return line if len(line) <= 80 and "\n" not in v else line[:77] + "..."


def window_text(w: Mapping[str, Any]) -> str:
    """A flight dump's window in one line: what triggered it, its span, whether the ring held all asked for."""
    t = w.get("principal") or w.get("trigger") or {}
    on = f" on device {t['device']}" if t.get("device") is not None else ""
    start, end = w.get("held_from_ns"), w.get("to_ns")
    span = f", {(end - start) / 1e9:.1f} s" if isinstance(start, int) and isinstance(end, int) else ""
    where = f"from {_stamp(start)} to {_stamp(end)}{span}"
    asked = w.get("requested_from_ns")
    short = isinstance(start, int) and isinstance(asked, int) and start > asked
    more = f" (asked from {_stamp(asked)}: the ring held less)" if short else ""
    counts = w.get("triggers") or {}
    told = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    closed = f"; ended: {w['closed']}" if w.get("closed") else "; its end is missing (cut)"
    return f"a flight recorder's dump of {t.get('kind', '?')}{on}, {where}{more}; triggers: {told or '?'}{closed}"


def _stamp(ns: Any) -> str:
    if not isinstance(ns, int):
        return "?"
    secs, nsecs = divmod(ns, 1_000_000_000)
    return f"{secs}.{nsecs // 1000:06d}"


def damage_notes(reading: Mapping[str, Any]) -> List[str]:
    """A line for each damaged part of the recording the reading skipped."""
    return [f"  note: a damaged part was skipped: {damage}" for damage in reading.get("damaged") or ()]


def render_text(report: Mapping[str, Any]) -> str:
    lines = [f"npu-trace check {report['input']}: {report['verdict'].upper()}"]
    reading = report["reading"]
    if reading.get("truncated"):
        lines.append(f"  note: the recording is cut: {reading.get('truncation', '')}")
    lines += damage_notes(reading)
    if reading.get("scope"):
        lines.append(f"  scope: {Scope.from_header(reading['scope']).where()}")
    if reading.get("window"):
        lines.append(f"  window: {window_text(reading['window'])}")
    loose = _unattributed(report)
    if loose:
        lines.append(f"  note: {loose}")
    counts: Dict[str, int] = {}
    for f in report["findings"]:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    found = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
    lines.append(f"findings: {found}")
    lines += [_finding_line(f) for f in report["findings"][:200]]
    if len(report["findings"]) > 200:
        lines.append(f"  ... and {len(report['findings']) - 200} more (see --json)")
    lines.append(f"violations: {len(report['violations'])}")
    lines += [f"  {v['rule']}: {v['message']}" for v in report["violations"]]
    return "\n".join(lines) + "\n"


def _unattributed(report: Mapping[str, Any]) -> str:
    """ "2 threads holding memory belong to no known process (ids 501, 502): ..." when the memory detector
    counted any (npu_trace.detectors.processes); "" otherwise."""
    memory = (report.get("summary") or {}).get("memory") or {}
    n = memory.get("unattributed_threads")
    if not n:
        return ""
    ids = ", ".join(map(str, memory.get("unattributed") or []))
    more = ", ..." if n > len(memory.get("unattributed") or []) else ""
    return (f"{n} thread{'s' if n > 1 else ''} holding device memory belong to no known process (ids {ids}{more}): "
            "each counted as its own process (a lost newtask event, or a thread of an earlier file of a rotation)")


def render_junit(report: Mapping[str, Any], rules: Rules) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + junit_suite(report, rules).xml + "\n"


# what XML 1.0 holds no character of, even escaped (a file name's control characters, a comm's): shown as \xNN
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_attr(text: str) -> str:
    """`text` as a quoted XML attribute value, characters XML cannot hold shown as \\xNN."""
    from xml.sax.saxutils import quoteattr  # only for JUnit: it imports urllib and ssl, ~30 ms

    return quoteattr(_xml_safe(text))


def xml_text(text: str) -> str:
    """`text` as XML character data, characters XML cannot hold shown as \\xNN."""
    from xml.sax.saxutils import escape

    return escape(_xml_safe(text))


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Suite(NamedTuple):
    """A JUnit <testsuite> and its counts."""

    xml: str
    tests: int
    failures: int
    errors: int


def junit_suite(report: Mapping[str, Any], rules: Rules) -> Suite:
    """One recording as a JUnit <testsuite>: each rule in force a test case, its violation a failure."""
    failed = {v["rule"]: v["message"] for v in report["violations"]}
    cases = []
    for rule, description in rule_names(rules):
        name = xml_attr(f"{rule} ({description})")
        body = f"<failure message={xml_attr(failed[rule])}>{xml_text(failed[rule])}</failure>" if rule in failed else ""
        cases.append(f'  <testcase classname="npu-trace.check" name={name}>{body}</testcase>')
    suite = xml_attr(f"npu-trace check {report['input']}")
    head = f'<testsuite name={suite} tests="{len(cases)}" failures="{len(failed)}" errors="0" skipped="0">'
    return Suite("\n".join([head, *cases, "</testsuite>"]), len(cases), len(failed), 0)


def junit_error_suite(name: str, error: str) -> Suite:
    """A recording that could not be checked, as a <testsuite> with one erroring case."""
    suite = xml_attr(f"npu-trace check {name}")
    case = (f'  <testcase classname="npu-trace.check" name="read the recording"><error message={xml_attr(error)}>'
            f"{xml_text(error)}</error></testcase>")  # fmt: skip
    head = f'<testsuite name={suite} tests="1" failures="0" errors="1" skipped="0">'
    return Suite("\n".join([head, case, "</testsuite>"]), 1, 0, 1)


def render_junit_batch(suites: Sequence[Suite]) -> str:
    """Several recordings' suites in one JUnit file (<testsuites>, totals summed)."""
    tests, failures, errors = (sum(getattr(s, k) for s in suites) for k in ("tests", "failures", "errors"))
    head = f'<testsuites name="npu-trace check" tests="{tests}" failures="{failures}" errors="{errors}">'
    body = "\n".join([head, *(s.xml for s in suites), "</testsuites>"])
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
