"""RemoteEngine: any OpenAI-compatible server the user already runs (SGLang, vLLM, Ollama,
another ling-local), for users who outgrow one box.

The daemon keeps its own API, scheduler, supersede and metrics in front of it. Chat goes to
``/v1/chat/completions`` with the messages (the server applies its own template);
completion to ``/v1/completions`` with the prompt text. Fill-in-the-middle is either the
prompt built with the profile's FIM tokens or OpenAI's ``suffix`` field (``remote.fim``).
Cancelling closes the stream, which every such server treats as an abort. Health is
``GET /v1/models``, polled in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from ling_local.config import Profile
from ling_local.engines.base import (
    Delta,
    EngineHealth,
    EngineState,
    FinishReason,
    GenerationRequest,
    GenerationStats,
    error_body_message,
)
from ling_local.errors import ConfigError, EngineError, EngineNotReady, RequestError

__all__ = ["RemoteEngine"]

log = logging.getLogger(__name__)

_CONTEXT_KEYS = ("context_length", "max_model_len", "context_window", "max_context_length")


@dataclass(eq=False, slots=True)
class _Flight:
    request: GenerationRequest
    response: httpx.Response | None = None
    t_sent: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float = 0.0
    chunks: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)

    def final(self, reason: FinishReason) -> GenerationStats:
        s = self.stats
        s.finish_reason = reason
        s.queue_s = self.request.queue_s
        s.completion_tokens = s.completion_tokens or self.chunks
        if self.t_first is not None:
            s.ttft_s = self.t_first - self.t_sent
            if s.completion_tokens > 1 and self.t_last > self.t_first:
                s.tpot_s = (self.t_last - self.t_first) / (s.completion_tokens - 1)
        return s


class RemoteEngine:
    kind = "remote"
    supports_preemption = False
    supports_concurrency = True
    """The server batches or queues by itself; a completion is sent beside a running chat."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.settings = profile.remote
        self.model_name = profile.served_model_name
        self.remote_model = self.settings.model
        self.context_length = profile.model.context_length
        self.tokenizer = None  # the server tokenizes; the daemon sends text
        self.state = EngineState.STARTING
        self.detail = f"connecting to {self.settings.base_url}"
        self._http: httpx.AsyncClient | None = None
        self._flights: dict[int, _Flight] = {}
        self._poller: asyncio.Task | None = None
        fim = self.settings.fim
        if fim == "auto":
            explicit = {"fim_prefix", "fim_suffix", "fim_middle"} & profile.prompt.model_fields_set
            fim = "tokens" if explicit else "suffix"
        self.fim_mode = fim

    def _headers(self) -> dict[str, str]:
        name = self.settings.api_key_env
        if not name:
            return {}
        key = os.environ.get(name)
        if not key:
            raise ConfigError(f"remote.api_key_env names {name}, but it is not set")
        return {"Authorization": f"Bearer {key}"}

    async def start(self) -> None:
        s = self.settings
        self._http = httpx.AsyncClient(
            base_url=s.base_url.rstrip("/"),
            headers=self._headers(),
            timeout=httpx.Timeout(s.timeout_s, connect=s.connect_timeout_s),
            trust_env=False,
        )
        await self._probe()
        self._poller = asyncio.create_task(self._poll())

    async def _probe(self) -> None:
        assert self._http is not None
        try:
            response = await self._http.get("/models", timeout=self.settings.connect_timeout_s)
            response.raise_for_status()
            models = response.json().get("data") or []
        except (httpx.HTTPError, ValueError, AttributeError) as err:
            self.state = EngineState.STARTING
            self.detail = f"cannot reach {self.settings.base_url}: {type(err).__name__}: {err}"
            return
        ids = [m.get("id") for m in models if isinstance(m, dict)]
        if self.remote_model is None and ids:
            self.remote_model = ids[0]
        if self.remote_model not in ids:
            self.state = EngineState.FAILED
            self.detail = f"{self.settings.base_url} does not serve {self.remote_model!r} ({ids})"
            return
        entry = models[ids.index(self.remote_model)]
        for key in _CONTEXT_KEYS:
            if isinstance(entry.get(key), int):
                self.context_length = entry[key]
                break
        if self.state is not EngineState.READY:
            log.info("remote %s ready: %s", self.settings.base_url, self.remote_model)
        self.state, self.detail = EngineState.READY, ""

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval_s)
            await self._probe()

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for flight in list(self._flights.values()):
            await self.abort(flight.request)
        if self._http is not None:
            await self._http.aclose()
        self.state = EngineState.STOPPED

    def health(self) -> EngineHealth:
        return EngineHealth(
            self.state, self.kind, self.model_name, self.detail, running=len(self._flights)
        )

    def tokenize(self, text: str) -> list[int] | None:
        return None

    def detokenize(self, ids: list[int]) -> str | None:
        return None

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        if self.state is not EngineState.READY or self._http is None:
            raise EngineNotReady(f"engine is {self.state.value}: {self.detail}".rstrip(": "))
        return self._generate(request)

    async def abort(self, request: GenerationRequest) -> None:
        """Close the stream: the server stops the generation when its client goes away."""
        request.cancel()
        flight = self._flights.get(id(request))
        if flight is not None and flight.response is not None:
            await flight.response.aclose()

    def _body(self, request: GenerationRequest) -> tuple[str, dict]:
        p = request.sampling
        body: dict = {
            "model": self.remote_model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
        }
        if p.stop:
            body["stop"] = list(p.stop)[:4]  # OpenAI allows four
        if p.seed is not None:
            body["seed"] = p.seed
        if request.messages is not None:
            body["messages"] = request.messages
            if request.json_schema is not None:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": request.json_schema},
                }
            return "/chat/completions", body
        if request.fim is not None and self.fim_mode == "suffix":
            body["prompt"], body["suffix"] = request.fim
        else:
            body["prompt"] = request.prompt
        return "/completions", body

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        assert self._http is not None
        flight = _Flight(request)
        self._flights[id(request)] = flight
        final: GenerationStats | None = None
        try:
            path, body = self._body(request)
            flight.response = await self._http.send(
                self._http.build_request("POST", path, json=body), stream=True
            )
            if flight.response.status_code != 200:
                raise _status_error(flight.response.status_code, await flight.response.aread())
            async for delta in self._events(flight, chat=request.messages is not None):
                final = delta.stats or final
                yield delta
            if final is None:
                final = flight.final("stop")
                yield Delta("", 0, "stop", final)
        except (httpx.HTTPError, httpx.StreamError) as err:
            if request.cancelled:
                final = flight.final("cancelled")
                yield Delta("", 0, "cancelled", final)
            else:
                final = flight.final("error")
                await self._probe()  # is the server still there? /health will say
                yield Delta("", 0, "error", final, f"remote server: {type(err).__name__}: {err}")
        except ValueError as err:
            final = flight.final("error")
            yield Delta("", 0, "error", final, f"remote server: {err}")
        finally:
            self._flights.pop(id(request), None)
            if flight.response is not None:
                await asyncio.shield(flight.response.aclose())
            if final is None:
                request.cancel()
                final = flight.final("cancelled")
            if request.on_finish is not None:
                try:
                    request.on_finish(final)
                except Exception:
                    log.exception("on_finish callback failed")

    async def _events(self, flight: _Flight, *, chat: bool) -> AsyncIterator[Delta]:
        assert flight.response is not None
        finish: str | None = None
        async for line in flight.response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            out = json.loads(data)
            if "error" in out:
                err = out["error"]
                raise ValueError(err.get("message", err) if isinstance(err, dict) else err)
            if usage := out.get("usage"):
                s = flight.stats
                s.prompt_tokens = usage.get("prompt_tokens", 0)
                s.completion_tokens = usage.get("completion_tokens", 0)
                details = usage.get("prompt_tokens_details") or {}
                s.cached_tokens = details.get("cached_tokens") or 0
            if ling := out.get("ling"):  # another ling-local: keep its engine's numbers
                flight.stats.accept_length = ling.get("accept_length")
            for choice in out.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                if text:
                    now = time.perf_counter()
                    flight.t_first = flight.t_first or now
                    flight.t_last = now
                    flight.chunks += 1
                    yield Delta(text, 1)
                finish = choice.get("finish_reason") or finish
        if flight.request.cancelled:
            reason: FinishReason = "cancelled"
        else:
            reason = "length" if finish == "length" else "stop"
        yield Delta("", 0, reason, flight.final(reason))


def _status_error(status: int, body: bytes) -> Exception:
    message = error_body_message(body)
    if status in (400, 413, 422):
        return RequestError(f"the remote server refused the request: {message}")
    if status in (401, 403):
        return EngineError(f"the remote server rejected the API key (HTTP {status}): {message}")
    return EngineError(f"the remote server answered HTTP {status}: {message}")
