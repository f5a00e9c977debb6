"""What a flight recorder's dump of "steady load, then the ecc-reset scenario" must hold (offline and live)."""

from __future__ import annotations

import collections
import os
from typing import Any, Dict, List, Optional

from npu_trace.ci.recording_analysis import analyze
from npu_trace.sinks.flight.dumps import is_dump
from test_detectors_truth import check_resets, of_kind


def the_one_dump(directory: str) -> str:
    """The directory holds exactly one finished dump, private to its owner, and nothing unfinished."""
    names = sorted(os.listdir(directory))
    dumps = [n for n in names if is_dump(n)]
    assert len(dumps) == 1 and names == dumps, names
    path = os.path.join(directory, dumps[0])
    assert os.stat(path).st_mode & 0o777 == 0o600
    return path


def check_the_reset_dump(path: str, exp: Dict[str, Any], dev: int, also: Optional[Dict[str, int]] = None,
                         live: bool = False) -> Dict[str, Any]:  # fmt: skip
    """`check`'s analysis of the dump: the reset sequence (complete, every step, its precursors: the ECC climb and
    the temperature), the scenario's timeouts, and nothing else (but `also`: kind -> count; `live`: and the spikes a
    loaded host may really cause); no loss; the window
    said. Returns the report and the reading."""
    result = analyze(path, progress=False)
    report, reading = result["analysis"], result["reading"]
    # `live`: spikes aside: the scenario injects none, but a live call on a loaded host can really take longer
    # than its threshold (the thread descheduled inside it), and the tracer is right to say so
    kinds = collections.Counter(f["kind"] for f in report["findings"] if not (live and f["kind"] == "spike"))
    want = {"reset_sequence": 1, "timeout": sum(exp["timeouts"].values()), **(also or {})}
    assert kinds == want, kinds
    timeouts = collections.Counter((f["device"], f["op"]) for f in of_kind(report, "timeout"))
    assert timeouts == exp["timeouts"]
    check_resets(of_kind(report, "reset_sequence"), {**exp, "resets": {dev: exp["resets"][dev]}})
    assert not reading["truncated"] and reading["lost"] == 0 and not reading["incomplete"]
    window = reading["window"]
    assert window["closed"] == "quiet" and window["principal"]["kind"] == "reset", window
    assert window["trigger"]["kind"] == "timeout" and window["trigger"]["device"] == dev, window
    return {"report": report, "reading": reading}


def ecc_expectations(truth_of_run: Dict[str, Any]) -> Dict[str, Any]:
    """The ecc-reset run's expectations, without its leaks (a window's end is not the processes' end)."""
    return {k: v for k, v in truth_of_run.items() if k != "leaks"}


def kept_marks(batches: List[Any], from_ns: int, to_ns: int) -> List[Any]:
    return [b.mark for b in batches if b.mark is not None and from_ns <= b.mark.read_ns <= to_ns]
