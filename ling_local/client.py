"""Python SDK for the daemon: `Client` (sync) and `AsyncClient`, over httpx.

They find the daemon and its token by themselves (``LING_LOCAL_URL`` / ``LING_LOCAL_TOKEN``
or the files the daemon writes). Streams are iterators of `Chunk`; closing one early closes
the HTTP response, which cancels the generation in the daemon at once.

    with Client() as client:
        print(client.complete("def fib(n):", max_tokens=32).text)
        with client.stream_chat([{"role": "user", "content": "hi"}]) as stream:
            for chunk in stream:
                print(chunk.text, end="")
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

import httpx

from ling_local.client_wire import (
    DEFAULT_URL,
    Chunk,
    Completion,
    Health,
    ModelInfo,
    Timings,
    Usage,
    _body,
    _completion_from_json,
    _error_from_response,
    _health,
    _models,
    _resolve,
    _StreamState,
    _unavailable,
)
from ling_local.errors import DaemonUnavailable, EngineNotReady
from ling_local.transport import AioBody, LocalStreams, LocalTransport, aio_errors

__all__ = [
    "DEFAULT_URL",
    "AsyncClient",
    "AsyncStream",
    "Chunk",
    "Client",
    "Completion",
    "Health",
    "Message",
    "ModelInfo",
    "Stream",
    "Timings",
    "Usage",
]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
Message = dict[str, str]
PriorityName = Literal["completion", "chat", "agent"]


# ------------------------------------------------------------------------- sync
class Stream:
    """Iterator of `Chunk`s. After it ends: `.text`, `.finish_reason`, `.usage`, `.timings`.
    `close()` (or leaving the `with` block) before the end cancels the generation."""

    def __init__(self, response: httpx.Response, kind: str, url: str, started: float) -> None:
        self._response = response
        self._state = _StreamState(kind, started)
        self._lines = response.iter_lines()
        self._url = url

    def __iter__(self) -> Iterator[Chunk]:
        return self

    def __next__(self) -> Chunk:
        try:
            for line in self._lines:
                chunk = self._state.parse(line)
                if chunk is not None:
                    return chunk
        except httpx.TransportError as err:
            self.close()
            raise _unavailable(self._url, err) from None
        except BaseException:
            self.close()
            raise
        self.close()
        raise StopIteration

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    text = property(lambda self: self._state.text)
    finish_reason = property(lambda self: self._state.finish_reason)
    usage = property(lambda self: self._state.usage)
    timings = property(lambda self: self._state.timings)
    first_chunk_s = property(lambda self: self._state.first_chunk_s)

    def result(self) -> Completion:
        """Consume the rest of the stream and return it as one Completion."""
        for _ in self:
            pass
        return self._state.result()


class Client:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url, uds, self.token = _resolve(base_url, token)
        if transport is None and uds is not None:
            transport = httpx.HTTPTransport(uds=uds)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
        )

    # --------------------------------------------------------------- plumbing
    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as err:
            raise _unavailable(self.base_url, err) from None
        if response.status_code >= 400 and not (path == "/health" and response.status_code == 503):
            raise _error_from_response(response.status_code, response.content)
        return response

    def _stream(self, path: str, body: dict, kind: str) -> Stream:
        request = self._http.build_request("POST", path, json=body)
        started = time.perf_counter()
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as err:
            raise _unavailable(self.base_url, err) from None
        if response.status_code >= 400:
            content = response.read()
            response.close()
            raise _error_from_response(response.status_code, content)
        return Stream(response, kind, self.base_url, started)

    # --------------------------------------------------------------- API
    def health(self) -> Health:
        return _health(self._request("GET", "/health").json())

    def wait_ready(self, timeout: float = 60.0) -> Health:
        """Poll /health until the engine is ready (or raise EngineNotReady)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                health = self.health()
                if health.ready:
                    return health
                if health.state == "failed":
                    raise EngineNotReady(f"the engine failed to start: {health.detail}")
            except DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise EngineNotReady(f"the engine was not ready after {timeout:.0f}s")
            time.sleep(0.1)

    def models(self) -> list[ModelInfo]:
        return _models(self._request("GET", "/v1/models").json())

    def complete(self, prompt: str, *, suffix: str | None = None, **options: Any) -> Completion:
        """Complete `prompt` (fill in the middle when `suffix` is given). Options:
        max_tokens, temperature, top_p, stop, seed, priority, key (supersede key)."""
        body = _body(prompt, "complete", False, {"suffix": suffix, **options})
        return _completion_from_json(
            self._request("POST", "/v1/completions", json=body).json(), "complete"
        )

    def stream_complete(self, prompt: str, *, suffix: str | None = None, **options: Any) -> Stream:
        body = _body(prompt, "complete", True, {"suffix": suffix, **options})
        return self._stream("/v1/completions", body, "complete")

    def chat(self, messages: Sequence[Message], **options: Any) -> Completion:
        body = _body(list(messages), "chat", False, options)
        return _completion_from_json(
            self._request("POST", "/v1/chat/completions", json=body).json(), "chat"
        )

    def stream_chat(self, messages: Sequence[Message], **options: Any) -> Stream:
        body = _body(list(messages), "chat", True, options)
        return self._stream("/v1/chat/completions", body, "chat")

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


