"""Request bodies of the OpenAI-compatible API, validated with pydantic.

Fields the OpenAI API has but ling-local cannot honour are refused with a clear 400 rather
than silently ignored; unknown extra fields are ignored (clients send many)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

__all__ = ["ChatCompletionRequest", "ChatMessage", "CompletionRequest", "StreamOptions"]

PriorityName = Literal["completion", "chat", "agent"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


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
    model: StrictStr | None = None
    max_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    n: Annotated[int, Field(strict=True, ge=1, le=1)] = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: StrictStr | list[StrictStr] | None = None
    seed: Annotated[int, Field(strict=True)] | None = None
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
    prompt: list[Annotated[int, Field(strict=True, ge=0)]] | StrictStr | list[StrictStr]
    suffix: StrictStr | None = None
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
