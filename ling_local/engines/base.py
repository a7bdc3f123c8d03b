"""The engine protocol: what the scheduler and the server need from any model engine.

An engine owns one model. It streams the tokens of one request as an async iterator of
`Delta`s (the last one carries `finish_reason` and `stats`), stops within one decode step
when the request is cancelled, and reports per-request stats. Engines that batch (SGLang)
may run several streams at once; the embedded engine steps the highest-priority one.
"""

from __future__ import annotations

import enum
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "Delta",
    "Engine",
    "EngineHealth",
    "EngineState",
    "FinishReason",
    "GenerationRequest",
    "GenerationStats",
    "Priority",
    "SamplingParams",
    "error_body_message",
]

FinishReason = Literal["stop", "length", "cancelled", "error"]


class Priority(enum.IntEnum):
    """Lower value runs first: keystroke latency beats chat, chat beats agents."""

    COMPLETION = 0
    CHAT = 1
    AGENT = 2

    @classmethod
    def parse(cls, value: str | int | Priority) -> Priority:
        if isinstance(value, str):
            return cls[value.upper()]
        return cls(value)


class EngineState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    """Benchmarks only: keep generating past EOS until max_tokens."""
    scope: tuple[int, bool] | None = None
    """Fill-in-the-middle: (indent, keep_newline) of the code after the cursor; the answer
    ends before a later line that goes back to that indentation (``detok.ScopeLimit``)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


_request_counter = itertools.count(1)


def new_request_id(prefix: str = "req") -> str:
    return f"{prefix}-{next(_request_counter)}"


@dataclass(slots=True)
class GenerationRequest:
    """One generation. `prompt_ids` is set when the daemon tokenized the prompt itself."""

    prompt: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prompt_ids: list[int] | None = None
    priority: Priority = Priority.CHAT
    request_id: str = field(default_factory=new_request_id)
    json_schema: dict | None = None
    """`response_format` as a JSON schema: the embedded engine and SGLang constrain decoding
    to it (a grammar); a remote server gets it as OpenAI's `response_format`."""
    messages: list[dict[str, str]] | None = None
    """The chat messages, for engines that apply the chat template themselves (remote)."""
    fim: tuple[str, str] | None = None
    """(prefix, suffix) of a fill-in-the-middle request, for engines that take them apart
    (a remote server's ``suffix`` field); `prompt` holds the FIM prompt built here."""
    first_token_ids: list[int] | None = None
    """Token healing: the first generated token must be one of these (engines that cannot
    restrict it ignore this and `heal_text`)."""
    heal_text: str = ""
    """Token healing: text dropped from the end of the prompt, which the first generated
    token re-creates; it is removed from the output."""
    cancel_event: threading.Event = field(default_factory=threading.Event)
    """Set to cancel; engines check it between decode steps (also from worker threads)."""
    queue_s: float = 0.0
    """Filled in by the scheduler: how long the request waited for the engine."""
    prep_s: float = 0.0
    """Filled in by the daemon: how long it took to parse the request and build and
    tokenize its prompt."""
    on_finish: Callable[[GenerationStats], None] | None = None
    """Called once with the final stats when the generation ends, even when nobody reads
    the stream any more (cancelled work is still accounted). May run on any thread."""

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()


@dataclass(slots=True)
class GenerationStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache instead of a forward pass."""
    completion_tokens: int = 0
    ttft_s: float | None = None
    """Engine-side time from start of work to the first token."""
    tpot_s: float | None = None
    """Mean time per output token after the first."""
    accept_length: float | None = None
    """Mean tokens gained per verify step when speculating (incl. the bonus token)."""
    verify_steps: int | None = None
    queue_s: float = 0.0
    """Time the request waited in the scheduler before the engine took it."""
    grammar_s: float | None = None
    """`response_format` on the embedded engine: time spent in the grammar (token masks
    and advancing it) over the whole generation."""
    finish_reason: FinishReason = "stop"
    trace: dict | None = None
    """Where the time to the first token went, by phase in ms (engines that trace it:
    the embedded engine's `Generation.trace`)."""

    def as_dict(self) -> dict:
        out = {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "ttft_ms": None if self.ttft_s is None else round(self.ttft_s * 1e3, 3),
            "tpot_ms": None if self.tpot_s is None else round(self.tpot_s * 1e3, 3),
            "accept_length": self.accept_length,
            "verify_steps": self.verify_steps,
            "queue_ms": round(self.queue_s * 1e3, 3),
            "grammar_ms": None if self.grammar_s is None else round(self.grammar_s * 1e3, 3),
            "finish_reason": self.finish_reason,
        }
        if self.trace:
            out["trace"] = self.trace
        return out


@dataclass(slots=True)
class Delta:
    """New text for the client. `n_tokens` counts the tokens behind it (several when a
    speculative verify step accepts many). The last delta of a stream has `finish_reason`
    and `stats` set."""

    text: str
    n_tokens: int = 0
    finish_reason: FinishReason | None = None
    stats: GenerationStats | None = None
    error: str = ""
    """Why the stream ended, when finish_reason is 'error'."""
    token_ids: list[int] = field(default_factory=list)
    """The ids behind `text`, where the engine knows them."""

    def merged(self, later: Delta) -> Delta:
        """This delta followed by a later one, as one (the relay coalesces bursts)."""
        return Delta(
            self.text + later.text,
            self.n_tokens + later.n_tokens,
            later.finish_reason,
            later.stats,
            later.error,
            self.token_ids + later.token_ids,
        )


@dataclass(slots=True)
class EngineHealth:
    state: EngineState
    engine: str
    model: str
    detail: str = ""
    running: int = 0
    """Generations in progress inside the engine right now."""
    decode: dict[str, str] | None = None
    """The embedded engine's decode step once loaded: {"kernels": "triton" | "torch",
    "why": ...}; None for engines that do not choose one."""


@runtime_checkable
class Engine(Protocol):
    """Every engine implements this. Tokenizer methods may return None when the engine
    cannot tokenize locally (a remote server without a local tokenizer)."""

    kind: str
    model_name: str
    context_length: int
    supports_preemption: bool
    """True when a higher-priority stream pauses lower ones between tokens (embedded)."""
    supports_concurrency: bool
    """True when the engine can run several streams at once (batching engines)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> EngineHealth: ...

    def tokenize(self, text: str) -> list[int] | None: ...

    def detokenize(self, ids: list[int]) -> str | None: ...

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]: ...

    async def abort(self, request: GenerationRequest) -> None:
        """Cancel a running request; its stream ends with finish_reason 'cancelled'."""
        ...


def error_body_message(body: bytes) -> str:
    """The message of an OpenAI/SGLang-style error body ({"error": {"message": ...}} or
    {"error": "..."}), else the start of the body as text: what an engine reports when its
    server answers with an HTTP error status."""
    try:
        err = json.loads(body).get("error")
        return err.get("message", str(err)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace")[:500]
