"""Code blocks that show every character: a line wider than the block is wrapped at the
block's edge, and each row it continues on starts with a dim ``↪`` (as an editor's
``showbreak`` does), so a wrapped line never reads as two lines and nothing is cut off.

Textual's own fence keeps a line whole and lets it run past the block's right edge, with
its horizontal scrollbar hidden: a person reading a reply at 100 columns saw
``…InstrumentedExpressio`` and nothing to say the line went on.
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownBlock, MarkdownFence

__all__ = ["CONTINUED", "ReplyMarkdown", "WrappedCode", "WrappedFence", "wrap_code"]

CONTINUED = "↪ "
"""Starts each row that continues the line above it."""


def _cut(line: Content, width: int) -> int:
    """How many characters of `line` fit in `width` cells (at least one)."""
    used = 0
    for index, char in enumerate(line.plain):
        used += cell_len(char)
        if used > width:
            return max(index, 1)
    return len(line.plain)


def wrap_code(code: Content, width: int) -> list[Content]:
    """`code`'s rows at `width` cells: each line whole if it fits, else cut at the width and
    continued on rows that start with `CONTINUED`."""
    marker = Content.styled(CONTINUED, "dim")
    rows: list[Content] = []
    for line in code.split("\n", allow_blank=True):
        first = True
        while True:
            room = width if first else width - marker.cell_length
            if line.cell_length <= room or room < 4:  # no room to wrap into: leave it whole
                rows.append(line if first else marker + line)
                break
            head, line = line.divide([_cut(line, room)])[:2]
            rows.append(head if first else marker + head)
            first = False
    return rows


class WrappedCode(Widget):
    """The highlighted code of a block, wrapped to the width it is given."""

    DEFAULT_CSS = """
    WrappedCode {
        width: 1fr;
        height: auto;
        padding: 1 2;
    }
    """

    def __init__(self, code: Content, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.code = code

    def update(self, code: Content) -> None:
        self.code = code
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(wrap_code(self.code, width))

    def render(self) -> Content:
        return Content("\n").join(wrap_code(self.code, self.content_size.width))


class WrappedFence(MarkdownFence):
    """A Markdown code block (fenced or indented) drawn by `WrappedCode`."""

    def compose(self) -> ComposeResult:
        yield WrappedCode(self._highlighted_code, id="code-content")

    def set_content(self, content: Content) -> None:
        self._content = content
        for code in self.query(WrappedCode):
            code.update(content)


class ReplyMarkdown(Markdown):
    """Markdown whose code blocks wrap instead of running off the edge."""

    BLOCKS: ClassVar[dict[str, type[MarkdownBlock]]] = {
        **Markdown.BLOCKS,
        "fence": WrappedFence,
        "code_block": WrappedFence,
    }
