"""Ctrl+G: run an agent chain (built-in or a chain file) and watch every step as it runs.

The screen draws a `ling_local.agents` run from its events alone. Esc cancels the worker
that iterates them, which closes the running step's stream (the daemon stops generating)
and marks the step cancelled; the run stays in the run log under the id shown.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

from ling_local.agents.events import (
    ChainError,
    ChainFinished,
    Event,
    RunStarted,
    StepFinished,
    StepRetry,
    StepSkipped,
    StepStarted,
    Token,
)
from ling_local.agents.run import AsyncRun
from ling_local.errors import ChainDefinitionError, LingLocalError
from tui.chains import EXAMPLE_TASK, TASK_INPUT, ChainRunner, load_chain_file
from tui.widgets.chain_step import StepPanel
from tui.widgets.status_bar import StatusBar

__all__ = ["ChainScreen"]

FROM_FILE = "__file__"
HINT = (
    "Pick a chain, give it a task and press Ctrl+R. Each step appears here as it runs: the\n"
    "prompt it was given (earlier results filled in), its output as it streams, its time\n"
    "and token counts. Esc stops the chain at any step (and goes back when nothing runs).\n"
    "Every run is saved: `ling-local chain show RUN_ID` prints it later.\n\n"
    f"A chain file defines `chain`; the task fills its input `{TASK_INPUT}`, e.g.\n\n"
    "    from ling_local.agents import Chain, Prompt\n"
    '    chain = Chain("review", [Prompt("draft", "Write {{ task }}"),\n'
    '                             Prompt("review", "Review:\\n{{ draft }}")])'
)


class ChainScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop_or_back", "Stop / back"),
        Binding("ctrl+r", "run", "Run", priority=True),
    ]

    def __init__(self, chains: dict[str, ChainRunner], file: str | None = None) -> None:
        super().__init__()
        self.chains = chains
        self.file = file
        self.panels: dict[int, StepPanel] = {}
        self.running = False
        self.current_run: AsyncRun | None = None
        """The latest run (its id stays on screen after it ends)."""

    def compose(self) -> ComposeResult:
        options = [(name, name) for name in self.chains] + [("Python file…", FROM_FILE)]
        first = FROM_FILE if self.file or not self.chains else next(iter(self.chains))
        yield Header()
        with Vertical(id="chain-form"):
            with Horizontal(classes="row"):
                yield Select(
                    options, value=first, allow_blank=False, id="chain-choice", compact=True
                )
                yield Input(
                    self.file or "", placeholder="path/to/chain.py", id="chain-file", compact=True
                )
            with Horizontal(classes="row"):
                yield Input(
                    EXAMPLE_TASK, placeholder="Task for the chain", id="chain-task", compact=True
                )
                yield Button("Run (Ctrl+R)", variant="primary", id="run", compact=True)
            yield Label("", id="chain-description")
        yield VerticalScroll(Static(HINT, id="steps-hint", markup=False), id="steps")
        yield Label("", id="chain-result")
        yield StatusBar(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "Agent chains"
        self._choice_changed()
        self.query_one("#chain-task", Input).focus()

    @on(Select.Changed, "#chain-choice")
    def _choice_changed(self) -> None:
        choice = self.query_one("#chain-choice", Select).value
        self.query_one("#chain-file", Input).display = choice == FROM_FILE
        runner = self.chains.get(str(choice))
        text = (
            runner.description
            if runner
            else f"A Python file that defines `chain = Chain(...)`; the task fills `{TASK_INPUT}`."
        )
        self.query_one("#chain-description", Label).update(Content(text))

    def _runner(self) -> ChainRunner:
        choice = str(self.query_one("#chain-choice", Select).value)
        if choice == FROM_FILE:
            path = self.query_one("#chain-file", Input).value.strip()
            if not path:
                raise ChainDefinitionError("give the path of a chain file")
            return load_chain_file(path)
        return self.chains[choice]

    def _result(self, text: str, state: str) -> None:
        label = self.query_one("#chain-result", Label)
        if self.current_run is not None:
            text = f"{text} · run {self.current_run.run_id}"
        label.update(Content(text))
        label.set_classes(f"-{state}")

    # ----------------------------------------------------------------- run / cancel
    @on(Button.Pressed, "#run")
    @on(Input.Submitted, "#chain-task")
    def action_run(self) -> None:
        if self.running:
            self.notify("The chain is running; Esc stops it.", severity="warning")
            return
        self.current_run = None
        try:
            runner = self._runner()
            task = self.query_one("#chain-task", Input).value.strip()
            self.current_run = runner.start(self.app.link.client, task)
        except LingLocalError as err:  # a bad chain file, a missing input
            self._result(err.message, "failed")
            return
        self.query_one("#steps", VerticalScroll).remove_children()
        self.panels = {}
        self._result(f"running {runner.name}…", "running")
        self.running = True
        self._run(self.current_run)

    @work(exclusive=True, group="chain")
    async def _run(self, run: AsyncRun) -> None:
        timer = self.set_interval(0.2, self._tick)
        try:
            async with aclosing(run.events()) as events:
                async for event in events:
                    await self._apply(event)
        except asyncio.CancelledError:
            where = f"after step {len(self.panels)}" if self.panels else "before any step"
            for panel in self.panels.values():
                if panel.state == "running":
                    await panel.end("cancelled", "cancelled")
                    where = f"at step {panel.index + 1}"
            self._result(f"cancelled {where}", "cancelled")
            self.query_one(StatusBar).show_numbers("chain cancelled")
            raise
        finally:
            timer.stop()
            self.running = False

    def _tick(self) -> None:
        for panel in self.panels.values():
            panel.tick()
        total = sum(len(p.output) for p in self.panels.values())
        if self.running:
            self.query_one(StatusBar).show_numbers(f"chain: {total} characters so far")

    async def _apply(self, event: Event) -> None:
        steps = self.query_one("#steps", VerticalScroll)
        match event:
            case RunStarted(chain=name):
                self._result(f"running {name}…", "running")
            case StepStarted(index, name, prompt, kind):
                panel = StepPanel(index, name, prompt, kind)
                self.panels[index] = panel
                await steps.mount(panel)
                steps.anchor()
            case Token(index, text):
                await self.panels[index].write(text)
            case StepRetry(index, attempt=attempt, reason=reason):
                await self.panels[index].retry(attempt, reason)
            case StepFinished(index=index):
                await self.panels[index].finish(event)
            case StepSkipped():
                pass  # only a resumed run skips steps, and the view never resumes one
            case ChainError(index, message):
                if index in self.panels:
                    await self.panels[index].end("failed", "failed")
                self._result(f"failed: {message}", "failed")
            case ChainFinished(outputs=outputs, seconds=seconds):
                self._result(f"finished: {len(outputs)} steps in {seconds:.2f} s", "finished")
                self.query_one(StatusBar).show_numbers(f"chain finished in {seconds:.2f} s")

    def action_stop_or_back(self) -> None:
        if self.running:
            self.workers.cancel_group(self, "chain")
        else:
            self.app.pop_screen()
