"""The /generate connection pool (`engines.sglang.wire`) against a real HTTP server on
loopback (aiohttp's): chunked streams, keep-alive reuse, a server that drops an idle
connection or a stream, error statuses."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from ling_local.engines.sglang.wire import WireError, WirePool


@pytest.fixture
async def server():
    """A server whose /generate streams three SSE events (or what the test asks for) and
    records the peer port of every request."""
    peers: list[int] = []
    behaviour: dict = {"status": 200, "drop_after": None}

    async def generate(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername")[1])
        body = await request.read()
        if behaviour["status"] != 200:
            return web.json_response({"error": {"message": "nope"}}, status=behaviour["status"])
        assert request.headers["Authorization"] == "Bearer key"
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(3):
            await response.write(b"data: %d %d\n\n" % (i, len(body)))
            await asyncio.sleep(0.001)
            if behaviour["drop_after"] == i:
                request.transport.close()
                return response
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app, keepalive_timeout=0.3)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    yield port, peers, behaviour
    await runner.cleanup()


@pytest.fixture
async def pool(server):
    """A pool on the server, closed after the test."""
    wire = WirePool("127.0.0.1", server[0], "key")
    yield wire
    await wire.close()


async def test_streams_and_reuses_one_connection(server, pool) -> None:
    _, peers, _ = server
    for _ in range(3):
        response = await pool.post("/generate", b'{"x": 1}')
        assert response.status == 200
        data = b"".join([chunk async for chunk in response.iter_any()])
        assert data == b"data: 0 8\n\ndata: 1 8\n\ndata: 2 8\n\n"
        response.release()
    assert len(peers) == 3 and len(set(peers)) == 1  # one kept-alive connection


async def test_a_connection_the_server_closed_while_idle_is_replaced(server, pool) -> None:
    _, peers, _ = server
    response = await pool.post("/generate", b"{}")
    await response.read()
    response.release()
    await asyncio.sleep(0.8)  # past the server's keep-alive timeout: it hangs up
    response = await pool.post("/generate", b"{}")
    assert (await response.read()).count(b"data:") == 3
    assert len(set(peers)) == 2


async def test_a_stream_cut_mid_way_raises(server, pool) -> None:
    _, _, behaviour = server
    behaviour["drop_after"] = 1
    response = await pool.post("/generate", b"{}")
    got = b""
    with pytest.raises(WireError):
        async for chunk in response.iter_any():
            got += chunk
    assert got.startswith(b"data: 0")
    response.close()
    await asyncio.sleep(0.05)
    assert not pool._all  # a closed connection leaves the pool (no growth per cancel)


async def test_an_error_status_and_its_body(server, pool) -> None:
    _, _, behaviour = server
    behaviour["status"] = 400
    response = await pool.post("/generate", b"{}")
    assert response.status == 400
    assert b"nope" in await response.read()
    response.release()


async def test_nothing_listening_is_a_wire_error() -> None:
    pool = WirePool("127.0.0.1", 1, "key")
    with pytest.raises(WireError, match="cannot connect"):
        await pool.post("/generate", b"{}")
    await pool.close()
