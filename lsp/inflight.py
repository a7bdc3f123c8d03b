"""One in-flight completion stream from the daemon, shared by every editor request that can
use it (the engine's own per-request state is `ling_local.engines.embedded.generation`).

It runs in its own task, not in the request handler's, so that a request the editor
cancels does not kill a generation that the next keystroke's request can still use
(typing-through an in-flight suggestion). When nobody is waiting for it any more it is
cancelled after a short grace, which closes the HTTP stream and so cancels the work in the
engine. It also stops reading (and so generating) as soon as post-processing says the rest
will not be shown: the block has ended, or the one line is complete.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from lsp.bridge import DaemonBridge
from lsp.context import Prompt
from lsp.postprocess import Shape, Site, complete_lines, finish, process

__all__ = ["CompletionOptions", "InflightCompletion"]

log = logging.getLogger(__name__)

ORPHAN_GRACE_S = 0.05
"""How long a generation nobody waits for lives on, for the next keystroke to join it."""
SPECULATIVE_TTL_S = 10.0


@dataclass(frozen=True, slots=True)
class CompletionOptions:
    max_tokens: int
    temperature: float | None = None
    seed: int | None = None
    key: str | None = None


class InflightCompletion:
    def __init__(
        self,
        *,
        before: str,
        after: str,
        prompt: Prompt,
        site: Site,
        shape: Shape,
        bridge: DaemonBridge,
        options: CompletionOptions,
        on_done: Callable[[InflightCompletion], None],
        speculative: bool = False,
    ) -> None:
        self.before, self.after = before, after
        self.prompt, self.site, self.shape = prompt, site, shape
        self.speculative = speculative
        self.raw = ""
        self.text = ""
        self.chunks = 0
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.cancelled = False
        self.shown = False
        self.detached = False
        """Answered early with its first lines: it lives on (bounded) for the next request."""
        self._progress = asyncio.Event()
        """Set once its text reached the editor (for the tokens-never-shown count)."""
        self.error: Exception | None = None
        self.started = time.perf_counter()
        self.ttft_s: float | None = None
        self._bridge, self._options, self._on_done = bridge, options, on_done
        self._waiters = 0
        self._orphan: asyncio.TimerHandle | None = None
        self._task = asyncio.ensure_future(self._run())
        if speculative:
            self._orphan = asyncio.get_running_loop().call_later(SPECULATIVE_TTL_S, self.cancel)

    @property
    def done(self) -> bool:
        return self._task.done()

    def usable_after(self, typed: str) -> bool:
        """Can a request whose cursor is `typed` characters further on use this one?"""
        if self.done:
            return False
        return not typed or self.raw.startswith(typed)

    async def _run(self) -> None:
        o = self._options
        stop = ["\n"] if not self.shape.multiline else None
        try:
            stream = await self._bridge.stream(
                self.prompt.prefix, self.prompt.suffix, max_tokens=o.max_tokens,
                temperature=o.temperature, seed=o.seed, stop=stop, priority="completion", key=o.key,
            )  # fmt: skip
            try:
                async for chunk in stream:
                    if self.ttft_s is None:
                        self.ttft_s = time.perf_counter() - self.started
                    self.chunks += 1
                    self.raw += chunk.text
                    self._progress.set()
                    if process(self.raw, self.site, self.shape)[1]:
                        break  # the rest would be cut anyway: stop generating it
                else:
                    self.completion_tokens = stream.usage.completion_tokens
                    self.prompt_tokens = stream.usage.prompt_tokens
            finally:
                await stream.aclose()
            self.text = finish(self.raw, self.site, self.shape)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        except Exception as err:  # reported by the completer, never fatal to the server
            self.error = err
        finally:
            if not self.completion_tokens:
                self.completion_tokens = self.chunks
            self._on_done(self)

    async def wait(self, early_s: float | None = None, beyond: int = 0) -> str:
        """The finished suggestion ('' for none). With `early_s`, a multi-line suggestion
        not finished by then is answered with its complete lines so far, and the generation
        goes on for the next request (the user accepting or typing through those lines).
        Cancelling the caller does not cancel the generation unless it was the last one
        waiting. `beyond`: a joining request needs more than this many characters."""
        self._waiters += 1
        if self._orphan is not None:
            self._orphan.cancel()
            self._orphan = None
        try:
            if early_s is not None and (early := await self._early(early_s, beyond)):
                self.detached = True
                return early
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.done() and self._task.cancelled():
                return ""
            raise
        finally:
            self._waiters -= 1
            if self._waiters == 0 and not self._task.done():
                loop = asyncio.get_running_loop()
                grace = SPECULATIVE_TTL_S if self.detached else ORPHAN_GRACE_S
                self._orphan = loop.call_later(grace, self.cancel)
        return self.text

    async def _early(self, early_s: float, beyond: int) -> str:
        """Complete lines (more than `beyond` characters) once `early_s` has passed, or ''
        when the task ends first."""
        remaining = self.started + early_s - time.perf_counter()
        if remaining > 0:
            await asyncio.wait({self._task}, timeout=remaining)
        while not self._task.done():
            text = complete_lines(self.raw, self.site, self.shape)
            if len(text) > beyond:
                return text
            self._progress.clear()
            progress = asyncio.ensure_future(self._progress.wait())
            try:
                await asyncio.wait({self._task, progress}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                progress.cancel()
        return ""

    def cancel(self) -> None:
        """Stop now: closes the HTTP stream, which cancels the generation in the engine."""
        if self._orphan is not None:
            self._orphan.cancel()
            self._orphan = None
        if not self._task.done():
            self._task.cancel()
