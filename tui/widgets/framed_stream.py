"""Streamed replies drawn at a frame rate, not at the token rate.

The engine can send well over a thousand tokens a second; redrawing Markdown for each one
would make the terminal the bottleneck (and, on a CPU box, steal cores from the engine).
Text is taken at network speed and drawn at most once a frame: as Markdown with its bare
code fenced (`tui.reply_markdown`). When the new Markdown only adds to the end of what is
shown (the usual case) the widget appends it; when a line turned out to start or end a
code block, the reply is drawn again whole.
"""

from __future__ import annotations

import time

from textual.widgets import Markdown

from tui.reply_markdown import as_markdown

__all__ = ["FRAME_S", "FramedStream"]

FRAME_S = 1 / 30
"""Longest that text which has arrived waits before it is drawn."""


class FramedStream:
    def __init__(self, markdown: Markdown, frame_s: float = FRAME_S) -> None:
        self._markdown = markdown
        self._frame_s = frame_s
        self._pending: list[str] = []
        self._text = ""
        self._shown = ""
        self._drawn = 0.0
        self._stopped = False

    async def write(self, text: str) -> None:
        """Take `text`; draw what is pending when a frame has passed (awaits only then)."""
        self._pending.append(text)
        now = time.perf_counter()
        if now - self._drawn >= self._frame_s:
            self._drawn = now
            await self.flush()

    async def flush(self, *, partial: bool = True) -> None:
        self._text += "".join(self._pending)
        self._pending.clear()
        await self._draw(as_markdown(self._text, partial=partial))

    async def _draw(self, markdown: str) -> None:
        if markdown == self._shown:
            return
        if markdown.startswith(self._shown):
            await self._markdown.append(markdown[len(self._shown) :])
        else:  # from empty: append keeps track of where the last block starts, update not
            with self._markdown.app.batch_update():
                await self._markdown.update("")
                await self._markdown.append(markdown)
        self._shown = markdown

    async def stop(self) -> None:
        """Draw the rest, with every code block closed (safe to call twice)."""
        if not self._stopped:
            self._stopped = True
            await self.flush(partial=False)
