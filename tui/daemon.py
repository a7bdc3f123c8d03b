"""The TUI's handle on the daemon: a client, its health, and what to tell the person.

The daemon may start, stop or move (a restart on another port writes a new runtime file)
while the TUI is open, so the link re-reads discovery whenever the daemon cannot be reached
instead of holding one client forever.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ling_local import discovery
from ling_local.client import DEFAULT_URL, AsyncClient
from ling_local.errors import DaemonUnavailable, LingLocalError

__all__ = ["DaemonLink", "DaemonStatus"]

START_HINT = "start it with `ling-local serve`"


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """One health check, reduced to what the footer shows."""

    state: str
    """checking | ready | starting | failed | stopped | down | error"""
    engine: str = ""
    model: str = ""
    profile: str = ""
    detail: str = ""
    url: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def summary(self) -> str:
        """The footer's short line."""
        if self.state == "checking":
            return "daemon: checking…"
        if self.state == "down":
            return f"daemon down · {START_HINT}"
        if self.state == "error":
            return f"daemon error · {self.detail}"
        return f"{self.state} · {self.engine} · {self.model}"

    def advice(self) -> str:
        """A sentence that says what to do, for the chat area and error notices."""
        if self.state == "down":
            return (
                f"The ling-local daemon is not running (nothing answers at {self.url}). "
                f"Start it in another terminal with `ling-local serve`; this screen notices "
                "by itself when it is up."
            )
        if self.state == "starting":
            return f"The engine is starting ({self.model}); replies can be sent once it is ready."
        if self.state == "failed":
            return (
                f"The engine failed to start: {self.detail}. "
                "Run `ling-local doctor` and read the daemon log."
            )
        if self.state == "error":
            return self.detail
        return f"Ready: {self.model} on the {self.engine} engine (profile {self.profile})."


def _warm_up() -> None:
    """What the first reply would otherwise load on its way to the screen: the stream's HTTP
    client (the SDK imports aiohttp on its first stream) and the Python highlighter."""
    import aiohttp  # noqa: F401
    from textual.highlight import highlight

    highlight("def f():\n    return 1\n", language="python")


class DaemonLink:
    """Owns the AsyncClient. Explicit url/token pin it; otherwise discovery decides."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self._pinned = url is not None
        self._token = token
        self.client = AsyncClient(url, token)
        self._warm = False

    @property
    def url(self) -> str:
        return self.client.base_url

    async def _rediscover(self) -> None:
        if self._pinned:
            return
        url = discovery.daemon_url() or DEFAULT_URL
        token = self._token or discovery.read_token()
        if url.rstrip("/") != self.client.base_url or token != self.client.token:
            old, self.client = self.client, AsyncClient(url, token)
            await old.aclose()

    async def status(self) -> DaemonStatus:
        try:
            health = await self.client.health()
        except DaemonUnavailable:
            await self._rediscover()
            try:
                health = await self.client.health()
            except DaemonUnavailable:
                return DaemonStatus("down", url=self.url)
            except LingLocalError as err:
                return DaemonStatus("error", detail=err.message, url=self.url)
        except LingLocalError as err:
            return DaemonStatus("error", detail=err.message, url=self.url)
        if health.ready and not self._warm:
            self._warm = True
            await asyncio.to_thread(_warm_up)
        return DaemonStatus(
            health.state, health.engine, health.model, health.profile, health.detail, self.url
        )

    async def aclose(self) -> None:
        await self.client.aclose()
