"""Textual messages the TUI's widgets send up to their screen (dataclasses, handled with @on)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

__all__ = [
    "ConversationAction",
    "ConversationSelected",
    "PromptSubmitted",
]


@dataclass
class PromptSubmitted(Message):
    """The person pressed Enter in the prompt box."""

    text: str


@dataclass
class ConversationSelected(Message):
    """A conversation was picked in the sidebar."""

    conversation_id: int


@dataclass
class ConversationAction(Message):
    """Rename or delete asked for from the sidebar."""

    action: str
    """One of: rename, delete, export."""
    conversation_id: int
