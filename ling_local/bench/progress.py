"""Progress of a benchmark on stderr: a live bar on a terminal, plain lines anywhere else.

A live bar draws nothing into a pipe, a file or a CI log, so a benchmark that runs for
minutes looked hung there; off a terminal each step is a line instead, at most one every
few seconds per task (and always the last). Results keep stdout to themselves."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["PlainProgress", "progress", "status"]


def progress(enabled: bool = True, *, transient: bool = True) -> Any:
    """A context manager with rich Progress's `add_task`, `update` and `advance`."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if enabled and not console.is_terminal:
        return PlainProgress(sys.stderr)
    return Progress(console=console, transient=transient, disable=not enabled)


def status(console: Any, message: str) -> Any:
    """`console.status(message)` (a spinner whose `update` changes the message) on a
    terminal; elsewhere each message is a line on stderr."""
    return console.status(message) if console.is_terminal else _PlainStatus(message)


class _PlainStatus:
    def __init__(self, message: str) -> None:
        self._t0 = time.monotonic()
        self.update(message)

    def __enter__(self) -> _PlainStatus:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def update(self, message: str) -> None:
        sys.stderr.write(f"{message} ({time.monotonic() - self._t0:.0f} s)\n")
        sys.stderr.flush()


class PlainProgress:
    def __init__(self, stream: TextIO, every_s: float = 5.0) -> None:
        self.stream = stream
        self.every_s = every_s
        self._tasks: list[dict[str, Any]] = []
        self._t0 = time.monotonic()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        self._tasks.append({"description": description, "total": total, "done": 0, "said": 0.0})
        self._say(len(self._tasks) - 1)
        return len(self._tasks) - 1

    def update(
        self,
        task: int,
        *,
        advance: float = 0,
        completed: float | None = None,
        description: str | None = None,
        **_: Any,
    ) -> None:
        state = self._tasks[task]
        state["done"] = completed if completed is not None else state["done"] + advance
        renamed = description is not None and description != state["description"]
        if description is not None:
            state["description"] = description
        finished = state["total"] is not None and state["done"] >= state["total"]
        if renamed or finished or time.monotonic() - state["said"] >= self.every_s:
            self._say(task)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def _say(self, task: int) -> None:
        state = self._tasks[task]
        state["said"] = now = time.monotonic()
        total = state["total"]
        count = f"{state['done']:g}/{total:g}" if total is not None else f"{state['done']:g}"
        self.stream.write(f"{state['description']}: {count} ({now - self._t0:.0f} s)\n")
        self.stream.flush()
