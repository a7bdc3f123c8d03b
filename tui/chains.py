"""Agent chains as the chain view sees them: an async iterator of typed events.

The view (``tui/screens/chains.py``) depends only on the event types and on `ChainRunner`
below. `SerialChain` is a minimal runner that talks to the daemon through `AsyncClient`
directly; when ``ling_local.agents`` (the scripting API) lands, a runner that wraps its chains
and maps its events onto these types replaces it in `load_chain_file` and `BUILTIN_CHAINS`,
and the view stays as it is.

Cancelling is closing the iterator (``aclosing``): the runner closes its stream, which
cancels the generation in the daemon.
"""

from __future__ import annotations

import re
import runpy
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ling_local.client import AsyncClient
from ling_local.errors import ConfigError, LingLocalError

__all__ = [
    "BUILTIN_CHAINS",
    "ChainError",
    "ChainEvent",
    "ChainFinished",
    "ChainRunner",
    "PromptStep",
    "SerialChain",
    "StepFinished",
    "StepStarted",
    "Token",
    "load_chain_file",
]


# ----------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class StepStarted:
    index: int
    name: str
    prompt: str
    """The prompt exactly as sent (earlier results already filled in)."""


@dataclass(frozen=True, slots=True)
class Token:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class StepFinished:
    index: int
    name: str
    output: str
    seconds: float
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class ChainError:
    index: int | None
    """The step that failed, or None when the chain failed before any step."""
    message: str


@dataclass(frozen=True, slots=True)
class ChainFinished:
    outputs: dict[str, str]
    """Each step's result by step name, in order."""
    seconds: float


ChainEvent = StepStarted | Token | StepFinished | ChainError | ChainFinished


@runtime_checkable
class ChainRunner(Protocol):
    """Anything the chain view can run."""

    name: str
    description: str

    def events(self, client: AsyncClient, task: str) -> AsyncIterator[ChainEvent]:
        """Run the chain on `task`; closing the iterator early must cancel the work."""
        ...


# ----------------------------------------------------------------------------- serial runner
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class PromptStep:
    name: str
    template: str
    """``{task}`` and ``{<earlier step name>}`` are filled in; other braces stay as they are."""
    max_tokens: int | None = None
    """This step's limit (default: the chain's)."""


@dataclass(slots=True)
class SerialChain:
    """Steps run one after another; each step's prompt may use every earlier result."""

    name: str
    steps: list[PromptStep]
    description: str = ""
    max_tokens: int = 256
    temperature: float = 0.2
    options: dict[str, Any] = field(default_factory=dict)
    """Extra request fields for every step (e.g. ``seed``, ``ignore_eos``)."""

    def __post_init__(self) -> None:
        if not self.steps:
            raise ConfigError(f"chain {self.name!r} has no steps")
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names) or "task" in names:
            raise ConfigError(f"chain {self.name!r}: step names must be unique and not 'task'")

    async def events(self, client: AsyncClient, task: str) -> AsyncIterator[ChainEvent]:
        started = time.perf_counter()
        outputs: dict[str, str] = {}
        for index, step in enumerate(self.steps):
            prompt = fill(step.template, {"task": task, **outputs})
            yield StepStarted(index, step.name, prompt)
            step_started = time.perf_counter()
            try:
                stream = await client.stream_chat(
                    [{"role": "user", "content": prompt}],
                    max_tokens=step.max_tokens or self.max_tokens,
                    temperature=self.temperature,
                    priority="agent",
                    **self.options,
                )
                try:
                    async for chunk in stream:
                        if chunk.text:
                            yield Token(index, chunk.text)
                finally:
                    await stream.aclose()
            except LingLocalError as err:
                yield ChainError(index, err.message)
                return
            outputs[step.name] = stream.text
            yield StepFinished(
                index,
                step.name,
                stream.text,
                time.perf_counter() - step_started,
                stream.usage.prompt_tokens,
                stream.usage.completion_tokens,
            )
        yield ChainFinished(outputs, time.perf_counter() - started)


def fill(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


# ----------------------------------------------------------------------------- built-ins
BUILTIN_CHAINS: dict[str, SerialChain] = {
    "plan-and-code": SerialChain(
        "plan-and-code",
        [
            PromptStep("plan", "Write a short numbered plan (at most 5 steps) for: {task}"),
            PromptStep(
                "code",
                "Task: {task}\n\nPlan:\n{plan}\n\nWrite the Python code that follows the plan.",
            ),
        ],
        description="Two steps: plan the task, then write code that follows the plan.",
    ),
    "code-review-fix": SerialChain(
        "code-review-fix",
        [
            PromptStep("code", "Write Python code for: {task}"),
            PromptStep("review", "Review this code for bugs, briefly:\n\n{code}"),
            PromptStep("fix", "Code:\n{code}\n\nReview:\n{review}\n\nWrite the corrected code."),
        ],
        description="Three steps: write code, review it, fix what the review found.",
    ),
}
EXAMPLE_TASK = "a function that tells whether a string is a palindrome"


def load_chain_file(path: str | Path) -> ChainRunner:
    """Load a chain from a Python file that defines ``chain``.

    ``chain`` may be any `ChainRunner` (e.g. a `SerialChain`) or a list of ``(name,
    template)`` pairs. The file runs as a script, like ``ling-local chain run FILE`` will.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"chain file not found: {file}")
    try:
        namespace = runpy.run_path(str(file), run_name="__chain__")
    except Exception as err:  # the user's script: report it, do not crash the TUI
        raise ConfigError(f"{file} failed to load: {type(err).__name__}: {err}") from None
    chain = namespace.get("chain")
    if isinstance(chain, ChainRunner):
        return chain
    if isinstance(chain, list | tuple) and all(
        isinstance(s, list | tuple) and len(s) == 2 for s in chain
    ):
        steps = [PromptStep(str(n), str(t)) for n, t in chain]
        return SerialChain(file.stem, steps, description=f"from {file}")
    raise ConfigError(
        f"{file} must define `chain`: a chain object or a list of (name, template) pairs"
    )
