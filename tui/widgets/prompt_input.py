"""The prompt box: multi-line, Enter sends, Ctrl+J or Alt+Enter adds a line, paste as is."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.widgets import TextArea

from tui.messages import PromptSubmitted

__all__ = ["PromptInput"]


class PromptInput(TextArea):
    """A TextArea whose Enter submits; a bracketed paste keeps its newlines."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+j,alt+enter,shift+enter", "newline", "New line", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            compact=True,
            placeholder="Ask something… (Enter sends, Ctrl+J new line)",
        )

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(PromptSubmitted(self.text))
            return
        await super()._on_key(event)

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)

    def restore(self, text: str) -> None:
        """Put text back for editing, cursor at its end."""
        self.load_text(text)
        self.move_cursor(self.document.end)
        self.focus()
