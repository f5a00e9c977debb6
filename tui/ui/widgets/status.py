"""The status bar: events/s, loss (calm at zero, loud otherwise), recording, pause and source state."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.fmt import safe, size
from tui.messages import Counters

ERROR_CHARS = 60  # the whole error is on the line under the event log


def status_text(c: Counters, paused: bool, pending: int, dropped: int, query: str, skipped: int = 0) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f" {safe(c.source)} ", "bold reverse")
    if c.error:  # early and short, so that neither it nor the loss is cut at the terminal's width
        error = safe(c.error)
        t.append(f" error: {error[:ERROR_CHARS]}{'…' if len(error) > ERROR_CHARS else ''} ", "bold white on red")
    t.append(f" {c.rate:,.0f} ev/s ", "bold")
    t.append(f"({c.events:,} total) ", "dim")
    if c.loss or c.loss_flagged:
        t.append(f" LOST {c.loss:,} events " if c.loss else " LOST events (how many unknown) ", "bold white on red")
    else:
        t.append(" loss 0 ", "green")
    if c.recording:
        t.append(f" ● REC {safe(c.recording)} {size(c.recording_bytes)} ", "bold red")
    else:
        t.append(" rec off ", "dim")
    if paused:
        t.append(f" PAUSED +{pending:,} buffered", "bold yellow")
        t.append(f", {dropped:,} dropped " if dropped else " ", "bold red" if dropped else "bold yellow")
    if skipped:
        t.append(f" log skipped {skipped:,} ", "dim yellow")
    if query:
        t.append(f" filter: {safe(query)} ", "cyan")
    if c.ended:
        t.append(" ended ", "bold")
    if c.detail:
        t.append(f" {safe(c.detail)}", "dim")
    return t


class StatusBar(Static):
    def show(self, c: Counters, paused: bool, pending: int, dropped: int, query: str, skipped: int = 0) -> None:
        self.update(status_text(c, paused, pending, dropped, query, skipped), layout=False)  # one line, always
