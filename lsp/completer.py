"""From a cursor position to ghost text: gate, typing-through cache, joining the generation
in flight, debounce, context, generation, post-processing. The server wires it to LSP.

Every generation carries `key=<document uri>` and `priority="completion"`, so the daemon's
scheduler cancels the previous one for the same document in the engine as soon as a new
one arrives; a generation is also cancelled here as soon as it cannot be used any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ling_local.errors import ContextLengthExceeded, DaemonUnavailable, LingLocalError
from lsp.bridge import DaemonBridge
from lsp.context import CursorContextBuilder, Prompt, Snapshot, Snippet
from lsp.inflight import CompletionOptions, InflightCompletion
from lsp.postprocess import plan, refit
from lsp.retrieval import WorkspaceIndex
from lsp.settings import LspSettings
from lsp.similar import OpenDocuments
from lsp.telemetry import Stats, Telemetry
from lsp.tokens import TokenCounter
from lsp.trigger import SuggestionCache, TypingTracker, should_request

__all__ = ["Completer", "Documents", "Suggestion"]

log = logging.getLogger(__name__)

QUERY_LINES = 15
"""Lines before the cursor used as the workspace-retrieval query."""


class Documents(Protocol):
    """What the completer needs to know about the editor's open documents."""

    def version(self, uri: str) -> int | None: ...

    def others(self, uri: str) -> list[tuple[str, str, int | None, str]]:
        """(uri, display path, version, text) of the open documents but `uri`."""
        ...


@dataclass(frozen=True, slots=True)
class Suggestion:
    text: str
    source: str
    """model | join | cache"""
    latency_ms: float


