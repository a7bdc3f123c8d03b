"""The OpenAI-compatible API: /v1/models here, and what /v1/completions and
/v1/chat/completions do with a request (served on plain ASGI by `fastpath`).

The wire format is OpenAI's exactly (SSE ``data:`` lines, ``[DONE]``, ``usage``), so the
official clients work unchanged. Each response also carries a ``ling`` object with the
engine's timings (TTFT, TPOT, queue wait, cached tokens, accept length)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.sse import format_sse_event
from pydantic import ValidationError

from ling_local.engines.base import Delta, GenerationRequest, GenerationStats, Priority
from ling_local.errors import GenerationCancelled, LingLocalError, RequestError
from ling_local.prompts import BuiltPrompt
from ling_local.server.schemas import ChatCompletionRequest, CompletionRequest, _Body
from ling_local.server.state import DaemonState

__all__ = ["Prepared", "collect", "parse_body", "prepare_chat", "prepare_completion", "router"]

router = APIRouter()
log = logging.getLogger(__name__)

_DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _state(request: Request) -> DaemonState:
    return request.app.state.daemon


def _usage(stats: GenerationStats | None) -> dict[str, Any]:
    s = stats or GenerationStats()
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
    }


def _error_event(message: str, error_type: str) -> bytes:
    return format_sse_event(data_str=_dumps({"error": {"message": message, "type": error_type}}))


def _finish_error(delta: Delta) -> LingLocalError | None:
    if delta.finish_reason == "cancelled":
        return GenerationCancelled("the generation was cancelled")
    if delta.finish_reason == "error":
        return LingLocalError(delta.error or "the engine failed while generating")
    return None


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    st = _state(request)
    return {
        "object": "list",
        "data": [
            {
                "id": st.model_name,
                "object": "model",
                "created": int(st.started),
                "owned_by": "ling-local",
                "context_length": st.engine.context_length,
                "max_model_len": st.engine.context_length,
                "vocab_size": getattr(getattr(st.engine, "tokenizer", None), "vocab_size", None),
                "engine": st.engine.kind,
                "profile": st.profile.name,
            }
        ],
    }


def parse_body(raw: bytes, model: type[_Body]) -> _Body:
    """Read and validate a JSON body whatever its Content-Type (curl users forget it).

    The one parser every generation request goes through: pydantic's JSON parser reads
    and validates in one pass, and its verdict on the JSON itself is final. It refuses
    what Python's `json` would let through to fail later: nesting past its recursion limit,
    numbers past 4,300 digits, lone surrogates (in ``\\u`` escapes or raw bytes) and invalid
    UTF-8. Messages name the field, never echo the input."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as err:
        errors = err.errors(include_input=False, include_url=False)
    if errors and errors[0].get("type") == "json_invalid":
        raise RequestError(_json_problem(raw, errors[0])) from None
    if errors and errors[0].get("type") == "model_type" and not errors[0].get("loc"):
        raise RequestError("the request body must be a JSON object")
    message, param = describe_validation_error(errors)
    raise RequestError(message, param=param)


def _json_problem(raw: bytes, error: dict) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"the request body is not valid UTF-8 (byte {err.start})"
    detail = (error.get("ctx") or {}).get("error")
    message = "the request body is not valid JSON" + (f": {detail}" if detail else "")
    if detail and ("surrogate" in detail or "hex escape" in detail):
        message += " (strings must be valid Unicode: a lone UTF-16 surrogate is not)"
    return message


def describe_validation_error(errors: list[dict]) -> tuple[str, str | None]:
    """pydantic's errors as one message naming the fields, and the first field."""
    problems, param = [], None
    for item in errors:
        loc = [str(p) for p in item.get("loc", ()) if p != "body"]
        if item.get("type") == "json_invalid":
            return "the request body is not valid JSON", None
        field = ".".join(loc)
        param = param or (loc[0] if loc else None)
        msg = item.get("msg", "invalid value").removeprefix("Value error, ")
        problems.append(f"{field}: {msg}" if field else msg)
    return "; ".join(problems) or "invalid request", param


@dataclass(slots=True)
class Prepared:
    """A validated generation request and how to answer it."""

    gen: GenerationRequest
    key: str | None
    stream: bool
    relay: Callable[[], AsyncIterator[bytes]]
    """The SSE byte stream (when `stream`)."""
    answer: Callable[[str, Delta], dict[str, Any]]
    """The JSON body of a non-streamed answer from the text and the last delta."""


def prepare_completion(st: DaemonState, raw: bytes) -> Prepared:
    body = parse_body(raw, st.requests.completion)
    assert isinstance(body, CompletionRequest)
    st.check_model(body.model)
    prompts = st.ready_prompts()
    if isinstance(body.prompt, list):  # token ids
        vocab = getattr(getattr(st.engine, "tokenizer", None), "vocab_size", None)
        if vocab is not None and max(body.prompt) >= vocab:
            raise RequestError(f"prompt token ids must be below {vocab}", param="prompt")
        built = BuiltPrompt("", list(body.prompt), prompts.stop, prompts.stop_token_ids)
    else:
        built = prompts.completion(body.prompt, body.suffix)
    sampling = st.sampling(body, built)
    fim = (
        (body.prompt, body.suffix)
        if isinstance(body.prompt, str) and body.suffix is not None
        else None
    )
    gen = st.request(
        built, sampling, body.priority, Priority.COMPLETION, body.json_schema(), fim=fim
    )
    st.scheduler.check_capacity()
    rid = f"cmpl-{uuid.uuid4().hex[:24]}"
    head = _dumps(
        {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": st.model_name,
        }
    )[:-1]
    created = int(time.time())

    def answer(text: str, last: Delta) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": st.model_name,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason}
            ],
            "usage": _usage(last.stats),
            "ling": last.stats.as_dict() if last.stats else None,
        }

    return Prepared(
        gen,
        body.supersede_key,
        body.stream,
        lambda: _stream_completion(st, gen, body.supersede_key, head, _usage_mode(body)),
        answer,
    )


