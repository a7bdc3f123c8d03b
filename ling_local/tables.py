"""Terminal tables whose identifiers are never cut.

A user copies a run id or a profile name out of a table and types it into the next command,
so those columns keep their full width; the others wrap, and when even that does not fit
the terminal the least useful ones are left out (`optional`, dropped from the right)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

__all__ = ["Col", "print_table"]

#: A wrapped column narrower than this reads as a word or two a line.
_MIN_WRAPPED = 16
#: Rich's box: a border and one space of padding each side of every column, plus one.
_BORDER_PER_COLUMN = 3


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    identifier: bool = False
    """Shown whole, never wrapped or cut."""
    optional: bool = False
    """Left out when the terminal is too narrow for it."""


def print_table(
    columns: Sequence[Col], rows: Sequence[Sequence[str]], console: Console | None = None
) -> None:
    console = console or Console()
    keep = list(range(len(columns)))

    def need(indexes: list[int]) -> int:
        width = 1
        for i in indexes:
            cells = [len(columns[i].header), *(len(_plain(r[i])) for r in rows)]
            longest = max(cells)
            shown = longest if columns[i].identifier else min(longest, _MIN_WRAPPED)
            width += shown + _BORDER_PER_COLUMN
        return width

    optional = [i for i in reversed(keep) if columns[i].optional]
    while need(keep) > console.width and optional:
        keep.remove(optional.pop(0))
    left_out = [columns[i].header for i in range(len(columns)) if i not in keep]
    table = Table(
        caption=f"(too narrow for: {', '.join(left_out)})" if left_out else None,
        caption_justify="left",
    )
    for i in keep:
        col = columns[i]
        if col.identifier:
            width = max(len(col.header), *(len(_plain(r[i])) for r in rows)) if rows else None
            table.add_column(col.header, no_wrap=True, min_width=width)
        else:
            table.add_column(col.header, overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    console.print(table)


def _plain(cell: str) -> str:
    """The cell's text without Rich markup."""
    from rich.text import Text

    return Text.from_markup(cell).plain
