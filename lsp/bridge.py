"""The language server's only way to the model: the daemon, through the SDK's AsyncClient.

It finds the daemon the way every client does (runtime file or LING_LOCAL_URL), can start
one (`ling-local serve` in its own session, left running for the other clients), and turns
the failures a user can fix into one clear message each, not one per keystroke.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from ling_local import paths
from ling_local.client import AsyncClient, AsyncStream
from ling_local.errors import DaemonUnavailable, EngineNotReady, LingLocalError

__all__ = ["DaemonBridge"]

log = logging.getLogger(__name__)

Notify = Callable[[str, str], None]
"""notify(kind, message): kind is 'error' | 'warning' | 'info' (shown) or 'log'."""

SLOW_TTFT_S = 2.0
START_TIMEOUT_S = 180.0
RESTART_BACKOFF_S = 60.0


class DaemonBridge:
    def __init__(self, profile: str, *, start_daemon: bool, notify: Notify) -> None:
        self.profile = profile
        self.start_daemon = start_daemon
        self.notify = notify
        self._client: AsyncClient | None = None
        self._told: set[str] = set()
        self._starting: asyncio.Task[bool] | None = None
        self._last_start = 0.0
        self._tasks: set[asyncio.Future[Any]] = set()
        self.daemon_profile: str | None = None
        self.context_length: int | None = None
        self.on_starting: Callable[[bool], None] | None = None
        """Called with True when this server starts a daemon, False when it is up."""
        self.on_ready: Callable[[], None] | None = None
        """Called whenever a ready daemon is (re)found: its profile and context may differ."""

    # ------------------------------------------------------------------ messages
    def tell_once(self, key: str, kind: str, message: str) -> None:
        if key in self._told:
            log.debug("%s", message)  # told already: not again on every keystroke
            return
        self._told.add(key)
        self.notify(kind, message)

    def _connected(self) -> None:
        if "unavailable" in self._told or "loading" in self._told:
            self.notify("info", "ling-local: connected to the daemon; completions are back.")
        self._told -= {"unavailable", "loading"}

    # ------------------------------------------------------------------ connection
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient()
        return self._client

    async def _reset_client(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def check(self) -> str:
        """'ready', 'loading' (a daemon answers, its engine is not ready) or 'down'."""
        try:
            health = await self.client().health()
        except DaemonUnavailable:
            await self._reset_client()  # the next try re-reads the discovery file
            return "down"
        except LingLocalError as err:  # e.g. a token mismatch: say so, it is fixable
            self.tell_once("auth", "error", f"ling-local: the daemon refused us: {err.message}")
            return "down"
        self.daemon_profile = health.profile
        if not health.ready:
            return "loading"
        try:
            models = await self.client().models()
            self.context_length = models[0].context_length if models else None
        except LingLocalError as err:
            log.info("cannot read /v1/models: %s", err)
        self._connected()
        if self.on_ready is not None:
            self.on_ready()
        return "ready"

    async def _wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = await self.check()
            if state == "ready":
                return True
            if state == "down":
                return False
            await asyncio.sleep(0.25)
        return False

    async def ensure(self) -> bool:
        """Connect, starting a daemon when allowed; report what the user can do."""
        state = await self.check()
        if state == "ready":
            return True
        if state == "loading":
            self.tell_once("loading", "info", "ling-local: the daemon is loading the model.")
            return await self._wait_ready()
        if self.start_daemon:
            if self._starting is None or self._starting.done():
                if time.monotonic() - self._last_start < RESTART_BACKOFF_S:
                    return False
                self._starting = asyncio.ensure_future(self._start())
            return await asyncio.shield(self._starting)
        self.unavailable()
        return False

    def unavailable(self) -> None:
        self.tell_once(
            "unavailable",
            "warning",
            "ling-local: no daemon answers, so there are no completions. Start it with "
            "`ling-local serve` (or drop --no-start-daemon); completions resume by themselves.",
        )

    async def _start(self) -> bool:
        self._last_start = time.monotonic()
        log_file = paths.ensure_private_dir(paths.log_dir()) / "daemon-from-lsp.log"
        cmd = [sys.executable, "-m", "ling_local", "serve", "--profile", self.profile,
               "--port", "0"]  # fmt: skip
        self.notify("log", f"ling-local: starting the daemon: {' '.join(cmd)} (log {log_file})")
        if self.on_starting:
            self.on_starting(True)
        try:
            with open(log_file, "ab") as out:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    self.tell_once(
                        "start-failed", "error",
                        f"ling-local: the daemon exited with code {proc.returncode} while "
                        f"starting; see {log_file} or run `ling-local doctor`.",
                    )  # fmt: skip
                    return False
                await self._reset_client()
                if await self.check() == "ready":
                    self.notify("log", f"ling-local: daemon started (pid {proc.pid})")
                    return True
                await asyncio.sleep(0.25)
            self.tell_once(
                "start-failed", "error",
                f"ling-local: the daemon did not become ready in {START_TIMEOUT_S:.0f}s; "
                f"see {log_file}.",
            )  # fmt: skip
            return False
        except OSError as err:
            self.tell_once("start-failed", "error", f"ling-local: cannot start the daemon: {err}")
            return False
        finally:
            if self.on_starting:
                self.on_starting(False)

    # ------------------------------------------------------------------ requests
    async def stream(self, prefix: str, suffix: str, **options: Any) -> AsyncStream:
        """Open a completion stream (FIM when `suffix`); errors the user can fix are told
        once and re-raised."""
        try:
            stream = await self.client().stream_complete(prefix, suffix=suffix, **options)
        except DaemonUnavailable:
            self.lost()
            raise
        except EngineNotReady as err:
            self.tell_once("loading", "info", f"ling-local: the model is not ready yet ({err})")
            raise
        if self._told & {"unavailable", "loading"}:  # it is back: re-read its facts
            self._spawn(self.check())
        return stream

    def lost(self) -> None:
        """The daemon went away (refused, or died mid-stream): find it again next time,
        start a new one when allowed, and tell the user once."""
        if not self.start_daemon:
            self._spawn(self._reset_client())
            self.unavailable()
        elif self._starting is None or self._starting.done():
            self._spawn(self._reset_then_ensure())

    async def _reset_then_ensure(self) -> None:
        await self._reset_client()
        await self.ensure()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def observe_ttft(self, seconds: float) -> None:
        if seconds > SLOW_TTFT_S:
            self.tell_once(
                "slow", "warning",
                f"ling-local: completions take {seconds:.1f}s to start. The engine is busy "
                "or too slow for this machine; `ling-local doctor` shows why.",
            )  # fmt: skip

    async def aclose(self) -> None:
        for task in [self._starting, *self._tasks]:
            if task is not None and not task.done():
                task.cancel()
        await self._reset_client()
