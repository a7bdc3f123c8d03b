"""The SDK's wire format: result types, request bodies, SSE parsing and error mapping,
shared by the sync and async clients in `ling_local.client`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ling_local import discovery
from ling_local.errors import (
    APIStatusError,
    AuthenticationError,
    ContextLengthExceeded,
    DaemonUnavailable,
    EngineNotReady,
    GenerationCancelled,
    LingLocalError,
    Overloaded,
    PermissionDenied,
    RequestError,
)

DEFAULT_URL = "http://127.0.0.1:8741"


# ------------------------------------------------------------------------- result types
@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass(slots=True)
class Timings:
    """Engine-side numbers the daemon reports with the last chunk."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    queue_ms: float | None = None
    accept_length: float | None = None

    @classmethod
    def from_wire(cls, data: dict | None) -> Timings | None:
        if not data:
            return None
        return cls(
            data.get("ttft_ms"),
            data.get("tpot_ms"),
            data.get("queue_ms"),
            data.get("accept_length"),
        )


@dataclass(slots=True)
class Completion:
    text: str
    finish_reason: str | None
    usage: Usage
    timings: Timings | None = None
    id: str = ""


@dataclass(slots=True)
class Chunk:
    text: str
    finish_reason: str | None = None


@dataclass(slots=True)
class Health:
    status: str
    state: str
    engine: str
    model: str
    profile: str
    running: int = 0
    queued: int = 0
    engine_running: int = 0
    detail: str = ""
    version: str = ""
    decode: dict | None = None
    """The embedded engine's decode step: {"kernels": ..., "why": ...} (None otherwise)."""

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(slots=True)
class ModelInfo:
    id: str
    context_length: int | None = None
    engine: str | None = None
    profile: str | None = None
    raw: dict = field(default_factory=dict)


# ------------------------------------------------------------------------- wire helpers
def _resolve(base_url: str | None, token: str | None) -> tuple[str, str | None, str | None]:
    """-> (http base url, unix socket path or None, token)."""
    url = base_url or discovery.daemon_url() or DEFAULT_URL
    uds = None
    if url.startswith("unix:"):
        uds, url = url.removeprefix("unix:"), "http://localhost"
    return url.rstrip("/"), uds, token or discovery.read_token()


def _error_from_response(status: int, body: bytes | str) -> LingLocalError:
    try:
        err = json.loads(body)["error"]
        message, kind = err.get("message", ""), err.get("type", "error")
    except (ValueError, KeyError, TypeError):
        message, kind = (
            (body.decode("utf-8", "replace") if isinstance(body, bytes) else body),
            "error",
        )
    message = message or f"HTTP {status}"
    return _error(status, message, kind)


def _error(status: int, message: str, kind: str) -> LingLocalError:
    if status == 401:
        return AuthenticationError(message, status_code=status, error_type=kind)
    if status == 403:
        return PermissionDenied(message, status_code=status, error_type=kind)
    if kind == "context_length_exceeded":
        return ContextLengthExceeded(message)
    if kind == "cancelled" or status == 409:
        return GenerationCancelled(message)
    if status == 429:
        return Overloaded(message)
    if status == 503 or kind.startswith("engine"):
        return EngineNotReady(message)
    if 400 <= status < 500:
        return RequestError(message)
    return APIStatusError(message, status_code=status, error_type=kind)


def _unavailable(url: str, err: Exception) -> DaemonUnavailable:
    return DaemonUnavailable(
        f"cannot reach the ling-local daemon at {url} ({type(err).__name__}); "
        "start it with `ling-local serve`"
    )


def _body(
    prompt_or_messages: Any, kind: str, stream: bool, options: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"messages" if kind == "chat" else "prompt": prompt_or_messages}
    for name, value in options.items():
        if value is not None:
            body["supersede_key" if name == "key" else name] = value
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


class _StreamState:
    """Parses SSE lines of one streamed response (shared by sync and async streams)."""

    def __init__(self, kind: str, started: float) -> None:
        self.kind = kind
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.timings: Timings | None = None
        self.id = ""
        self.done = False
        self.started = started
        """`time.perf_counter()` just before the request was sent."""
        self.first_chunk_s: float | None = None
        """Client-side time to the first text chunk, from before the request was sent (so
        it covers what the user waits for: connecting, queueing and prefill)."""

    def parse(self, line: str) -> Chunk | None:
        if not line.startswith("data:"):
            return None
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return None
        obj = json.loads(data)
        if "error" in obj:
            err = obj["error"]
            raise _error(200, err.get("message", "stream failed"), err.get("type", "error"))
        self.id = obj.get("id", self.id)
        if obj.get("usage"):
            u = obj["usage"]
            self.usage = Usage(
                u.get("prompt_tokens", 0),
                u.get("completion_tokens", 0),
                (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            )
        if "ling" in obj:
            self.timings = Timings.from_wire(obj["ling"])
        choices = obj.get("choices") or []
        if not choices:
            return None
        c = choices[0]
        text = (
            c.get("text", "")
            if self.kind == "complete"
            else ((c.get("delta") or {}).get("content") or "")
        )
        finish = c.get("finish_reason")
        if finish:
            self.finish_reason = finish
        if not text and not finish:
            return None
        if text:
            if self.first_chunk_s is None:
                self.first_chunk_s = time.perf_counter() - self.started
            self.parts.append(text)
        return Chunk(text, finish)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def result(self) -> Completion:
        return Completion(self.text, self.finish_reason, self.usage, self.timings, self.id)


def _completion_from_json(data: dict, kind: str) -> Completion:
    choice = data["choices"][0]
    text = choice["text"] if kind == "complete" else (choice["message"].get("content") or "")
    u = data.get("usage") or {}
    usage = Usage(
        u.get("prompt_tokens", 0),
        u.get("completion_tokens", 0),
        (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
    )
    return Completion(
        text,
        choice.get("finish_reason"),
        usage,
        Timings.from_wire(data.get("ling")),
        data.get("id", ""),
    )


def _health(data: dict) -> Health:
    keys = Health.__dataclass_fields__
    return Health(**{k: v for k, v in data.items() if k in keys})


def _models(data: dict) -> list[ModelInfo]:
    return [
        ModelInfo(m["id"], m.get("context_length"), m.get("engine"), m.get("profile"), m)
        for m in data.get("data", [])
    ]
