"""What a running chain reports, in order, as plain dataclasses.

A run yields ``RunStarted``, then per step either ``StepSkipped`` (finished in an earlier,
resumed run) or ``StepStarted``, any ``Token``s and ``StepRetry``s, and ``StepFinished``; it
ends with exactly one of ``ChainFinished`` or ``ChainError``. The TUI's chain view and the
``ling-local chain`` display are both drawn from this stream alone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ChainError",
    "ChainFinished",
    "Event",
    "RunStarted",
    "StepFinished",
    "StepRetry",
    "StepSkipped",
    "StepStarted",
    "Token",
    "event_to_json",
    "jsonable",
]


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    chain: str
    steps: list[str]
    """Every step's name, in order."""
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class StepStarted:
    index: int
    name: str
    prompt: str
    """The rendered prompt ('' for a function step)."""
    kind: str = "prompt"
    """'prompt' (a model call) or 'function' (a local Python step)."""


@dataclass(frozen=True, slots=True)
class Token:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class StepRetry:
    """The step is asked again: `reason` says why (a validation error, a busy daemon)."""

    index: int
    name: str
    attempt: int
    """The attempt about to start (2 = the first retry)."""
    reason: str


@dataclass(frozen=True, slots=True)
class StepFinished:
    index: int
    name: str
    output: Any
    """Text, a validated schema object, or what a function step returned."""
    seconds: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class StepSkipped:
    """A step that finished in an earlier run of this run id; its output comes from the log."""

    index: int
    name: str
    output: Any


@dataclass(frozen=True, slots=True)
class ChainError:
    """The run stopped at step `index` (-1: before any step). It can be resumed from there."""

    index: int
    message: str
    error_type: str = "agent_error"


@dataclass(frozen=True, slots=True)
class ChainFinished:
    run_id: str
    outputs: dict[str, Any]
    """Every step's output by step name."""
    seconds: float
    resumed_steps: list[str] = field(default_factory=list)

    @property
    def output(self) -> Any:
        """The last step's output."""
        return list(self.outputs.values())[-1] if self.outputs else None

    def __getitem__(self, step: str) -> Any:
        return self.outputs[step]


Event = (
    RunStarted
    | StepStarted
    | Token
    | StepRetry
    | StepFinished
    | StepSkipped
    | ChainError
    | ChainFinished
)


def jsonable(value: Any) -> Any:
    """`json.dumps` default: pydantic models, dataclasses, paths and sets as JSON data."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "__fspath__"):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def event_to_json(event: Event) -> str:
    """One JSON line: {"event": "<class name>", ...fields} (``chain run --jsonl``)."""
    data = {"event": type(event).__name__}
    data.update({f.name: getattr(event, f.name) for f in dataclasses.fields(event)})
    return json.dumps(data, default=jsonable, ensure_ascii=False)
