"""Handles on a running chain: `AsyncRun` (on the caller's event loop) and `Run` (sync).

Both hand out the run's events in order and can be cancelled; cancelling closes the HTTP
stream of the step that is generating, which cancels the generation in the daemon at once.
Leaving the `events()` loop early, or Ctrl-C in a sync run, cancels the run the same way;
it stays in the run log as 'cancelled' and can be resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from ling_local.agents.events import ChainError, ChainFinished, Event
from ling_local.agents.runner import RunContext, execute
from ling_local.errors import AgentError, ChainCancelled, LingLocalError, StepFailed

__all__ = ["AsyncRun", "Run"]

_END = object()


@contextlib.contextmanager
def _ctrl_c_cancels(cancel: Callable[[], None]) -> Iterator[threading.Event]:
    """While a sync run is driven from the main thread, SIGINT cancels the run (its stream is
    closed, so the daemon stops generating) and is remembered, so the caller can raise
    KeyboardInterrupt once the run has ended. asyncio.Runner's own SIGINT handling is per
    `run()` call: a Ctrl-C landing as one of those calls completes can be swallowed."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted.is_set():  # a second Ctrl-C: stop waiting for a clean end
            raise KeyboardInterrupt
        interrupted.set()
        cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


class AsyncRun:
    """Iterate `events()` or await `result()`; the run starts on the first of them."""

    def __init__(
        self, run_id: str, open_context: Callable[[], Awaitable[RunContext]], cleanup: Callable
    ) -> None:
        self.run_id = run_id
        self._open_context = open_context
        self._cleanup = cleanup
        self._queue: asyncio.Queue[Any] | None = None
        self._task: asyncio.Task | None = None
        self._ended = False
        self._index = -1
        self.finished: ChainFinished | None = None
        self.error: BaseException | None = None
        """Why the run stopped, once it has (None when it finished)."""

    def _start(self) -> None:
        if self._task is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(
                self._main(), name=f"chain-run-{self.run_id}"
            )

    def _emit(self, event: Event) -> None:
        self._index = getattr(event, "index", self._index)
        assert self._queue is not None
        self._queue.put_nowait(event)

    async def _main(self) -> None:
        ctx: RunContext | None = None
        try:
            ctx = await self._open_context()
            self.finished = await execute(ctx, self._emit)
        except asyncio.CancelledError:
            self.error = ChainCancelled(
                f"chain run {self.run_id} was cancelled; "
                f"resume it with `ling-local chain resume {self.run_id}`"
            )
            if ctx is None:  # cancelled before it started: still end the event stream
                self._emit(ChainError(self._index, "the run was cancelled", "cancelled"))
        except LingLocalError as err:
            self.error = err
            if ctx is None:
                self._emit(ChainError(-1, err.message, err.error_type))
        except Exception as err:  # a bug: report it like any failure, keep the traceback
            self.error = StepFailed(f"the chain runner failed: {type(err).__name__}: {err}")
            self.error.__cause__ = err
            self._emit(ChainError(self._index, self.error.message, "agent_error"))
        finally:
            await self._cleanup(ctx)
            assert self._queue is not None
            self._queue.put_nowait(_END)

    async def _next(self) -> Any:
        self._start()
        assert self._queue is not None
        item = await self._queue.get()
        if item is _END:
            self._ended = True
        return item

    async def _stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task})

    def cancel(self) -> None:
        """Stop the run (safe to call from any task of this loop, any number of times)."""
        if self._task is not None:
            self._task.cancel()

    async def events(self) -> AsyncIterator[Event]:
        """The run's events, in order, ending with ChainFinished or ChainError."""
        try:
            while not self._ended:
                item = await self._next()
                if item is _END:
                    return
                yield item
        finally:
            if not self._ended:  # the consumer left early or was cancelled
                await self._stop()

    async def result(self) -> ChainFinished:
        """Wait for the end; the outputs, or the error that stopped the run."""
        async for _ in self.events():
            pass
        if self.error is not None:
            raise self.error
        assert self.finished is not None
        return self.finished


class Run:
    """A chain run driven from sync code, on a private event loop in this thread."""

    def __init__(self, run_id: str, make: Callable[[], AsyncRun]) -> None:
        self.run_id = run_id
        self._make = make
        self._arun: AsyncRun | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def error(self) -> BaseException | None:
        return None if self._arun is None else self._arun.error

    def events(self) -> Iterator[Event]:
        """The run's events, in order. Ctrl-C (or leaving the loop) cancels the run."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise AgentError(
                "this thread is running an event loop: use `chain.astart()` / "
                "`await chain.arun()` instead of the sync API"
            )
        if self._arun is not None and self._arun._ended:
            return
        with asyncio.Runner() as runner, _ctrl_c_cancels(self._cancel_on_ctrl_c) as interrupted:
            self._loop = runner.get_loop()
            if self._arun is None:
                self._arun = runner.run(self._create())
            arun = self._arun
            try:
                while True:
                    item = runner.run(arun._next())
                    if item is _END:
                        break
                    yield item
            finally:
                if not arun._ended:  # Ctrl-C, an exception in the loop body, or a break
                    runner.run(arun._stop())
                self._loop = None
        if interrupted.is_set():
            raise KeyboardInterrupt

    async def _create(self) -> AsyncRun:
        return self._make()

    def _cancel_on_ctrl_c(self) -> None:
        if self._loop is None or self._arun is None:  # nothing runs yet: stop right here
            raise KeyboardInterrupt
        self.cancel()

    def cancel(self) -> None:
        """Stop the run; callable from another thread (e.g. a signal or UI handler)."""
        loop, arun = self._loop, self._arun
        if loop is not None and arun is not None:
            loop.call_soon_threadsafe(arun.cancel)

    def result(self) -> ChainFinished:
        for _ in self.events():
            pass
        assert self._arun is not None
        if self._arun.error is not None:
            raise self._arun.error
        assert self._arun.finished is not None
        return self._arun.finished
