"""A deadline for reading each request, so that slow or stalled clients are dropped.

uvicorn times out only the idle time between two requests (``timeout_keep_alive``): a
client that sends half a request line, half its headers or half its body holds its
connection (and, for a body, an ASGI task) for as long as it likes. This protocol (uvicorn's
httptools one) arms a timer when a connection opens and when a request's first byte
arrives, disarms it when the whole request (headers and body) has been read, and closes
the connection when it fires first. Responses, however long they stream, are not timed.
A request line plus headers over 64 KiB is refused (431) as it arrives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["read_deadline_protocol"]

log = logging.getLogger(__name__)


#: Request line plus headers: a client that keeps sending headers is cut off here (431)
#: instead of growing the daemon's memory until the deadline.
MAX_HEAD_BYTES = 64 * 1024


class _ReadDeadlineProtocol(HttpToolsProtocol):
    read_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = None
        """Bytes of a request line and headers still being read; None between heads."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_bytes is not None:  # a request's head began and is not complete
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head()

    def _refuse_head(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            body = (
                b'{"error":{"message":"request headers too large","type":"invalid_request_error"}}'
            )
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\nconnection: close\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def _arm(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.read_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if not self.transport.is_closing():
            log.info(
                "dropped a client that did not send its request within %.0fs", self.read_timeout_s
            )
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def read_deadline_protocol(read_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's ``http=`` protocol class with a `read_timeout_s` deadline per request."""
    return type(
        "ReadDeadlineProtocol", (_ReadDeadlineProtocol,), {"read_timeout_s": read_timeout_s}
    )
