"""One message in the chat: who said it, the body (a reply as Markdown, with bare code shown as
code; a prompt as it was typed), and the reply's numbers.

A message can take focus (Tab / Shift+Tab from the prompt), and then `c` copies it and `y`
copies its code blocks, one after another on repeated presses.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from markdown_it import MarkdownIt
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Label, Markdown, Static

from tui.reply_markdown import as_markdown
from tui.stats import ReplyStats
from tui.widgets.code_block import ReplyMarkdown
from tui.widgets.framed_stream import FramedStream

__all__ = ["ChatMessage", "code_blocks"]

_MARKDOWN = MarkdownIt("commonmark")


def code_blocks(text: str) -> list[str]:
    """The code blocks of a message as it is shown: fenced, indented and bare code, in order."""
    tokens = _MARKDOWN.parse(as_markdown(text))
    return [t.content for t in tokens if t.type in ("fence", "code_block")]


class ChatMessage(Vertical, can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "copy_text", "Copy message"),
        Binding("y", "copy_code", "Copy code block"),
        Binding("up", "app.focus_previous", "Previous", show=False),
        Binding("down", "app.focus_next", "Next", show=False),
    ]

    def __init__(
        self,
        role: str,
        content: str = "",
        *,
        speaker: str = "",
        stats: ReplyStats | None = None,
        message_id: int | None = None,
        streaming: bool = False,
    ) -> None:
        # "-streaming" from the start: a class added once the message is up would restyle
        # its whole subtree just as the first token is due.
        super().__init__(classes=f"-{role} -streaming" if streaming else f"-{role}")
        self.role = role
        self.content = content
        self.speaker = speaker or ("You" if role == "user" else "Assistant")
        self.stats = stats
        self.message_id = message_id
        self._code_index = 0
        self._mounted = asyncio.Event()

    def compose(self) -> ComposeResult:
        yield Label(self.speaker, classes="speaker")
        if self.role == "user":  # as typed: its line breaks kept, no Markdown to parse
            yield Static(self.content, markup=False, classes="body")
        else:
            yield ReplyMarkdown(as_markdown(self.content), classes="body")
        yield Static(self.stats.format() if self.stats else "", classes="stats", markup=False)

    def on_mount(self) -> None:
        self.query_one(".stats", Static).display = self.stats is not None
        self._mounted.set()

    async def stream(self) -> FramedStream:
        """Start streaming text into the body (the reply in flight), once it is on screen."""
        await self._mounted.wait()
        return FramedStream(self.query_one(".body", Markdown))

    def set_live(self, text: str) -> None:
        """The reply's numbers while it streams."""
        stats = self.query_one(".stats", Static)
        stats.display = True
        stats.update(text)

    def finish(self, content: str, stats: ReplyStats | None, message_id: int) -> None:
        self.remove_class("-streaming")
        self.content, self.stats, self.message_id = content, stats, message_id
        label = self.query_one(".stats", Static)
        label.display = stats is not None
        label.update(stats.format() if stats else "")

    def action_copy_text(self) -> None:
        self.app.copy_to_clipboard(self.content)
        self.notify(f"Copied the message ({len(self.content)} characters)")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.content)
        if not blocks:
            self.notify("This message has no code block", severity="warning")
            return
        index = self._code_index % len(blocks)
        self._code_index += 1
        self.app.copy_to_clipboard(blocks[index])
        self.notify(f"Copied code block {index + 1} of {len(blocks)}")
