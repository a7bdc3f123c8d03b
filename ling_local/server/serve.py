"""`ling-local serve`: the daemon in the foreground, on loopback TCP or a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

import uvicorn

from ling_local import discovery
from ling_local.config import Profile
from ling_local.engines.base import Engine, EngineState
from ling_local.errors import ConfigError
from ling_local.server.app import create_app
from ling_local.server.security import is_loopback_address
from ling_local.server.timeouts import read_deadline_protocol

__all__ = ["check_bind", "check_model_dirs", "run_daemon"]

log = logging.getLogger("ling_local.serve")


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless the user explicitly asked for it."""
    if not is_loopback_address(host) and not allow_remote:
        raise ConfigError(
            f"refusing to listen on {host or 'every interface (empty --host)'}: that exposes the model to the network. "
            "ling-local listens on 127.0.0.1 by default; pass --allow-remote (and put the "
            "daemon behind TLS) if you really mean it"
        )


class _Server(uvicorn.Server):
    """uvicorn, plus the discovery file once the socket is bound."""

    def __init__(
        self,
        config: uvicorn.Config,
        profile: Profile,
        url_hint: str,
        own_socket: tuple[int, int] | None,
    ) -> None:
        super().__init__(config)
        self.profile = profile
        self.url_hint = url_hint
        self.url = url_hint
        self.own_socket = own_socket

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        if self.config.uds is None and self.servers:
            port = self.servers[0].sockets[0].getsockname()[1]
            self.url = f"http://{_url_host(self.config.host)}:{port}"
        discovery.write_daemon_info(self.url, self.profile.name, self.profile.served_model_name)
        asyncio.get_running_loop().create_task(self._announce_ready())

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:  # said at once: the rest takes up to a decode step or two
            sys.stderr.write("ling-local: stopping… (Ctrl-C again to force)\n")
            sys.stderr.flush()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Cancel the engine's work first: the streams then end within a decode step, and
        # uvicorn's graceful wait for open connections is over at once instead of timing out.
        stopped = self.config.app.state.daemon.scheduler.cancel_all("shutdown")  # type: ignore[union-attr]
        if stopped:
            log.info("stopping: cancelled %d request(s)", stopped)
        # uvicorn re-raises SIGTERM/SIGINT after run() returns, so clean up here, not later.
        try:
            await super().shutdown(sockets)
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        discovery.remove_daemon_info()
        _remove_own_socket(self.config.uds, self.own_socket)

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


def _bind_unix(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """A unix socket at `path` that only this user can connect to (mode 0600). Whatever is
    at `path` already is left alone unless it is the socket of a daemon that is gone.
    Returns the socket and its file's identity (device, inode) for the clean-up."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(f"refusing to listen on {path}: a file that is not a socket is there")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # a stale socket from a crashed daemon
        else:
            raise ConfigError(f"refusing to listen on {path}: another process listens there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The socket file is created by bind() with the umask's mode: no moment at 0666.
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as err:
        sock.close()
        raise ConfigError(f"the daemon could not listen on {path}: {err.strerror}") from None
    finally:
        os.umask(old_umask)
    st = os.lstat(path)
    sock.set_inheritable(True)
    return sock, (st.st_dev, st.st_ino)


def _remove_own_socket(path: str | None, identity: tuple[int, int] | None) -> None:
    """Delete the unix socket this daemon created, and nothing that replaced it."""
    if path is None or identity is None:
        return
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == identity:
            os.unlink(path)


def check_model_dirs(profile: Profile) -> None:
    """The embedded engine reads local directories only: a missing one is a profile
    error now, not an engine that fails to start in the background."""
    if profile.engine.kind != "torch":
        return
    m = profile.model
    fields = [("model.path", m.path), ("model.tokenizer_path", m.tokenizer_path)]
    if profile.engine.speculative in ("draft", "auto"):
        fields.append(("model.draft_path", m.draft_path))
    for name, value in fields:
        directory = profile.resolve_path(value)
        if directory is not None and not directory.is_dir():
            raise ConfigError(
                f"model directory {directory} not found ({name} of profile {profile.name})"
            )


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
    if engine is None:  # a given engine (the benchmarks' token source) reads no files
        check_model_dirs(profile)
    if uds is None:
        check_bind(host, allow_remote)
        sockets = [_bind_tcp(host, port)]  # fail now, before the model loads
        own_socket = None
    else:
        unix, own_socket = _bind_unix(uds)
        sockets = [unix]
    token = discovery.ensure_token()
    app = create_app(
        profile,
        token=token,
        engine=engine,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        uds=uds,
        http=read_deadline_protocol(profile.limits.request_read_timeout_s),
        timeout_keep_alive=5,
        log_level=log_level if log_level != "info" else "warning",
        access_log=False,
        # Loopback only: no proxy in front whose X-Forwarded-* headers would be believed
        # (and one middleware less on every request).
        proxy_headers=False,
        lifespan="on",
        # Work is cancelled before the wait (`_Server.shutdown`): this only bounds a client
        # that does not read its stream's end.
        timeout_graceful_shutdown=1,
        log_config=None,
    )
    url = f"unix:{uds}" if uds else f"http://{_url_host(host)}:{port}"
    server = _Server(config, profile, url, own_socket)
    if threading.current_thread() is threading.main_thread():
        # After a graceful stop uvicorn raises the signal again. With the default action
        # the process then ends at once, as killed by Ctrl-C (a shell sees 130), instead of
        # unwinding a KeyboardInterrupt through interpreter shutdown, whose last garbage
        # collection walked the model's objects (~3 s on a busy 2-core machine).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        server.run(sockets=sockets)
    finally:
        server.cleanup()
    if not server.started:
        raise ConfigError(f"the daemon could not listen on {url}")


def _url_host(host: str) -> str:
    """How a client on this machine reaches a daemon bound to `host` (a wildcard address
    is reached through loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host.strip("[]") == "::":
        return "[::1]"
    return f"[{host.strip('[]')}]" if ":" in host else host
