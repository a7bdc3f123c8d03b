"""Terminal tables whose identifiers are never cut and whose columns are never left out.

A user copies a run id or a profile name out of a table and types it into the next command,
so those columns keep their full width; every other column wraps (a long path or sentence
folds onto more lines) to fit the terminal, however narrow: a table that silently leaves a
column out reads as if the column did not exist."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

__all__ = ["Col", "print_table"]


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    identifier: bool = False
    """Shown whole, never wrapped or cut."""


def print_table(
    columns: Sequence[Col],
    rows: Sequence[Sequence[str]],
    console: Console | None = None,
    *,
    caption: str | None = None,
) -> None:
    console = console or Console()
    table = Table(caption=caption, caption_justify="left")
    for i, col in enumerate(columns):
        if col.identifier:
            width = max(len(col.header), *(len(_plain(r[i])) for r in rows)) if rows else None
            table.add_column(col.header, no_wrap=True, min_width=width)
        else:  # at least the header's width: a header folded into pieces reads as noise
            table.add_column(col.header, overflow="fold", min_width=len(col.header))
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _plain(cell: str) -> str:
    """The cell's text without Rich markup."""
    from rich.text import Text

    return Text.from_markup(cell).plain
