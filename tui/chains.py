"""The chains the TUI's chain view offers: `ling_local.agents` chains, fed the typed task.

The view (``tui/screens/chains.py``) runs a scripting-API `Chain` as it is and draws the
API's own events (``ling_local.agents.events``); the one thing this module adds is how the
task typed in the view becomes the run's inputs (`ChainRunner.inputs_for`). Runs are the
same durable runs ``ling-local chain run`` makes: they go to the run log, so
``ling-local chain show RUN_ID`` works on them.

Cancelling is leaving the run's ``events()`` loop (the view's worker is cancelled): the
running step's HTTP stream is closed, which cancels the generation in the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ling_local.agents.chain import Chain
from ling_local.agents.loader import load_chain
from ling_local.agents.run import AsyncRun
from ling_local.agents.steps import Prompt
from ling_local.client import AsyncClient

__all__ = ["BUILTIN_CHAINS", "EXAMPLE_TASK", "TASK_INPUT", "ChainRunner", "load_chain_file"]

TASK_INPUT = "task"
"""The input the typed task fills, when the chain uses an input of that name."""

EXAMPLE_TASK = "a function that tells whether a string is a palindrome"


@dataclass(slots=True)
class ChainRunner:
    """A chain the view can run, with the default inputs its file gave."""

    chain: Chain
    defaults: dict[str, Any] = field(default_factory=dict)
    """The chain file's ``inputs = {...}``."""

    @property
    def name(self) -> str:
        return self.chain.name

    @property
    def task_input(self) -> str | None:
        """Where the typed task goes: the input ``task`` if the chain uses it, else the only
        input the chain needs that has no default; None when neither exists."""
        needed = self.chain.inputs
        if TASK_INPUT in needed:
            return TASK_INPUT
        open_inputs = sorted(needed - set(self.defaults))
        return open_inputs[0] if len(open_inputs) == 1 else None

    @property
    def description(self) -> str:
        text = self.chain.description or f"{len(self.chain.steps)} steps"
        target = self.task_input
        if target is None:
            return f"{text} (takes no task: its inputs come from the file)"
        return text if target == TASK_INPUT else f"{text} (the task is the input {target!r})"

    def inputs_for(self, task: str) -> dict[str, Any]:
        """The run's inputs: the file's defaults, and the typed task (when there is one)."""
        inputs = dict(self.defaults)
        target = self.task_input
        if target is not None and (task or target not in inputs):
            inputs[target] = task or EXAMPLE_TASK
        return inputs

    def start(self, client: AsyncClient, task: str, **options: Any) -> AsyncRun:
        """A new run on `client` (it starts when its events are iterated). Raises
        ChainDefinitionError when an input is missing. `options` go to `Chain.astart`
        (``run_log=``, ``run_id=``)."""
        return self.chain.astart(self.inputs_for(task), client=client, **options)


def load_chain_file(path: str | Path) -> ChainRunner:
    """A chain file as ``ling-local chain run`` loads it: it defines ``chain = Chain(...)``
    and optionally ``inputs = {...}``. Raises ChainDefinitionError with the reason."""
    chain, defaults = load_chain(path)
    return ChainRunner(chain, defaults)


# ----------------------------------------------------------------------------- built-ins
def _builtin(name: str, description: str, steps: list[Prompt]) -> ChainRunner:
    return ChainRunner(Chain(name, steps, description=description))


BUILTIN_CHAINS: dict[str, ChainRunner] = {
    runner.name: runner
    for runner in (
        _builtin(
            "plan-and-code",
            "Two steps: plan the task, then write code that follows the plan.",
            [
                Prompt(
                    "plan",
                    "Write a short numbered plan (at most 5 steps) for: {{ task }}",
                    temperature=0.2,
                ),
                Prompt(
                    "code",
                    "Task: {{ task }}\n\nPlan:\n{{ plan }}\n\n"
                    "Write the Python code that follows the plan.",
                    temperature=0.2,
                ),
            ],
        ),
        _builtin(
            "code-review-fix",
            "Three steps: write code, review it, fix what the review found.",
            [
                Prompt("code", "Write Python code for: {{ task }}", temperature=0.2),
                Prompt(
                    "review", "Review this code for bugs, briefly:\n\n{{ code }}", temperature=0.2
                ),
                Prompt(
                    "fix",
                    "Code:\n{{ code }}\n\nReview:\n{{ review }}\n\nWrite the corrected code.",
                    temperature=0.2,
                ),
            ],
        ),
    )
}
