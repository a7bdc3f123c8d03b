"""One step of an agent chain as it runs: its prompt, its streamed output, its numbers."""

from __future__ import annotations

import json
import time
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Label, Markdown, Static

from ling_local.agents.events import StepFinished, jsonable
from tui.reply_markdown import as_markdown
from tui.widgets.code_block import ReplyMarkdown
from tui.widgets.framed_stream import FramedStream

__all__ = ["StepPanel"]


class StepPanel(Vertical):
    """States: running → finished | failed | cancelled (a CSS class of the same name)."""

    def __init__(self, index: int, name: str, prompt: str, kind: str = "prompt") -> None:
        super().__init__(classes="-running")
        self.index, self.step_name, self.prompt, self.kind = index, name, prompt, kind
        self.state = "running"
        self.output = ""
        self.note = ""
        """Why the step is on a later attempt (shown while it runs)."""
        self.started = time.perf_counter()
        self._stream: FramedStream | None = None
        # Built here, not in compose: the view's timer may tick a panel whose mount is still
        # being awaited, and an update before the mount shows once the label is up.
        self._title_label = Label(self._title(), classes="step-title")
        self._numbers = Label("running…", classes="step-numbers")

    def compose(self) -> ComposeResult:
        yield self._title_label
        if self.kind == "prompt":
            with Collapsible(title=f"Prompt ({len(self.prompt)} characters)", collapsed=False):
                yield Static(self.prompt, markup=False, classes="step-prompt")
        yield ReplyMarkdown("", classes="step-output")
        yield self._numbers

    def _title(self) -> str:
        marks = {"running": "▶", "finished": "✔", "failed": "✖", "cancelled": "■"}
        what = "" if self.kind == "prompt" else f" ({self.kind})"
        return f"{marks[self.state]} Step {self.index + 1}: {self.step_name}{what} · {self.state}"

    def _set_state(self, state: str) -> None:
        self.remove_class(f"-{self.state}")
        self.state = state
        self.add_class(f"-{state}")
        self._title_label.update(self._title())

    async def write(self, text: str) -> None:
        if self._stream is None:
            output = self.query_one(".step-output", Markdown)
            self._stream = FramedStream(output)
        self.output += text
        await self._stream.write(text)

    def tick(self) -> None:
        if self.state == "running":
            elapsed = time.perf_counter() - self.started
            note = f" · {self.note}" if self.note else ""
            self._numbers.update(f"running… {elapsed:.1f} s{note}")

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None

    async def retry(self, attempt: int, reason: str) -> None:
        """The step is asked again: what streams next is a new answer."""
        await self._stop_stream()
        self.output = ""
        await self.query_one(".step-output", Markdown).update("")
        self.note = f"attempt {attempt}: {reason}"
        self.tick()

    async def finish(self, event: StepFinished) -> None:
        await self._stop_stream()
        shown = _as_markdown(event.output)
        if shown != as_markdown(self.output):  # the runner's result is the truth
            await self.query_one(".step-output", Markdown).update(shown)
        self.output = event.output if isinstance(event.output, str) else shown
        self._set_state("finished")
        numbers = f"{event.seconds:.2f} s"
        if self.kind == "prompt":
            rate = event.completion_tokens / event.seconds if event.seconds > 0 else 0.0
            numbers += (
                f" · {event.prompt_tokens} prompt tokens → "
                f"{event.completion_tokens} tokens · {rate:.1f} tok/s"
            )
        if event.attempts > 1:
            numbers += f" · {event.attempts} attempts"
        self._numbers.update(numbers)
        for prompt in self.query(Collapsible):
            prompt.collapsed = True

    async def end(self, state: str, message: str) -> None:
        """Failed or cancelled."""
        await self._stop_stream()
        self._set_state(state)
        elapsed = time.perf_counter() - self.started
        self._numbers.update(f"{message} after {elapsed:.1f} s")


def _as_markdown(output: Any) -> str:
    """Text as a reply is shown; a schema object or a function's return value as JSON."""
    if isinstance(output, str):
        return as_markdown(output)
    text = json.dumps(output, default=jsonable, ensure_ascii=False, indent=2)
    return f"```json\n{text}\n```"
