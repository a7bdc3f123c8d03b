"""The scrolling list of messages, and what it shows when there are none."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from tui.daemon import DaemonStatus
from tui.store import StoredMessage
from tui.widgets.chat_message import ChatMessage

__all__ = ["ChatLog", "EmptyState", "ErrorNotice"]

_WELCOME = """\
[b]Chat with the local model[/b]

Type below and press [b]Enter[/b]; [b]Ctrl+J[/b] adds a line. [b]Esc[/b] stops a reply and \
gives your prompt back. [b]F1[/b] lists every key, and so does [b]?[/b] outside a text box.
"""


class EmptyState(Static):
    """Shown in an empty conversation: how to start, and whether the daemon can answer."""

    def show_status(self, status: DaemonStatus) -> None:
        self.set_class(status.state in ("down", "failed", "error"), "-problem")
        self.update(f"{_WELCOME}\n{escape(status.advice())}")


class ErrorNotice(Static):
    """A failed reply, said plainly, in the place where the reply would have been."""


class ChatLog(VerticalScroll, can_focus=False):
    def show(self, messages: list[StoredMessage], status: DaemonStatus) -> None:
        """Replace the content with a stored conversation (or the empty state)."""
        self.remove_children()
        if not messages:
            # No id: the one being replaced is only removed at the next idle moment, and a
            # second one with the same id would clash with it (Ctrl+N twice).
            empty = EmptyState()
            self.mount(empty)
            empty.show_status(status)
            return
        self.mount_all(
            ChatMessage(
                m.role,
                m.content,
                speaker=m.model,
                stats=m.stats,
                message_id=m.id,
            )
            for m in messages
        )
        self.call_after_refresh(self.scroll_end, animate=False)
        self.anchor()

    def add(self, message: ChatMessage, before: ChatMessage | None = None) -> ChatMessage:
        for empty in self.query(EmptyState):
            empty.remove()
        for notice in self.query(ErrorNotice):
            notice.remove()
        self.mount(message, before=before)
        self.anchor()
        return message

    def notice(self, text: str) -> None:
        self.mount(ErrorNotice(text, markup=False))
        self.anchor()

    def messages(self) -> list[ChatMessage]:
        return list(self.query(ChatMessage))

    def remove_from(self, message_id: int) -> None:
        """Remove a message and everything after it."""
        found = False
        for widget in self.messages():
            found = found or widget.message_id == message_id
            if found:
                widget.remove()

    def update_status(self, status: DaemonStatus) -> None:
        for empty in self.query(EmptyState):
            empty.show_status(status)