# ------------------------------------------------------------------------- async
class AsyncStream:
    """Async iterator of `Chunk`s; `await aclose()` early cancels the generation."""

    def __init__(
        self, response: httpx.Response | AioBody, kind: str, url: str, started: float
    ) -> None:
        self._response = response
        self._state = _StreamState(kind, started)
        self._lines = response.aiter_lines()
        self._url = url

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self

    async def __anext__(self) -> Chunk:
        try:
            async for line in self._lines:
                chunk = self._state.parse(line)
                if chunk is not None:
                    return chunk
        except (httpx.TransportError, *aio_errors()) as err:
            await self.aclose()
            raise _unavailable(self._url, err) from None
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        await self._response.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    text = property(lambda self: self._state.text)
    finish_reason = property(lambda self: self._state.finish_reason)
    usage = property(lambda self: self._state.usage)
    timings = property(lambda self: self._state.timings)
    first_chunk_s = property(lambda self: self._state.first_chunk_s)

    async def result(self) -> Completion:
        async for _ in self:
            pass
        return self._state.result()


class AsyncClient:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url, uds, self.token = _resolve(base_url, token)
        local = transport is None and (uds is not None or self.base_url.startswith("http://"))
        if local:
            transport = LocalTransport(uds=uds)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
        )
        # Streams from a local daemon go through aiohttp (C HTTP parser): its first chunk
        # arrives ~0.4 ms sooner than through httpx + h11 (`bench overhead`, SDK rows).
        # A caller's own httpx transport keeps everything on httpx.
        self._aio = LocalStreams(uds, self.base_url, headers, timeout) if local else None

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kw)
        except httpx.TransportError as err:
            raise _unavailable(self.base_url, err) from None
        if response.status_code >= 400 and not (path == "/health" and response.status_code == 503):
            raise _error_from_response(response.status_code, response.content)
        return response

    async def _stream(self, path: str, body: dict, kind: str) -> AsyncStream:
        if self._aio is not None:
            return await self._aio_stream(path, body, kind)
        request = self._http.build_request("POST", path, json=body)
        started = time.perf_counter()
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as err:
            raise _unavailable(self.base_url, err) from None
        if response.status_code >= 400:
            content = await response.aread()
            await response.aclose()
            raise _error_from_response(response.status_code, content)
        return AsyncStream(response, kind, self.base_url, started)

    async def _aio_stream(self, path: str, body: dict, kind: str) -> AsyncStream:
        assert self._aio is not None
        started = time.perf_counter()
        try:
            response = await self._aio.post(path, body)
        except aio_errors() as err:
            raise _unavailable(self.base_url, err) from None
        if response.status >= 400:
            try:
                content = await response.read()
            finally:
                response.close()
            raise _error_from_response(response.status, content)
        return AsyncStream(AioBody(response), kind, self.base_url, started)

    async def health(self) -> Health:
        return _health((await self._request("GET", "/health")).json())

    async def wait_ready(self, timeout: float = 60.0) -> Health:
        import asyncio

        deadline = time.monotonic() + timeout
        while True:
            try:
                health = await self.health()
                if health.ready:
                    return health
                if health.state == "failed":
                    raise EngineNotReady(f"the engine failed to start: {health.detail}")
            except DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise EngineNotReady(f"the engine was not ready after {timeout:.0f}s")
            await asyncio.sleep(0.1)

    async def models(self) -> list[ModelInfo]:
        return _models((await self._request("GET", "/v1/models")).json())

    async def complete(
        self, prompt: str, *, suffix: str | None = None, **options: Any
    ) -> Completion:
        body = _body(prompt, "complete", False, {"suffix": suffix, **options})
        response = await self._request("POST", "/v1/completions", json=body)
        return _completion_from_json(response.json(), "complete")

    async def stream_complete(
        self, prompt: str, *, suffix: str | None = None, **options: Any
    ) -> AsyncStream:
        body = _body(prompt, "complete", True, {"suffix": suffix, **options})
        return await self._stream("/v1/completions", body, "complete")

    async def chat(self, messages: Sequence[Message], **options: Any) -> Completion:
        body = _body(list(messages), "chat", False, options)
        response = await self._request("POST", "/v1/chat/completions", json=body)
        return _completion_from_json(response.json(), "chat")

    async def stream_chat(self, messages: Sequence[Message], **options: Any) -> AsyncStream:
        body = _body(list(messages), "chat", True, options)
        return await self._stream("/v1/chat/completions", body, "chat")

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics")).text

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._aio is not None:
            await self._aio.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
