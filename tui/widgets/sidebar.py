"""The conversation list: search box on top, newest first; Enter opens, r renames, d deletes."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from tui.messages import ConversationAction, ConversationSelected
from tui.store import Conversation

__all__ = ["ConversationList", "Sidebar"]


class ConversationList(OptionList):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r,f2", "act('rename')", "Rename"),
        Binding("d,delete", "act('delete')", "Delete"),
        Binding("e", "act('export')", "Export"),
    ]

    def action_act(self, action: str) -> None:
        if self.highlighted is not None:
            option = self.get_option_at_index(self.highlighted)
            self.post_message(ConversationAction(action, int(option.id or 0)))


def _label(conversation: Conversation) -> Content:
    when = datetime.fromtimestamp(conversation.updated).strftime("%b %d %H:%M")
    count = conversation.message_count
    return Content.assemble(
        Content(conversation.title),
        "\n",
        (f"{when} · {count} msg{'s' if count != 1 else ''}", "dim"),
    )


class Sidebar(Vertical):
    def compose(self) -> ComposeResult:
        yield Input(placeholder="Search (Ctrl+F)", id="search", compact=True)
        yield ConversationList(id="conversations")

    @property
    def query_text(self) -> str:
        return self.query_one("#search", Input).value

    def show(self, conversations: list[Conversation], current: int | None) -> None:
        listing = self.query_one(ConversationList)
        listing.set_options(Option(_label(c), id=str(c.id)) for c in conversations)
        for index, conversation in enumerate(conversations):
            if conversation.id == current:
                listing.highlighted = index
                break
        else:
            listing.highlighted = None

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(ConversationSelected(int(event.option.id or 0)))

    @on(Input.Submitted, "#search")
    def _search_done(self) -> None:
        self.query_one(ConversationList).focus()
