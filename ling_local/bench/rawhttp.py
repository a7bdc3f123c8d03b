"""A bare HTTP/1.1 client for server-sent events, over TCP or a unix socket.

`bench overhead` uses it to time what the daemon alone adds: per event it does one
buffered read of the chunk and nothing else, where an HTTP library (the SDK's httpx) adds
its own parsing and bookkeeping to every chunk. It speaks exactly what uvicorn answers: one
keep-alive connection, chunked transfer encoding, and nothing more.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from ling_local.errors import APIStatusError, DaemonUnavailable

__all__ = ["SSEConnection"]


class SSEConnection:
    """One keep-alive connection; `events(path, body)` streams a POST's SSE `data:` payloads
    (bytes, ``[DONE]`` included) as they arrive."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        if url.startswith("unix:"):
            self._host, self._port, self._uds = "localhost", 0, url[5:]
        else:
            hostport = url.split("://", 1)[1].rstrip("/")
            host, _, port = hostport.rpartition(":")
            self._host, self._port, self._uds = host.strip("[]"), int(port), None
        self._host_header = "localhost" if self._uds else hostport

    async def _connect(self) -> None:
        try:
            if self._uds:
                self._reader, self._writer = await asyncio.open_unix_connection(self._uds)
            else:
                self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        except OSError as err:
            raise DaemonUnavailable(f"cannot reach {self.url}: {err}") from None

    async def _send(self, request: bytes) -> bytes:
        """Send `request`, return the response head. The server closes a connection idle
        for a few seconds (keep-alive timeout): then reconnect once and send again."""
        for attempt in (0, 1):
            if self._reader is None or self._reader.at_eof():
                await self.aclose()
                await self._connect()
            assert self._reader is not None and self._writer is not None
            self._writer.write(request)  # one write, like a tuned client
            try:
                return await self._reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as err:
                await self.aclose()
                if attempt or (isinstance(err, asyncio.IncompleteReadError) and err.partial):
                    raise DaemonUnavailable(f"{self.url} closed the connection") from None
        raise AssertionError("unreachable")

    async def events(self, path: str, body: dict) -> AsyncIterator[bytes]:
        payload = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        status_line, *headers = (await self._send(head + payload)).split(b"\r\n")
        reader = self._reader
        assert reader is not None
        status = int(status_line.split()[1])
        names = {h.split(b":", 1)[0].strip().lower() for h in headers if h}
        if status != 200 or b"transfer-encoding" not in names:
            await self.aclose()
            raise APIStatusError(f"{path} answered {status_line.decode()}", status_code=status)
        buffer = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                await reader.readexactly(2)
                return
            buffer += (await reader.readexactly(size + 2))[:-2]
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                if event.startswith(b"data: "):
                    yield event[6:]

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
