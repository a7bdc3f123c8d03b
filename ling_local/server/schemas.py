"""Request bodies of the OpenAI-compatible API: the one place where a request's limits and
defaults are checked. What passes here is trusted by the prompt builder, the scheduler and
the engines.

Fields the OpenAI API has but ling-local cannot honour are refused with a clear 400 rather
than silently ignored; unknown extra fields are ignored (clients send many).

The profile's limits (largest ``max_tokens``, most stop strings) and defaults (``max_tokens``,
``temperature``, ``top_p`` per route) are bound into per-daemon subclasses by
`request_models`, so that ``/openapi.json`` shows the bounds the daemon enforces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    create_model,
    field_validator,
    model_validator,
)

from ling_local.config import Profile

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "RequestModels",
    "StreamOptions",
    "request_models",
]

PriorityName = Literal["completion", "chat", "agent"]

#: Below this a temperature is greedy decoding: dividing logits by a subnormal number
#: overflows to inf (vLLM draws the same line).
GREEDY_BELOW = 1e-5
#: A seed is a signed 64-bit integer: what every engine takes (torch's generator, SGLang's
#: sampling_seed, OpenAI-compatible servers).
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
#: Token ids are int32 in every engine; the vocabulary bound is checked once the engine is up.
TOKEN_ID_MAX = 2**31 - 1

TokenCount = Annotated[int, Field(strict=True, ge=1)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)


class StreamOptions(_Body):
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False
    """vLLM/SGLang extension: token counts so far on every chunk (benchmarks use it to
    spread inter-token latency over the tokens of a multi-token chunk)."""


class JsonSchemaSpec(_Body):
    name: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class _Common(_Body):
    # Defaults of the route, set by `request_models` from the profile.
    default_max_tokens: ClassVar[int] = 64
    default_temperature: ClassVar[float] = 0.0
    default_top_p: ClassVar[float] = 1.0

    model: StrictStr | None = None
    max_tokens: TokenCount | None = None
    """Tokens to generate at most (the profile's default when absent)."""
    max_completion_tokens: TokenCount | None = None
    """OpenAI's newer name for max_tokens (max_tokens wins when both are given)."""
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    """0 (or below 1e-5) is greedy decoding."""
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    n: Annotated[int, Field(strict=True, ge=1, le=1)] = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: StrictStr | list[StrictStr] | None = None
    seed: Annotated[int, Field(strict=True, ge=SEED_MIN, le=SEED_MAX)] | None = None
    # ling-local extensions (send them through the openai client's `extra_body`)
    priority: PriorityName | None = None
    """Scheduling class; default: completion for /v1/completions, chat for chat."""
    supersede_key: StrictStr | None = None
    """A newer request with the same key cancels this one (e.g. an editor document URI)."""
    ignore_eos: StrictBool = False
    """Benchmarks: generate exactly max_tokens tokens."""
    response_format: ResponseFormat | None = None
    """Structured output (OpenAI's chat field; accepted on completions too, as vLLM does):
    passed to engines with constrained decoding, ignored by the others."""

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str]:
        if value is None:
            return []
        items = [value] if isinstance(value, str) else value
        if any(not s for s in items):
            raise ValueError("stop strings must not be empty")
        return items

    @field_validator("temperature")
    @classmethod
    def _greedy_when_tiny(cls, value: float | None) -> float | None:
        return 0.0 if value is not None and value < GREEDY_BELOW else value

    @model_validator(mode="after")
    def _fill_defaults(self) -> _Common:
        if self.max_tokens is None:
            self.max_tokens = self.max_completion_tokens or self.default_max_tokens
        if self.temperature is None:
            self.temperature = self.default_temperature
        if self.top_p is None:
            self.top_p = self.default_top_p
        return self

    def stop_list(self) -> list[str]:
        return list(self.stop or [])  # type: ignore[arg-type]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)

    def json_schema(self) -> dict[str, Any] | None:
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "object"}
        return (fmt.json_schema.schema_ if fmt.json_schema else None) or {"type": "object"}


class CompletionRequest(_Common):
    # Token ids first: pydantic tries the members in order, and a failed list[str] attempt
    # on a long id list cost more than the whole validation (65 of 90 us for 512 ids).
    prompt: (
        list[Annotated[int, Field(strict=True, ge=0, le=TOKEN_ID_MAX)]]
        | StrictStr
        | list[StrictStr]
    )
    suffix: StrictStr | None = None
    """Fill-in-the-middle: the text after the cursor."""
    echo: StrictBool = False
    logprobs: Any = None
    best_of: Annotated[int, Field(strict=True, ge=1, le=1)] | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("send one prompt per request (got a list of several)")
            return value[0]
        if isinstance(value, list) and not value:
            raise ValueError("the prompt is empty")
        return value

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise ValueError("echo is not supported")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: Any) -> Any:
        if value not in (None, 0, False):
            raise ValueError("logprobs are not supported")
        return value

    @model_validator(mode="after")
    def _something_to_complete(self) -> CompletionRequest:
        if isinstance(self.prompt, list):
            if self.suffix is not None:
                raise ValueError("suffix needs a text prompt")
        elif not self.prompt and not self.suffix:
            raise ValueError("the prompt is empty")
        return self


class ContentPart(_Body):
    type: Literal["text"]
    text: StrictStr


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Common):
    default_max_tokens: ClassVar[int] = 512
    default_temperature: ClassVar[float] = 0.7

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Any] | None = None
    logprobs: StrictBool | None = None

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError("tool calling is not supported by this daemon")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("logprobs are not supported")
        return value

    @model_validator(mode="after")
    def _something_to_answer(self) -> ChatCompletionRequest:
        if not any(m.text() for m in self.messages):
            raise ValueError("every message is empty")
        return self


@dataclass(frozen=True, slots=True)
class RequestModels:
    """The two request bodies with one daemon's limits and defaults bound in."""

    completion: type[CompletionRequest]
    chat: type[ChatCompletionRequest]


def request_models(profile: Profile) -> RequestModels:
    """Subclasses of the request bodies that enforce `profile`'s limits and fill in its
    defaults (the only place either is applied)."""
    limits, sampling = profile.limits, profile.sampling
    bounded = Annotated[int, Field(strict=True, ge=1, le=limits.max_tokens)]
    stops = Annotated[list[StrictStr], Field(max_length=limits.max_stop)]

    def bind(base: type[_Common], max_tokens: int, temperature: float) -> Any:
        model = create_model(
            base.__name__,
            __base__=base,
            __module__=__name__,
            max_tokens=(
                bounded | None,
                Field(
                    default=None, description=f"Tokens to generate at most; default {max_tokens}."
                ),
            ),
            max_completion_tokens=(
                bounded | None,
                Field(default=None, description="OpenAI's newer name for max_tokens."),
            ),
            stop=(
                StrictStr | stops | None,
                Field(default=None, description=f"At most {limits.max_stop} stop strings."),
            ),
        )
        model.default_max_tokens = max_tokens
        model.default_temperature = temperature
        model.default_top_p = sampling.top_p
        return model

    return RequestModels(
        completion=bind(CompletionRequest, sampling.completion_max_tokens, sampling.temperature),
        chat=bind(ChatCompletionRequest, sampling.chat_max_tokens, sampling.chat_temperature),
    )
