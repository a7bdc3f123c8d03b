"""Streamed Markdown drawn at a frame rate, not at the token rate.

The engine can send well over a thousand tokens a second; redrawing Markdown for each one
would make the terminal the bottleneck (and, on a CPU box, steal cores from the engine).
Text is taken at network speed and handed to Textual's `MarkdownStream` at most once a frame.
"""

from __future__ import annotations

import time

from textual.widgets.markdown import MarkdownStream

__all__ = ["FRAME_S", "FramedStream"]

FRAME_S = 1 / 30
"""Longest that text which has arrived waits before it is drawn."""


class FramedStream:
    def __init__(self, stream: MarkdownStream, frame_s: float = FRAME_S) -> None:
        self._stream = stream
        self._frame_s = frame_s
        self._pending: list[str] = []
        self._shown = 0.0

    async def write(self, text: str) -> None:
        """Take `text`; draw what is pending when a frame has passed (awaits only then)."""
        self._pending.append(text)
        now = time.perf_counter()
        if now - self._shown >= self._frame_s:
            self._shown = now
            await self.flush()

    async def flush(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            await self._stream.write(text)

    async def stop(self) -> None:
        """Draw the rest and end the stream (safe to call twice)."""
        await self.flush()
        await self._stream.stop()
