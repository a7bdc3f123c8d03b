"""What stops a web page or another user from driving the daemon.

- ``Host`` must be a loopback name (DNS rebinding: a page on evil.example that resolves to
  127.0.0.1 still sends ``Host: evil.example``).
- ``Origin``, when present, must be on an explicit allow-list (empty by default): browsers
  always send it on cross-site requests.
- ``Authorization: Bearer <token>`` on every route but ``/health``.
Written as plain ASGI middleware so streaming responses pass through untouched.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ling_local.errors import BodyTooLarge

__all__ = [
    "LOOPBACK_HOSTS",
    "BodySizeLimit",
    "SecurityMiddleware",
    "host_name",
    "is_loopback_address",
]

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
OPEN_PATHS = frozenset({"/health"})


def is_loopback_address(host: str) -> bool:
    """A bind address that only this machine can reach. An empty host is not one: the
    socket layer reads it as every interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]`` or
    ``[v6]:port``), lowercased; None when the value is not well formed (a port that is not
    1-65535, anything after the closing bracket but a port, a bare IPv6 address)."""
    value = value.lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
    else:
        host = value.split(":", 1)[0]
        rest = value[len(host) :]
    if rest:
        port = rest[1:]
        if (
            not (rest[0] == ":" and port.isascii() and port.isdigit() and len(port) <= 5)
            or not 0 < int(port) <= 65535
        ):
            return None
    return host or None


async def _deny(send: Send, status: int, message: str, error_type: str) -> None:
    body = json.dumps({"error": {"message": message, "type": error_type}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class SecurityMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self._token = f"Bearer {token}".encode()
        self._hosts = LOOPBACK_HOSTS | {h.lower() for h in allowed_hosts}
        self._origins = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = auth = None
        hosts = 0
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
                hosts += 1
            elif name == b"origin":
                origin = value
            elif name == b"authorization":
                auth = value
        if hosts > 1:  # RFC 9112: a request with several Host headers is answered 400
            await _deny(send, 400, "more than one Host header", "invalid_request_error")
            return
        if host is None or host_name(host.decode("latin-1")) not in self._hosts:
            await _deny(
                send,
                403,
                "Host header is not a loopback name; ling-local only "
                "answers requests addressed to localhost",
                "forbidden_host",
            )
            return
        if origin is not None and origin.decode("latin-1").rstrip("/").lower() not in self._origins:
            await _deny(
                send,
                403,
                "cross-origin requests are not allowed (Origin not on the daemon's allow-list)",
                "forbidden_origin",
            )
            return
        if scope["path"] not in OPEN_PATHS and (
            auth is None or not hmac.compare_digest(auth, self._token)
        ):
            await _deny(
                send,
                401,
                "missing or wrong bearer token; the token is in the file `ling-local doctor` shows",
                "authentication_error",
            )
            return
        await self.app(scope, receive, send)


class BodySizeLimit:
    """413 (as a JSON error) for bodies over the limit: by Content-Length before anything is
    read, or while reading a chunked body (`BodyTooLarge` from `receive`, which the routes
    answer as any other request error)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await _deny(send, 413, self._message(), "invalid_request_error")
                return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self._message())
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as err:  # a route that let it through unanswered
            if not started:
                await _deny(send, 413, err.message, err.error_type)

    def _message(self) -> str:
        return f"request body too large (limit {self.max_bytes} bytes)"
