"""The concurrency-1 arbiter between the daemon's clients and the engine.

- Priorities: completion (keystrokes) before chat before agents; FIFO within a priority.
- One generation at a time by default (`max_running`).
- A strictly higher-priority request does not wait behind a running one when the engine can
  pause between tokens (embedded engine) or run streams side by side (SGLang): `preempt`.
- Supersede by key: a new request with the same key (an editor document) cancels the old
  one in the engine, queued or running.
- Accounting: queue wait, cancelled requests by reason, and the tokens they cost.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from ling_local.config import SchedulerSettings
from ling_local.engines.base import Delta, Engine, GenerationRequest, GenerationStats
from ling_local.errors import EngineNotReady, GenerationCancelled, Overloaded
from ling_local.metrics import Metrics

__all__ = ["Scheduler"]

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Ticket:
    request: GenerationRequest
    key: str | None
    seq: int
    enqueued: float
    admitted: asyncio.Event = field(default_factory=asyncio.Event)
    running: bool = False
    done: bool = False
    cancel_reason: str | None = None

    @property
    def order(self) -> tuple[int, int]:
        return (int(self.request.priority), self.seq)

    def __lt__(self, other: _Ticket) -> bool:
        return self.order < other.order


class Scheduler:
    def __init__(self, engine: Engine, settings: SchedulerSettings, metrics: Metrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self._queue: list[_Ticket] = []
        self._running: list[_Ticket] = []
        self._by_key: dict[str, _Ticket] = {}
        self._aborts: set[asyncio.Future] = set()
        self._seq = itertools.count()

    # ------------------------------------------------------------------ public
    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def check_capacity(self) -> None:
        """Raise Overloaded before a response starts when the queue is full."""
        if len(self._queue) >= self.settings.max_queue:
            raise Overloaded(f"{len(self._queue)} requests are already waiting; try again")

    async def stream(
        self, request: GenerationRequest, *, key: str | None = None
    ) -> AsyncIterator[Delta]:
        """Run one request through the engine in its turn; yields the engine's deltas.

        Raises GenerationCancelled when superseded before it started. Closing the iterator
        early (client gone) cancels the generation in the engine at once."""
        self.check_capacity()
        ticket = self._enqueue(request, key)
        request_on_finish = request.on_finish
        request.on_finish = lambda stats: self._on_finish(ticket, stats, request_on_finish)
        finished = failed = False
        try:
            await self._wait_admitted(ticket)
            async with aclosing(self.engine.stream(request)) as deltas:
                async for delta in deltas:
                    if delta.finish_reason is not None:
                        finished = True
                    yield delta
        except Exception:
            # The request failed (an engine error, a queue timeout): not a client that left.
            failed = ticket.cancel_reason is None
            if failed:
                priority = request.priority.name.lower()
                self.metrics.requests.labels(priority, "error").inc()
            raise
        finally:
            if not finished and not failed and ticket.cancel_reason is None:
                ticket.cancel_reason = "disconnected"
            if not finished:
                request.cancel()
                if ticket.running:
                    await _quietly(self.engine.abort(request))
            self._release(ticket)

    def cancel_all(self, reason: str) -> int:
        """Cancel every queued and running request in the engine (the daemon is stopping);
        their streams end with finish_reason 'cancelled'. Returns how many there were."""
        tickets = [*self._running, *self._queue]
        for ticket in tickets:
            self._cancel(ticket, reason)
        return len(tickets)

    # ------------------------------------------------------------------ internals
    def _enqueue(self, request: GenerationRequest, key: str | None) -> _Ticket:
        ticket = _Ticket(request, key, next(self._seq), time.perf_counter())
        if key is not None:
            old = self._by_key.get(key)
            if old is not None and not old.done:
                self._cancel(old, "superseded")
            self._by_key[key] = ticket
        heapq.heappush(self._queue, ticket)
        self.metrics.queued.set(len(self._queue))
        self._pump()
        return ticket

    def _cancel(self, ticket: _Ticket, reason: str) -> None:
        ticket.cancel_reason = reason
        ticket.request.cancel()
        if not ticket.running and ticket in self._queue:
            self._queue.remove(ticket)
            heapq.heapify(self._queue)
            self.metrics.queued.set(len(self._queue))
            ticket.admitted.set()  # wakes the waiter, which sees the cancel
        elif ticket.running:
            # Keep a reference: the event loop holds tasks only weakly.
            task = asyncio.ensure_future(_quietly(self.engine.abort(ticket.request)))
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)

    async def _wait_admitted(self, ticket: _Ticket) -> None:
        try:
            if not ticket.admitted.is_set():  # the usual case is admitted at once: no timer
                await asyncio.wait_for(ticket.admitted.wait(), self.settings.queue_timeout_s)
        except TimeoutError:
            raise EngineNotReady(
                f"waited {self.settings.queue_timeout_s:.0f}s for the engine; it is busy"
            ) from None
        if ticket.request.cancelled:
            raise GenerationCancelled(
                "superseded by a newer request"
                if ticket.cancel_reason == "superseded"
                else "cancelled before it started"
            )
        wait = time.perf_counter() - ticket.enqueued
        self.metrics.queue_wait.labels(ticket.request.priority.name.lower()).observe(wait)
        ticket.request.queue_s = wait

    def _can_admit(self, ticket: _Ticket) -> bool:
        if len(self._running) < self.settings.max_running:
            return True
        if not self.settings.preempt:
            return False
        engine = self.engine
        if not (engine.supports_preemption or engine.supports_concurrency):
            return False
        # Strictly higher priority than everything running: pause them (or run beside).
        # At most one extra stream per priority level, so this stays bounded.
        return all(ticket.order[0] < r.order[0] for r in self._running)

    def _pump(self) -> None:
        while self._queue and self._can_admit(self._queue[0]):
            ticket = heapq.heappop(self._queue)
            ticket.running = True
            self._running.append(ticket)
            ticket.admitted.set()
        self.metrics.queued.set(len(self._queue))
        self.metrics.running.set(len(self._running))

    def _release(self, ticket: _Ticket) -> None:
        ticket.done = True
        if ticket in self._running:
            self._running.remove(ticket)
        elif ticket in self._queue:
            self._queue.remove(ticket)
            heapq.heapify(self._queue)
        if ticket.key is not None and self._by_key.get(ticket.key) is ticket:
            del self._by_key[ticket.key]
        if ticket.cancel_reason is not None:
            self.metrics.cancelled.labels(ticket.cancel_reason).inc()
        self._pump()

    def _on_finish(self, ticket: _Ticket, stats: GenerationStats, chained) -> None:
        """Called by the engine when a generation ends, whoever was still listening."""
        m = self.metrics
        priority = ticket.request.priority.name.lower()
        m.requests.labels(priority, stats.finish_reason).inc()
        m.prompt_tokens.inc(stats.prompt_tokens)
        m.cached_tokens.inc(stats.cached_tokens)
        m.completion_tokens.inc(stats.completion_tokens)
        if stats.ttft_s is not None:
            m.ttft.labels(priority).observe(stats.ttft_s)
        if stats.tpot_s is not None:
            m.tpot.labels(priority).observe(stats.tpot_s)
        if stats.accept_length is not None:
            m.accept_length.observe(stats.accept_length)
        if stats.finish_reason == "cancelled":
            m.cancelled_tokens.inc(stats.completion_tokens)
        if chained is not None:
            chained(stats)


async def _quietly(awaitable) -> None:
    try:
        await awaitable
    except Exception:  # aborting something already gone is not an error
        log.debug("abort failed", exc_info=True)
