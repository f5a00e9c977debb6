"""SVG snapshots of the main screen (pytest-textual-snapshot): during a reset sequence, and during a spike.

Update after an intended change: pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from typing import Any

import pytest

from test_tui_support import batches, fake_app, mixed_events, settled, wait_for

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def spikes_stay_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new spike's row is highlighted for HOT_S of wall time: held here, so that the picture does not depend on
    how long the run took."""
    monkeypatch.setattr("tui.ui.widgets.ops.HOT_S", 3600.0)


def _snap(snap_compare: Any, until_ns: int) -> bool:
    events = [ev for ev in mixed_events() if ev.ts_ns <= until_ns]
    app = fake_app(batches(events), rows=100_000)

    async def run_before(pilot: Any) -> None:
        await wait_for(pilot, settled(app, len(events)), timeout=30)
        await pilot.pause(0.7)  # the operations table shows the latest rows within 0.5 s

    return bool(snap_compare(app, terminal_size=SIZE, run_before=run_before))


def test_main_screen_during_a_reset_sequence(snap_compare: Any) -> None:
    assert _snap(snap_compare, 1_700_000_000)  # six of the eleven reset steps seen on npu1


def test_main_screen_during_a_spike(snap_compare: Any) -> None:
    assert _snap(snap_compare, 600_000_000)  # npu1 halSqTaskSend spiked at 0.476 s