def prepare_chat(st: DaemonState, raw: bytes) -> Prepared:
    body = parse_body(raw, st.requests.chat)
    assert isinstance(body, ChatCompletionRequest)
    st.check_model(body.model)
    prompts = st.ready_prompts()
    messages = [
        {
            "role": "system" if m.role == "developer" else ("user" if m.role == "tool" else m.role),
            "content": m.text(),
        }
        for m in body.messages
    ]
    built = prompts.chat(messages)
    sampling = st.sampling(body, built)
    gen = st.request(
        built, sampling, body.priority, Priority.CHAT, body.json_schema(), messages=messages
    )
    st.scheduler.check_capacity()
    rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    head = _dumps(
        {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": st.model_name,
        }
    )[:-1]
    created = int(time.time())

    def answer(text: str, last: Delta) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": st.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": last.finish_reason,
                }
            ],
            "usage": _usage(last.stats),
            "ling": last.stats.as_dict() if last.stats else None,
        }

    return Prepared(
        gen,
        body.supersede_key,
        body.stream,
        lambda: _stream_chat(st, gen, body.supersede_key, head, _usage_mode(body)),
        answer,
    )


# --------------------------------------------------------------------------- relays
async def collect(st: DaemonState, prepared: Prepared) -> tuple[str, Delta]:
    """Run a non-streamed request to its end; raise when it did not finish normally."""
    parts: list[str] = []
    last = Delta("")
    async with aclosing(st.scheduler.stream(prepared.gen, key=prepared.key)) as deltas:
        async for delta in deltas:
            parts.append(delta.text)
            last = delta
    if (err := _finish_error(last)) is not None:
        raise err
    return "".join(parts), last


_USAGE_LAST, _USAGE_EVERY_CHUNK = 1, 2


def _usage_mode(body: CompletionRequest | ChatCompletionRequest) -> int:
    """Bit set: a usage chunk at the end (include_usage), token counts on every chunk."""
    return (_USAGE_LAST if body.include_usage else 0) | (
        _USAGE_EVERY_CHUNK if body.continuous_usage else 0
    )


def _running_usage(prompt_tokens: int, generated: int) -> str:
    return (
        f',"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{generated},'
        f'"total_tokens":{prompt_tokens + generated}}}'
    )


def _chunk(head: str, choice: str, extra: str = "") -> bytes:
    return b"data: " + f'{head},"choices":[{choice}]{extra}}}'.encode() + b"\n\n"


async def _stream_completion(
    st: DaemonState, gen: GenerationRequest, key: str | None, head: str, usage: int
) -> AsyncIterator[bytes]:
    def choice(text: str, finish: str | None) -> str:
        return (
            f'{{"index":0,"text":{_dumps(text)},"logprobs":null,"finish_reason":{_dumps(finish)}}}'
        )

    async for out in _relay(st, gen, key, head, usage, choice):
        yield out


async def _stream_chat(
    st: DaemonState, gen: GenerationRequest, key: str | None, head: str, usage: int
) -> AsyncIterator[bytes]:
    first = True

    def choice(text: str, finish: str | None) -> str:
        nonlocal first
        role = '"role":"assistant",' if first else ""
        first = False
        return (
            f'{{"index":0,"delta":{{{role}"content":{_dumps(text)}}},"logprobs":null,'
            f'"finish_reason":{_dumps(finish)}}}'
        )

    async for out in _relay(st, gen, key, head, usage, choice):
        yield out


async def _relay(
    st: DaemonState, gen: GenerationRequest, key: str | None, head: str, usage: int, choice
) -> AsyncIterator[bytes]:
    """Engine deltas -> SSE chunks. Runs until the stream ends or the client goes away;
    starlette cancels this generator on disconnect, and closing the scheduler stream then
    cancels the generation in the engine."""
    every_chunk = usage & _USAGE_EVERY_CHUNK
    prompt_tokens = len(gen.prompt_ids or ())
    generated = 0
    try:
        async with aclosing(st.scheduler.stream(gen, key=key)) as deltas:
            async for delta in deltas:
                if delta.finish_reason is None:
                    extra = ""
                    if every_chunk:
                        generated += delta.n_tokens
                        extra = _running_usage(prompt_tokens, generated)
                    yield _chunk(head, choice(delta.text, None), extra)
                    continue
                if (err := _finish_error(delta)) is not None:
                    yield _error_event(err.message, err.error_type) + _DONE
                    return
                stats = delta.stats.as_dict() if delta.stats else None
                extra = f',"ling":{_dumps(stats)}'
                if every_chunk:
                    extra += f',"usage":{_dumps(_usage(delta.stats))}'
                tail = _chunk(head, choice(delta.text, delta.finish_reason), extra)
                if usage & _USAGE_LAST:
                    tail += (
                        b"data: "
                        + f'{head},"choices":[],"usage":{_dumps(_usage(delta.stats))}}}'.encode()
                        + b"\n\n"
                    )
                # One write for the last text, the usage and [DONE]: a socket write (and
                # the client's wake-up) per event is the relay's main cost.
                yield tail + _DONE
                return
        yield _DONE
    except LingLocalError as err:
        yield _error_event(err.message, err.error_type) + _DONE
    except Exception as err:  # the stream still ends with an event the client can read
        log.exception("generation failed")
        yield _error_event(f"internal error: {type(err).__name__}", "server_error") + _DONE
