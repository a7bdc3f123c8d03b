"""The terminal view of a running chain (``ling-local chain run``), drawn from its events."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ling_local.agents.events import (
    ChainError,
    ChainFinished,
    Event,
    RunStarted,
    StepFinished,
    StepRetry,
    StepSkipped,
    StepStarted,
    Token,
)

__all__ = ["ChainDisplay", "format_output"]

_TAIL_LINES = 12


@dataclass
class _Row:
    name: str
    status: str = "pending"  # pending | running | done | skipped | failed
    tokens: int = 0
    seconds: float | None = None
    started: float = 0.0
    attempts: int = 1
    note: str = ""


def format_output(value: Any, limit: int | None = 2000) -> str:
    if hasattr(value, "model_dump_json"):
        text = value.model_dump_json(indent=2)
    elif isinstance(value, str):
        text = value
    else:
        import json

        from ling_local.agents.events import jsonable

        try:
            text = json.dumps(value, indent=2, default=jsonable, ensure_ascii=False)
        except TypeError:
            text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return text


class ChainDisplay:
    """Feed it every event; it keeps a live table of the steps and the current step's text."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.rows: list[_Row] = []
        self.run_id = ""
        self.chain = ""
        self.current_text = ""
        self.live = Live(self, console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> ChainDisplay:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.run_id, self.chain = event.run_id, event.chain
            self.rows = [_Row(name) for name in event.steps]
        elif isinstance(event, StepSkipped):
            self.rows[event.index].status = "skipped"
            self.rows[event.index].note = "finished in an earlier run"
        elif isinstance(event, StepStarted):
            row = self.rows[event.index]
            row.status, row.started, self.current_text = "running", time.perf_counter(), ""
        elif isinstance(event, Token):
            self.current_text += event.text
        elif isinstance(event, StepRetry):
            row = self.rows[event.index]
            row.attempts, row.note, self.current_text = event.attempt, event.reason, ""
        elif isinstance(event, StepFinished):
            row = self.rows[event.index]
            row.status, row.seconds, row.note = "done", event.seconds, ""
            row.tokens = event.completion_tokens
        elif isinstance(event, ChainError) and 0 <= event.index < len(self.rows):
            row = self.rows[event.index]
            row.status, row.note = "failed", event.message
        elif isinstance(event, ChainFinished):
            self.current_text = ""
        self.live.refresh()

    def __rich__(self) -> RenderableType:
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        for column in ("", "step", "out", "time", "note"):
            table.add_column(column, overflow="fold")
        for row in self.rows:
            table.add_row(
                _icon(row.status),
                row.name,
                _amount(row, len(self.current_text)),
                _seconds(row),
                Text(row.note[:120], style="dim"),
            )
        title = f"chain {self.chain} · run {self.run_id}"
        parts: list[RenderableType] = [Text(title, style="bold"), table]
        if self.current_text:
            tail = "\n".join(self.current_text.splitlines()[-_TAIL_LINES:])
            parts.append(Panel(Text(tail), border_style="dim", expand=True))
        return Group(*parts)


def _icon(status: str) -> RenderableType:
    if status == "running":
        return Spinner("dots", style="cyan")
    return {
        "pending": Text("·", style="dim"),
        "done": Text("✓", style="green"),
        "skipped": Text("↷", style="blue"),
        "failed": Text("✗", style="red"),
    }[status]


def _amount(row: _Row, streamed_chars: int) -> str:
    """Tokens once the daemon has counted them; characters streamed so far before that."""
    if row.status == "done" and row.tokens:
        return f"{row.tokens} tok"
    if row.status == "running" and streamed_chars:
        return f"{streamed_chars} ch"
    return ""


def _seconds(row: _Row) -> str:
    if row.seconds is not None:
        return f"{row.seconds:.1f}s"
    if row.status == "running":
        return f"{time.perf_counter() - row.started:.1f}s"
    return ""
