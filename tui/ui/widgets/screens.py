"""Modal screens: help (the keys) and a one-line prompt (marker text)."""

from __future__ import annotations

from typing import Iterable, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]
    DEFAULT_CSS = "HelpScreen { align: center middle; } #help { width: 76; height: auto; border: round $accent; }"

    def __init__(self, keys: Iterable[Tuple[str, str]]) -> None:
        super().__init__()
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        t = Text("npu-trace live: keys\n\n", "bold")
        for key, what in self.keys:
            t.append(f"  {key:>12}  ", "bold cyan")
            t.append(f"{what}\n")
        t.append("\nFilter syntax: dev:0 kind:timeout pid:123 comm:name free text\n", "dim")
        t.append("Escape or ? closes this help.", "dim")
        yield Static(t, id="help")


class PromptScreen(ModalScreen[str]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = "PromptScreen { align: center middle; } #prompt { width: 70; height: auto; border: round $accent; }"

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Static(Text(self.title_text, "bold"))
            yield Input(value=self.value, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss("")
