"""The two generation routes on plain ASGI, in front of FastAPI.

Every keystroke's request pays the web stack's per-request cost before the engine sees it;
for POST /v1/completions and /v1/chat/completions this skips FastAPI's routing, its
middleware stack and the anyio task group of a StreamingResponse (measured with `ling-local
bench overhead`). Everything else — validation, prompt building, the SSE bytes — is the
same code as before (`openai_api`); only the I/O is done here. The generation starts before
the response headers are written, and a client that disconnects cancels it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Coroutine

from starlette.types import ASGIApp, Receive, Scope, Send

from ling_local.errors import GenerationCancelled, LingLocalError
from ling_local.server.openai_api import Prepared, collect, prepare_chat, prepare_completion
from ling_local.server.state import DaemonState

__all__ = ["GenerationRoutes"]

log = logging.getLogger(__name__)

_ROUTES: dict[str, Callable[[DaemonState, bytes], Prepared]] = {
    "/v1/completions": prepare_completion,
    "/v1/chat/completions": prepare_chat,
}
_SSE_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ],
}


async def _send_json(send: Send, status: int, body: dict) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _send_error(send: Send, err: LingLocalError) -> None:
    body = {"message": err.message, "type": err.error_type}
    if getattr(err, "param", None) is not None:
        body["param"] = err.param  # type: ignore[attr-defined]
    await _send_json(send, err.status_code, {"error": body})


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GenerationCancelled("the client disconnected")
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _until_disconnect(work: asyncio.Future, receive: Receive) -> bool:
    """Wait for `work`; cancel it if the client goes away first. True when it finished."""
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if work.done():
        return True
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return False


_EAGER = sys.version_info >= (3, 12)


def _start(coro: Coroutine) -> asyncio.Future:
    """A task that runs to its first await right away where Python has eager tasks
    (3.12+): the request is on its way to the engine before the event loop turns again."""
    if _EAGER:
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
    return asyncio.ensure_future(coro)


async def _stream(prepared: Prepared, receive: Receive, send: Send) -> None:
    relay = prepared.relay()
    headers: asyncio.Future | None = None

    async def pump() -> None:
        nonlocal headers
        # The headers go out from a task of their own, which runs as soon as the relay
        # first waits (the engine has the request by then): the header write overlaps the
        # first token, and the first chunk is sent from this task without another hop.
        headers = asyncio.ensure_future(send(_SSE_START))
        chunk = await anext(relay, None)
        await headers
        while chunk is not None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await anext(relay, None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    work = _start(pump())
    try:
        await _until_disconnect(work, receive)
    finally:
        if headers is not None and not headers.done():
            headers.cancel()
        if not work.done():  # this task was cancelled (a forced shutdown): stop the pump first
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        await relay.aclose()  # closing the scheduler stream cancels it in the engine


class GenerationRoutes:
    def __init__(self, app: ASGIApp, daemon: DaemonState) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        prepare = _ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if prepare is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _send_json(
                send,
                405,
                {
                    "error": {
                        "message": "method not allowed; use POST",
                        "type": "invalid_request_error",
                    }
                },
            )
            return
        try:
            body = await _read_body(receive)
            t0 = time.perf_counter()
            prepared = prepare(self.daemon, body)
            prepared.gen.prep_s = time.perf_counter() - t0  # parse, prompt, tokens
            self.daemon.scheduler.check_capacity()
        except LingLocalError as err:
            await _send_error(send, err)
            return
        except Exception as err:  # never a bare 500 page: the client gets JSON
            log.exception("unexpected error")
            await _send_error(send, LingLocalError(f"internal error: {type(err).__name__}"))
            return
        if prepared.stream:
            await _stream(prepared, receive, send)
            return
        work = asyncio.ensure_future(collect(self.daemon, prepared))
        try:
            if not await _until_disconnect(work, receive):
                return  # nobody to answer
            text, last = work.result()
        except LingLocalError as err:
            await _send_error(send, err)
            return
        await _send_json(send, 200, prepared.answer(text, last))
