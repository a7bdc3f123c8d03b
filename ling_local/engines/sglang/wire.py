"""The token path to the SGLang child: HTTP/1.1 over kept-alive loopback connections,
the request written in one `transport.write` and the response parsed by httptools (the C
parser uvicorn uses) straight into the relay, instead of through aiohttp.

What it saves: aiohttp spends its Python building each request, acquiring a pooled
connection and parsing the response start; on the daemon's side of one `/generate` that
was ~0.3 ms of the ~1 ms the daemon adds to the time to first token (2-core VM, traced
against the stand-in). Only `/generate` goes this way: health checks, aborts and the
warm-up's neighbours stay on aiohttp, off the token path.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import httptools

__all__ = ["WireError", "WirePool", "WireResponse"]


class WireError(ConnectionError):
    """The connection to the child failed or closed before the response ended."""


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, live: set) -> None:
        self.loop = loop
        self._live = live
        """The pool's open connections: this one leaves it when it closes."""
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status: int | None = None
        self.keep_alive = True
        self.chunks: list[bytes] = []
        self.complete = False
        self.closed = False
        self.error: Exception | None = None
        self._waiter: asyncio.Future | None = None

    # ------------------------------------------------------------------ asyncio
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is no subclass)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # one small write per request: never wait for an ACK
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(WireError(f"bad HTTP from SGLang: {err}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._live.discard(self)
        if not self.complete:
            self._fail(WireError(f"SGLang closed the connection: {exc or 'EOF'}"))
        self._wake()

    # ------------------------------------------------------------------ httptools
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # ------------------------------------------------------------------ ours
    def _fail(self, err: Exception) -> None:
        if self.error is None:
            self.error = err

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until the parser has something new (or the connection ends)."""
        self._waiter = self.loop.create_future()
        await self._waiter

    def start(self, request: bytes) -> None:
        self.status, self.complete, self.error = None, False, None
        self.chunks.clear()
        assert self.transport is not None
        self.transport.write(request)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class WireResponse:
    """One response: its status, then the body's chunks as they are parsed."""

    def __init__(self, pool: WirePool, conn: _Connection) -> None:
        self._pool = pool
        self._conn = conn
        self.status: int = conn.status or 0
        self._released = False

    async def _next(self) -> bytes | None:
        conn = self._conn
        while not conn.chunks:
            if conn.complete:
                return None
            if conn.error is not None or conn.closed:
                raise conn.error or WireError("SGLang closed the connection")
            await conn.wait()
        if len(conn.chunks) == 1:
            return conn.chunks.pop()
        data = b"".join(conn.chunks)
        conn.chunks.clear()
        return data

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Whatever body bytes have arrived, as soon as they have."""
        while (data := await self._next()) is not None:
            yield data

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = []
        while (data := await self._next()) is not None:
            parts.append(data)
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back for the next request (if the response was read to its
        end and the server keeps it alive), else close it."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.complete and conn.keep_alive and not conn.closed and conn.error is None:
            self._pool._idle.append(conn)
        else:
            conn.close()

    async def drain(self, timeout: float) -> None:
        """Read the rest of the body (a finished stream's tail) and give the connection
        back; close it instead if the rest does not come within `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self.read()
        except (WireError, TimeoutError):
            self.close()
        else:
            self.release()

    def close(self) -> None:
        """Drop the connection (a stream abandoned mid-way)."""
        if not self._released:
            self._released = True
            self._conn.close()


class WirePool:
    """Kept-alive connections to one loopback HTTP server, one request at a time each.

    `alive` says whether the server process that was verified to own the port still runs:
    no new connection (whose first write carries the key) is made once it has exited, since
    another process could have bound the port by then."""

    def __init__(
        self, host: str, port: int, api_key: str, alive: Callable[[], bool] = lambda: True
    ) -> None:
        self.host, self.port = host, port
        self._alive = alive
        self._head = (
            f"Host: {host}:{port}\r\nAuthorization: Bearer {api_key}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        ).encode()
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._closed = False

    async def _connect(self) -> _Connection:
        if not self._alive():
            raise WireError(f"the server that owned {self.host}:{self.port} has exited")
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop, self._all), self.host, self.port),
                5.0,
            )
        except (OSError, TimeoutError) as err:
            raise WireError(f"cannot connect to SGLang at {self.host}:{self.port}: {err}") from err
        if not self._alive():  # it exited while connecting: the peer may be someone else
            conn.close()
            raise WireError(f"the server that owned {self.host}:{self.port} has exited")
        self._all.add(conn)
        return conn

    async def post(self, path: str, body: bytes) -> WireResponse:
        """Send POST `path` with a JSON body; return once the response headers are in."""
        if self._closed:
            raise WireError("the connection pool is closed")
        request = (
            b"POST " + path.encode() + b" HTTP/1.1\r\n" + self._head
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                try:
                    return await self._exchange(conn, request)
                except WireError:
                    if conn.status is not None or conn.chunks:
                        raise  # the server answered: never send the request twice
                    # A kept-alive connection the server had just closed: a fresh one.
        return await self._exchange(await self._connect(), request)

    async def _exchange(self, conn: _Connection, request: bytes) -> WireResponse:
        conn.start(request)
        while conn.status is None:
            if conn.error is not None or conn.closed:
                raise conn.error or WireError("SGLang closed the connection")
            await conn.wait()
        return WireResponse(self, conn)

    async def close(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports finish closing
