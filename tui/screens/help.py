"""F1 (or ? outside a text box): every key, in one place (the footer shows only the most used
ones)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["KEYS", "HelpScreen"]

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Chat",
        [
            ("Enter", "send the prompt"),
            ("Ctrl+J, Alt+Enter", "new line in the prompt (a paste keeps its lines)"),
            ("Esc", "stop the reply and put the prompt back for editing; leave an edit"),
            ("Ctrl+R", "regenerate the last reply"),
            ("Ctrl+E", "edit the last message and resend it"),
            ("Shift+Tab", "go up to the messages (↑ and ↓ move between them)"),
            ("c", "on a message: copy it"),
            ("y", "on a message: copy a code block (again for the next one)"),
        ],
    ),
    (
        "Conversations",
        [
            ("Ctrl+N", "new conversation"),
            ("Ctrl+F", "search conversations (titles and text)"),
            ("Ctrl+B", "show or hide the sidebar"),
            ("F2", "rename the conversation"),
            ("Ctrl+S", "system prompt and sampling of the conversation"),
            ("Ctrl+O", "export the conversation to Markdown"),
            ("r, d, e", "in the list: rename, delete, export"),
        ],
    ),
    (
        "App",
        [
            ("Ctrl+G", "agent chains: run a chain and watch each step"),
            ("Ctrl+R, Esc", "on the chains screen: run, stop (or go back)"),
            ("Ctrl+T", "light or dark theme"),
            ("Ctrl+P", "command palette: every action by name"),
            ("F1, ?", "this help (? where no text box has focus)"),
            ("Ctrl+Q", "quit"),
        ],
    ),
]

NUMBERS = (
    "The line above the keys shows the daemon (state, engine, model) and the last reply's "
    "time to first token, decode speed and, when the engine speculates, accept length. Each "
    "reply carries its own numbers: TTFT as you waited for it (the engine's own in brackets), "
    "tokens per second, tokens and time."
)


def _table(keys: list[tuple[str, str]]) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
    table.add_column(style="bold", no_wrap=True, width=18)
    table.add_column(ratio=1)
    for key, does in keys:
        table.add_row(key, does)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q,question_mark", "dismiss", "Close")
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static("[b]ling-local keys[/b]  (Esc closes)", classes="help-title")
            for section, keys in KEYS:
                yield Static(section, classes="help-section")
                yield Static(_table(keys))
            yield Static(NUMBERS, classes="help-numbers")
