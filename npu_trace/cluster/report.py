"""The cluster's report: one dict (its inputs, hosts, notes, the aligned timeline of evidence and the
`cluster_incident` findings), rendered as text, JSON or JUnit XML. Deterministic: the same recordings give
byte-identical output (sorted keys, no paths above the inputs, no time but the recordings')."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Dict, List, Mapping, Sequence

from npu_trace.cluster.incidents import Item, incidents
from npu_trace.cluster.read import RecordingView, host_groups

S = 1_000_000_000
MAX_TIMELINE_LINES = 200


def build(views: Sequence[RecordingView], items: Sequence[Item]) -> Dict[str, Any]:
    found = incidents(items)
    return {"inputs": [_input(v) for v in views], "hosts": _hosts(views), "notes": notes(views),
            "timeline": [i.brief() for i in sorted(items, key=Item.order)], "findings": found,
            "verdict": "incident" if found else "healthy"}  # fmt: skip


def _input(v: RecordingView) -> Dict[str, Any]:
    return {"recording": v.name, "host": v.host.name, "identity": v.host.identity, "boot_id": v.host.boot_id,
            "clock_error_ns": v.host.error_ns, "clock_error_known": v.host.error_known, "events": v.events,
            "evidence": len(v.evidence), "truncated": v.truncated, "lost": v.lost, "incomplete": v.incomplete,
            "damaged_parts": v.damaged}  # fmt: skip


def _hosts(views: Sequence[RecordingView]) -> List[Dict[str, Any]]:
    out = []
    for key, group in sorted(host_groups(views).items(), key=lambda kv: (kv[1][0].host.name, kv[0])):
        h = group[0].host
        out.append({"host": h.name, "key": key, "machine_id": h.machine_id, "identity": h.identity,
                    "boot_ids": sorted({v.host.boot_id for v in group if v.host.boot_id}),
                    "recordings": [v.name for v in group],
                    "clock_error_ns": max(v.host.error_ns for v in group)})  # fmt: skip
    return out


def notes(views: Sequence[RecordingView]) -> List[str]:
    """What the inputs could not say, grouped by file: hosts known without an identity, clocks of unknown sync."""
    out = []
    by_name = [v for v in views if v.host.identity == "hostname"]
    if by_name:
        out.append(f"{len(by_name)} recording(s) carry no host identity (written before headers had one): known by "
                   f"their header's host name: {_files(by_name, True)}")  # fmt: skip
    by_file = [v for v in views if v.host.identity == "file"]
    if by_file:
        out.append(f"{len(by_file)} recording(s) name no host (imports): each its own host: {_files(by_file)}")
    unknown = [v for v in views if not v.host.error_known]
    if unknown:
        err = unknown[0].host.error_ns / S
        out.append(f"{len(unknown)} recording(s) say nothing of their clock's sync, or it was not synchronized: "
                   f"aligned with {err:g} s of uncertainty assumed: {_files(unknown)}")  # fmt: skip
    partial = [v for v in views if v.truncated or v.incomplete or v.damaged]
    if partial:
        out.append(f"{len(partial)} recording(s) are incomplete (an origin may lie in what they lack): "
                   + ", ".join(f"{v.name} ({_lacks(v)})" for v in partial))  # fmt: skip
    no_anchor = [v for v in views if v.host.mono_ns is None]
    if no_anchor:
        out.append(f"{len(no_anchor)} recording(s) have no clock anchor: their trace clock taken as wall time: "
                   f"{_files(no_anchor)}")  # fmt: skip
    return out


def _lacks(v: RecordingView) -> str:
    lacks = ["cut"] if v.truncated else []
    if v.damaged:
        lacks.append(f"{v.damaged} damaged part(s) skipped")
    if v.lost or (v.incomplete and not v.damaged):
        lacks.append(f"{v.lost} events lost" if v.lost else "events lost, how many unknown")
    return ", ".join(lacks)


def _files(views: Sequence[RecordingView], with_host: bool = False) -> str:
    return ", ".join(f"{v.name} ({v.host.name})" if with_host else v.name for v in views)


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def stamp(ns: int) -> str:
    """Wall-clock ns as UTC to the microsecond."""
    when = dt.datetime.fromtimestamp(ns // S, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % S // 1000:06d}Z"


def _where(entry: Mapping[str, Any]) -> str:
    dev = entry.get("device")
    return f"{entry['host']} " + (f"dev{dev}" if dev is not None else "(no device)")


def render_text(report: Mapping[str, Any]) -> str:
    hosts = report["hosts"]
    found = report["findings"]
    lines = [f"npu-trace cluster: {len(hosts)} host(s), {len(report['inputs'])} recording(s): "
             + (f"{len(found)} incident(s)" if found else "no incident")]  # fmt: skip
    lines += [f"  host {h['host']}: {len(h['recordings'])} recording(s), clock +-{h['clock_error_ns'] / 1e6:g} ms"
              f" ({h['identity']})" for h in hosts]  # fmt: skip
    lines += [f"  note: {n}" for n in report["notes"]]
    for k, f in enumerate(found, 1):
        lines += incident_lines(k, f)
    lines += timeline_lines(report["timeline"], found[0]["ts_ns"] if found else None)
    return "\n".join(lines) + "\n"


def incident_lines(k: int, f: Mapping[str, Any]) -> List[str]:
    d = f["details"]
    out = [f"incident {k} at {stamp(f['ts_ns'])}: {len(d['hosts'])} host(s), {d['evidence']} pieces of evidence"]
    if d["origin_missing"]:
        out.append(f"  origin: not among the inputs: {d['note']}")
    else:
        o = d["origin"]
        out.append(f"  origin: {_where(o)}: {o['strongest']['what']} ({o['rank']}); first evidence: "
                   f"{o['first_evidence']['what']} at {stamp(o['first_evidence']['at_ns'])}")  # fmt: skip
        for t in d.get("origin_not_told_apart_from", []):
            out.append(f"  note: not told apart within the clocks' uncertainty from {_where(t)}")
    out.append(f"  consequences ({len(d['consequences'])}; time after the origin's first evidence, +- the clocks' "
               "uncertainty):")  # fmt: skip
    for c in d["consequences"]:
        order = "" if c["after_beyond_uncertainty"] else "  (not ordered: within the uncertainty)"
        out.append(f"    {c['after_origin_ns'] / S:+9.3f} s +-{c['uncertainty_ns'] / 1e6:g} ms  {_where(c):<22} "
                   f"{c['first']['what']}; {', '.join(c['kinds'])}{order}")  # fmt: skip
    return out


def timeline_lines(timeline: Sequence[Mapping[str, Any]], zero: Any) -> List[str]:
    if not timeline:
        return ["timeline: no evidence of a fault on any host"]
    base = zero if zero is not None else timeline[0]["at_ns"]
    out = [f"timeline (every host, aligned; seconds from {stamp(base)}):"]
    for e in timeline[:MAX_TIMELINE_LINES]:
        out.append(f"  {(e['at_ns'] - base) / S:+9.3f} +-{e['uncertainty_ns'] / 1e6:g} ms  {_where(e):<22} "
                   f"{e['kind']:<26} {e['what']}")  # fmt: skip
    if len(timeline) > MAX_TIMELINE_LINES:
        out.append(f"  ... and {len(timeline) - MAX_TIMELINE_LINES} more (see --json)")
    return out


def render_junit(report: Mapping[str, Any]) -> str:
    """One test suite: each recording read (a test case), and "no cluster incident" failing once per incident."""
    from npu_trace.ci.check_report import xml_attr, xml_text  # only for JUnit

    cases = [f'  <testcase classname="npu-trace.cluster" name={xml_attr("read " + i["recording"])}></testcase>'
             for i in report["inputs"]]  # fmt: skip
    messages = [incident_lines(k, f)[0] + "; " + incident_lines(k, f)[1].strip()
                for k, f in enumerate(report["findings"], 1)]  # fmt: skip
    body = "".join(f"<failure message={xml_attr(m)}>{xml_text(m)}</failure>" for m in messages)
    cases.append(f'  <testcase classname="npu-trace.cluster" name="no cluster incident">{body}</testcase>')
    head = (f'<testsuite name="npu-trace cluster" tests="{len(cases)}" failures="{1 if messages else 0}" '
            'errors="0" skipped="0">')  # fmt: skip
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + "\n".join([head, *cases, "</testsuite>"]) + "\n"