class Completer:
    def __init__(
        self,
        *,
        bridge: DaemonBridge,
        counter: TokenCounter,
        builder: CursorContextBuilder,
        documents: Documents,
        settings: Callable[[], LspSettings],
        telemetry: Telemetry,
        workspace: WorkspaceIndex | None = None,
    ) -> None:
        self.bridge, self.counter, self.builder = bridge, counter, builder
        self.documents, self.settings, self.telemetry = documents, settings, telemetry
        self.workspace = workspace
        self.stats = Stats()
        self.cache = SuggestionCache()
        self.typing = TypingTracker()
        self.open_docs = OpenDocuments()
        self._inflight: dict[str, InflightCompletion] = {}
        self._seq: dict[str, int] = {}
        self._snippets: dict[str, tuple[tuple, list[Snippet]]] = {}
        self._retrieval: tuple[tuple, asyncio.Future[list[Snippet]]] | None = None
        self.last_prompt: Prompt | None = None
        """The last prompt sent, for `ling-local.stats` (is my context reaching the model?)."""

    # ------------------------------------------------------------------ document events
    def changed(self, uri: str) -> None:
        self.typing.changed(uri)

    def closed(self, uri: str) -> None:
        for forget in (self.cache.forget, self.typing.forget, self.open_docs.forget,
                       self.builder.forget):  # fmt: skip
            forget(uri)
        self._snippets.pop(uri, None)
        gen = self._inflight.pop(uri, None)
        if gen is not None:
            gen.cancel()

    # ------------------------------------------------------------------ completion
    async def complete(self, snap: Snapshot, *, invoked: bool = False) -> Suggestion | None:
        t0 = time.perf_counter()
        st, s = self.stats, self.settings()
        st.requests += 1
        site = snap.site()
        if not s.enable or not should_request(site, invoked=invoked):
            st.gated += 1
            return None
        hit = self.cache.lookup(snap.uri, snap.before, snap.after)
        if hit is not None and (text := refit(hit[0], site)):
            st.cache_hits += 1
            return self._shown(snap, text, "cache", t0, hit[1])
        gen = self._inflight.get(snap.uri)
        if gen is not None and self._joinable(gen, snap):
            st.joined += 1
            typed = len(snap.before) - len(gen.before)
            text = await gen.wait(self._early_s(gen, s), beyond=typed)
            if gen.detached and text:
                self.cache.put(snap.uri, gen.before, gen.after, text, gen)
            hit = self.cache.lookup(snap.uri, snap.before, snap.after)
            if hit is not None and (text := refit(hit[0], site)):
                return self._shown(snap, text, "join", t0, hit[1])
            return None
        if gen is not None:
            gen.cancel()  # stale: the user typed something else
        seq = self._seq[snap.uri] = self._seq.get(snap.uri, 0) + 1
        if not invoked:
            delay = self.typing.delay_s(s.debounce_ms, s.debounce_min_ms, s.debounce_max_ms)
            wait = self.typing.wait_s(snap.uri, delay)
            if wait > 0:
                await asyncio.sleep(wait)
            if self._seq.get(snap.uri) != seq or self.documents.version(snap.uri) != snap.version:
                st.superseded += 1
                return None
        t_debounced = time.perf_counter()
        snippets = await self._gather(snap, t_debounced, s)
        gen = self._start(snap, snippets, s)
        timing = {
            "debounce_ms": round((t_debounced - t0) * 1000, 1),
            "context_ms": round((gen.started - t_debounced) * 1000, 2),
        }
        text = await gen.wait(self._early_s(gen, s))
        if gen.detached and text and not gen.done:  # early: typing through these lines
            st.early += 1  # must not need the model
            self.cache.put(snap.uri, gen.before, gen.after, text, gen)
        if self._seq.get(snap.uri) != seq or self.documents.version(snap.uri) != snap.version:
            st.stale += 1
            return None
        if not text:
            return None
        timing["ttft_ms"] = round((gen.ttft_s or 0.0) * 1000, 1)
        return self._shown(snap, text, "model", t0, gen, timing)

    @staticmethod
    def _early_s(gen: InflightCompletion, s: LspSettings) -> float | None:
        if not gen.shape.multiline or s.first_lines_ms is None:
            return None
        return s.first_lines_ms / 1000

    def _joinable(self, gen: InflightCompletion, snap: Snapshot) -> bool:
        if gen.after != snap.after or not snap.before.startswith(gen.before):
            return False
        return gen.usable_after(snap.before[len(gen.before) :])

    def _start(
        self, snap: Snapshot, snippets: list[Snippet], s: LspSettings, speculative: bool = False
    ) -> InflightCompletion:
        old = self._inflight.get(snap.uri)
        if old is not None:
            old.cancel()
        site = snap.site()
        prompt = self.last_prompt = self.builder.build(snap, snippets)
        gen = InflightCompletion(
            before=snap.before, after=snap.after, prompt=prompt, site=site,
            shape=plan(site, s.max_lines), bridge=self.bridge,
            options=CompletionOptions(s.max_tokens, s.temperature, s.seed, key=snap.uri),
            on_done=lambda g: self._finished(snap.uri, g), speculative=speculative,
        )  # fmt: skip
        self._inflight[snap.uri] = gen
        self.stats.generations += 1
        self.stats.speculative += speculative
        return gen

    def _finished(self, uri: str, gen: InflightCompletion) -> None:
        st = self.stats
        if self._inflight.get(uri) is gen:
            del self._inflight[uri]
        st.tokens_generated += gen.completion_tokens
        if gen.cancelled:
            st.cancelled += 1
            return
        if gen.error is not None:
            st.failed += 1
            if isinstance(gen.error, ContextLengthExceeded):
                self.counter.shrink()
            elif isinstance(gen.error, DaemonUnavailable) and gen.chunks:
                self.bridge.lost()  # died mid-stream (a refused connection is handled there)
            if not isinstance(gen.error, LingLocalError):
                log.error("generation failed", exc_info=gen.error)
            else:
                log.info("generation failed: %s", gen.error)
            return
        if gen.prompt_tokens:
            self.counter.observe(len(gen.prompt.prefix) + len(gen.prompt.suffix),
                                 gen.prompt_tokens)  # fmt: skip
        else:
            st.stopped_early += 1
        if gen.ttft_s is not None:
            self.bridge.observe_ttft(gen.ttft_s)
        if not gen.text:
            st.empty += 1
            return
        self.cache.put(uri, gen.before, gen.after, gen.text, gen)

    def _shown(
        self,
        snap: Snapshot,
        text: str,
        source: str,
        t0: float,
        owner: object | None,
        timing: dict[str, float] | None = None,
    ) -> Suggestion:
        st = self.stats
        st.shown += 1
        if isinstance(owner, InflightCompletion) and not owner.shown:
            owner.shown = True
            share = min(1.0, len(owner.text) / max(len(owner.raw), 1))
            st.tokens_shown += round(owner.completion_tokens * share)
        latency_ms = (time.perf_counter() - t0) * 1000
        self.telemetry.record(
            "shown", lang=snap.language_id, chars=len(text), lines=text.count("\n") + 1,
            source=source, latency_ms=round(latency_ms, 1), **(timing or {}),
        )  # fmt: skip
        return Suggestion(text, source, latency_ms)

    # ------------------------------------------------------------------ context
    async def _gather(self, snap: Snapshot, started: float, s: LspSettings) -> list[Snippet]:
        """Snippets for the prompt within the per-request time budget. They are chosen once
        per cursor line, so the prompt's start stays the same while the user types."""
        ws = self.workspace if s.context.workspace else None
        if not (s.context.open_documents or ws):
            return []
        key = (snap.line, s.context.open_documents, ws.version if ws else -1)
        cached = self._snippets.get(snap.uri)
        if cached is not None and cached[0] == key:
            return cached[1]
        deadline = started + s.context_budget_ms / 1000
        found: list[Snippet] = []
        if s.context.open_documents:
            found += self.open_docs.similar(
                snap, self.documents.others(snap.uri), deadline=deadline
            )
        complete = True
        if ws is not None and ws.ready:
            query = "\n".join(snap.before.rsplit("\n", QUERY_LINES)[-QUERY_LINES:])
            future = self._retrieval_future((snap.uri, *key), ws, query, snap.path)
            try:
                timeout = max(0.0, deadline - time.perf_counter())
                found += await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError:
                complete = False  # the next keystroke on this line will have it
            except Exception as err:
                log.warning("workspace retrieval failed: %s", err)
        unique = list({sn.text: sn for sn in found}.values())
        if complete:
            self._snippets[snap.uri] = (key, unique)
        return unique

    def _retrieval_future(
        self, key: tuple, ws: WorkspaceIndex, query: str, path: str
    ) -> asyncio.Future[list[Snippet]]:
        if self._retrieval is not None and self._retrieval[0] == key:
            return self._retrieval[1]
        future = asyncio.ensure_future(asyncio.to_thread(ws.query, query, exclude_path=path))
        self._retrieval = (key, future)
        return future

    # ------------------------------------------------------------------ acceptance
    def accepted(self, snap: Snapshot | None, chars: int, lines: int, language_id: str) -> None:
        """The user took a suggestion; `snap` is the document right after it (or None when
        it no longer holds the text). Prepares the next suggestion at once."""
        self.stats.accepted += 1
        self.telemetry.record("accepted", lang=language_id, chars=chars, lines=lines)
        s = self.settings()
        if snap is None or not s.enable or not s.speculative:
            return
        if not should_request(snap.site(), invoked=False):
            return
        if self.cache.lookup(snap.uri, snap.before, snap.after) is not None:
            return
        gen = self._inflight.get(snap.uri)
        if gen is not None:
            if self._joinable(gen, snap):
                return
            gen.cancel()
        cached = self._snippets.get(snap.uri)
        self._start(snap, cached[1] if cached else [], s, speculative=True)

    async def aclose(self) -> None:
        for gen in list(self._inflight.values()):
            gen.cancel()
        self._inflight.clear()
