"""`ling-local serve`: the daemon in the foreground, on loopback TCP or a unix socket."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Sequence

import uvicorn

from ling_local import discovery
from ling_local.config import Profile
from ling_local.engines.base import Engine, EngineState
from ling_local.errors import ConfigError
from ling_local.server.app import create_app
from ling_local.server.security import is_loopback_address

__all__ = ["check_bind", "run_daemon"]

log = logging.getLogger("ling_local.serve")


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless the user explicitly asked for it."""
    if not is_loopback_address(host) and not allow_remote:
        raise ConfigError(
            f"refusing to listen on {host}: that exposes the model to the network. "
            "ling-local listens on 127.0.0.1 by default; pass --allow-remote (and put the "
            "daemon behind TLS) if you really mean it"
        )


class _Server(uvicorn.Server):
    """uvicorn, plus the discovery file once the socket is bound."""

    def __init__(self, config: uvicorn.Config, profile: Profile, url_hint: str) -> None:
        super().__init__(config)
        self.profile = profile
        self.url_hint = url_hint
        self.url = url_hint

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        if self.config.uds is None and self.servers:
            port = self.servers[0].sockets[0].getsockname()[1]
            host = self.config.host
            self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        discovery.write_daemon_info(self.url, self.profile.name, self.profile.served_model_name)
        asyncio.get_running_loop().create_task(self._announce_ready())

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn re-raises SIGTERM/SIGINT after run() returns, so clean up here, not later.
        try:
            await super().shutdown(sockets)
        finally:
            _cleanup(self.config.uds)

    async def _announce_ready(self) -> None:
        t0 = time.perf_counter()
        engine = self.config.app.state.daemon.engine  # type: ignore[union-attr]
        while engine.health().state is EngineState.STARTING:
            await asyncio.sleep(0.05)
        health = engine.health()
        if health.state is EngineState.READY:
            log.info(
                "ready: %s on %s (profile %s, engine %s) after %.1fs",
                health.model,
                self.url,
                self.profile.name,
                health.engine,
                time.perf_counter() - t0,
            )
        else:
            log.error("engine %s: %s", health.state.value, health.detail)


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, or asyncio leaves Nagle on for accepted connections (it only sets
    # TCP_NODELAY when sock.proto says TCP), and SSE chunks then wait for delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as err:
        sock.close()
        raise ConfigError(
            f"the daemon could not listen on {host}:{port}: {err.strerror} "
            "(is another daemon running? `ling-local doctor` shows it)"
        ) from None
    sock.set_inheritable(True)
    return sock


def _cleanup(uds: str | None) -> None:
    discovery.remove_daemon_info()
    if uds is not None and os.path.exists(uds):
        os.unlink(uds)


def run_daemon(
    profile: Profile,
    *,
    host: str = "127.0.0.1",
    port: int = 8741,
    uds: str | None = None,
    allow_remote: bool = False,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    log_level: str = "info",
    engine: Engine | None = None,
) -> None:
    """Serve `profile` until SIGTERM/SIGINT. `engine` replaces the profile's engine (only the
    benchmark token source of `ling-local bench overhead` passes one)."""
    sockets = None
    if uds is None:
        check_bind(host, allow_remote)
        sockets = [_bind_tcp(host, port)]  # fail now, before the model loads
    token = discovery.ensure_token()
    app = create_app(
        profile,
        token=token,
        engine=engine,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
    )
    if uds is not None and os.path.exists(uds):
        os.unlink(uds)  # a stale socket from a crashed daemon
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        uds=uds,
        log_level=log_level if log_level != "info" else "warning",
        access_log=False,
        # Loopback only: no proxy in front whose X-Forwarded-* headers would be believed
        # (and one middleware less on every request).
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        log_config=None,
    )
    url = f"unix:{uds}" if uds else f"http://{host}:{port}"
    server = _Server(config, profile, url)
    try:
        server.run(sockets=sockets)
    finally:
        _cleanup(uds)
    if not server.started:
        raise ConfigError(f"the daemon could not listen on {url}")
