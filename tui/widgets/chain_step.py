"""One step of an agent chain as it runs: its prompt, its streamed output, its numbers."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Label, Markdown, Static

from tui.chains import StepFinished
from tui.widgets.framed_stream import FramedStream

__all__ = ["StepPanel"]


class StepPanel(Vertical):
    """States: running → finished | failed | cancelled (a CSS class of the same name)."""

    def __init__(self, index: int, name: str, prompt: str) -> None:
        super().__init__(classes="-running")
        self.index, self.step_name, self.prompt = index, name, prompt
        self.state = "running"
        self.output = ""
        self.started = time.perf_counter()
        self._stream: FramedStream | None = None

    def compose(self) -> ComposeResult:
        yield Label(self._title(), classes="step-title")
        with Collapsible(title=f"Prompt ({len(self.prompt)} characters)", collapsed=False):
            yield Static(self.prompt, markup=False, classes="step-prompt")
        yield Markdown("", classes="step-output")
        yield Label("running…", classes="step-numbers")

    def _title(self) -> str:
        marks = {"running": "▶", "finished": "✔", "failed": "✖", "cancelled": "■"}
        return f"{marks[self.state]} Step {self.index + 1}: {self.step_name} · {self.state}"

    def _set_state(self, state: str) -> None:
        self.remove_class(f"-{self.state}")
        self.state = state
        self.add_class(f"-{state}")
        self.query_one(".step-title", Label).update(self._title())

    async def write(self, text: str) -> None:
        if self._stream is None:
            output = self.query_one(".step-output", Markdown)
            self._stream = FramedStream(Markdown.get_stream(output))
        self.output += text
        await self._stream.write(text)

    def tick(self) -> None:
        if self.state == "running":
            elapsed = time.perf_counter() - self.started
            self.query_one(".step-numbers", Label).update(f"running… {elapsed:.1f} s")

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None

    async def finish(self, event: StepFinished) -> None:
        await self._stop_stream()
        if event.output != self.output:  # the runner's result is the truth
            self.output = event.output
            await self.query_one(".step-output", Markdown).update(event.output)
        self._set_state("finished")
        rate = event.completion_tokens / event.seconds if event.seconds > 0 else 0.0
        self.query_one(".step-numbers", Label).update(
            f"{event.seconds:.2f} s · {event.prompt_tokens} prompt tokens → "
            f"{event.completion_tokens} tokens · {rate:.1f} tok/s"
        )
        self.query_one(Collapsible).collapsed = True

    async def end(self, state: str, message: str) -> None:
        """Failed or cancelled."""
        await self._stop_stream()
        self._set_state(state)
        elapsed = time.perf_counter() - self.started
        self.query_one(".step-numbers", Label).update(f"{message} after {elapsed:.1f} s")
