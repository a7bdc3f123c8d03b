"""The SDK's async transport (ling_local.transport): one write per request, idle
connections the server dropped are replaced, and failures surface as the SDK's errors."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from ling_local.client import AsyncClient
from ling_local.errors import DaemonUnavailable, RequestError

HEALTH = {"status": "ok", "state": "ready", "engine": "x", "model": "m", "profile": "p"}


def _json_response(status: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


@contextmanager
def _server(keep_alive_s: float) -> Iterator[tuple[str, list[int]]]:
    """A real uvicorn app whose idle connections close after `keep_alive_s`; records the
    client port of every request (a new port = a new connection)."""
    ports: list[int] = []

    async def health(request):
        ports.append(request.client.port)
        return JSONResponse(HEALTH)

    app = Starlette(routes=[Route("/health", health)])
    config = uvicorn.Config(
        app, port=0, log_level="warning", lifespan="off", timeout_keep_alive=keep_alive_s
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", ports
    finally:
        server.should_exit = True
        thread.join(10)


async def test_keeps_alive_and_replaces_connections_the_server_dropped() -> None:
    with _server(keep_alive_s=0.3) as (url, ports):
        async with AsyncClient(url, "t") as client:
            assert (await client.health()).ready
            assert (await client.health()).ready
            await asyncio.sleep(0.8)  # the server has closed the idle connection by now
            assert (await client.health()).ready
    assert ports[0] == ports[1] != ports[2]


async def test_a_request_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers and body leave in one write (the daemon wakes once per request)."""
    first_reads: list[bytes] = []
    client_writes: list[bytes] = []
    write = asyncio.StreamWriter.write

    def counting_write(self: asyncio.StreamWriter, data: bytes) -> None:
        if not data.startswith(b"HTTP/1.1"):  # the test server's own answer is not counted
            client_writes.append(bytes(data))
        write(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "write", counting_write)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first_reads.append(await reader.read(65536))
        body = b'{"choices":[{"text":" world","finish_reason":"length"}],"usage":{}}'
        writer.write(_json_response(b"200 OK", body))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, AsyncClient(f"http://127.0.0.1:{port}", "t") as client:
        assert (await client.complete("hello", max_tokens=3)).text == " world"
    assert len(client_writes) == 1 and client_writes[0] == first_reads[0]
    head, _, body = first_reads[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions") and b'"prompt":"hello"' in body


async def test_unreachable_daemon_is_daemon_unavailable(tmp_path) -> None:
    async with AsyncClient("http://127.0.0.1:9", "t") as client:
        with pytest.raises(DaemonUnavailable):
            await client.health()
    async with AsyncClient(f"unix:{tmp_path / 'no.sock'}", "t") as client:
        with pytest.raises(DaemonUnavailable):
            await client.health()


async def test_a_stalled_daemon_times_out() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(65536)  # and never answer

    server = await asyncio.start_server(stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    t0 = time.monotonic()
    async with server, AsyncClient(f"http://127.0.0.1:{port}", "t", timeout=0.3) as client:
        with pytest.raises(DaemonUnavailable):
            await client.health()
    assert time.monotonic() - t0 < 3
    for writer in writers:
        writer.close()
        await writer.wait_closed()


# --------------------------------------------------------------------------- async streams
# Streams from a local daemon go through aiohttp; its failures are the SDK's errors too.
async def _serve(handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_async_stream_from_an_unreachable_daemon(tmp_path) -> None:
    for url in ("http://127.0.0.1:9", f"unix:{tmp_path / 'no.sock'}"):
        async with AsyncClient(url, "t") as client:
            with pytest.raises(DaemonUnavailable, match="ling-local serve"):
                await client.stream_complete("x", max_tokens=3)


async def test_async_stream_error_status_is_typed() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        body = b'{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}'
        writer.write(_json_response(b"400 Bad Request", body))
        await writer.drain()
        writer.close()

    server, url = await _serve(refuse)
    async with server, AsyncClient(url, "t") as client:
        with pytest.raises(RequestError, match="max_tokens is too large"):
            await client.stream_complete("x", max_tokens=10**9)


async def test_async_stream_stalled_or_dropped_is_daemon_unavailable() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def stall_after_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(65536)
        event = b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(event), event)
        )
        await writer.drain()  # then nothing more

    server, url = await _serve(stall_after_one)
    t0 = time.monotonic()
    async with server, AsyncClient(url, "t", timeout=0.3) as client:
        stream = await client.stream_complete("x", max_tokens=3)
        with pytest.raises(DaemonUnavailable):
            async for chunk in stream:
                assert chunk.text == "a"
        assert time.monotonic() - t0 < 3
        writers[0].close()  # a daemon that goes away mid-stream
        stream = await client.stream_complete("x", max_tokens=3)
        with pytest.raises(DaemonUnavailable):
            async for _ in stream:
                writers[-1].close()
    for writer in writers:
        writer.close()
