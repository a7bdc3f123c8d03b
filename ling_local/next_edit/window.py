"""The editable window around the cursor, the edits between two versions of it, and the
unified diffs that describe a user's recent edits.

Positions are 0-based lines and characters; a character is a Unicode code point of the
line (Python ``str`` indexing). A client that counts UTF-16 code units (LSP's default)
converts at its edge. Lines end at ``\\n`` only (a ``\\r`` stays part of its line).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = [
    "Edit",
    "NextEditInput",
    "RecentEdit",
    "Window",
    "editable_window",
    "edits_between",
    "split_lines",
    "unified_diff",
]

WINDOW_BEFORE = 10
"""Lines of the window above the cursor's line."""
WINDOW_AFTER = 10
"""Lines of the window below the cursor's line (21 lines in all, where the file has them)."""


@dataclass(frozen=True, slots=True)
class RecentEdit:
    """One recent edit of a file, as :func:`unified_diff` writes it (hunks, no file header)."""

    path: str
    diff: str


@dataclass(frozen=True, slots=True)
class NextEditInput:
    """What a next-edit prediction is asked about."""

    path: str
    text: str
    line: int
    character: int
    recent_edits: tuple[RecentEdit, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """Whole lines ``[start_line, end_line)`` of a file, the cursor at ``cursor`` in them."""

    start_line: int
    end_line: int
    text: str
    cursor: int
    """Offset of the cursor in ``text``."""
    before: str
    """The file's text above the window."""
    after: str
    """The file's text below the window."""


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace the text from (start_line, start_character) to (end_line, end_character)."""

    start_line: int
    start_character: int
    end_line: int
    end_character: int
    text: str

    def as_json(self) -> dict:
        return {
            "range": {
                "start": {"line": self.start_line, "character": self.start_character},
                "end": {"line": self.end_line, "character": self.end_character},
            },
            "text": self.text,
        }


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n``; a text that is empty or ends with a
    newline has a last, empty line (where a cursor can stand)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def editable_window(
    text: str,
    line: int,
    character: int,
    *,
    before: int = WINDOW_BEFORE,
    after: int = WINDOW_AFTER,
) -> Window:
    """The lines around the cursor that a prediction may rewrite. A cursor past the end of
    its line or of the file is moved to the nearest place that exists."""
    lines = split_lines(text)
    line = min(max(line, 0), len(lines) - 1)
    character = min(max(character, 0), len(lines[line].rstrip("\n")))
    start, end = max(0, line - before), min(len(lines), line + after + 1)
    head = "".join(lines[:start])
    body = "".join(lines[start:end])
    cursor = sum(len(x) for x in lines[start:line]) + character
    return Window(start, end, body, cursor, head, "".join(lines[end:]))


def _position(base_line: int, text: str, offset: int, first_line_start: int = 0) -> tuple[int, int]:
    """Line and character of ``offset`` in ``text``, whose first character is at
    (base_line, first_line_start) of the file."""
    newlines = text.count("\n", 0, offset)
    if newlines == 0:
        return base_line, first_line_start + offset
    return base_line + newlines, offset - text.rindex("\n", 0, offset) - 1


def _trimmed(base_line: int, old: str, new: str) -> Edit:
    """Replace ``old`` (starting at column 0 of ``base_line``) by ``new``, as the range of
    the characters that differ."""
    limit = min(len(old), len(new))
    p = 0
    while p < limit and old[p] == new[p]:
        p += 1
    s = 0
    while s < limit - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return Edit(*_position(base_line, old, p), *_position(base_line, old, len(old) - s),
                new[p : len(new) - s])  # fmt: skip


def edits_between(window: Window, new_text: str) -> list[Edit]:
    """The edits that turn the window into ``new_text``: line blocks that differ, each
    trimmed to the characters that change; a block that keeps its number of lines is
    split into one edit per changed line (a rename over three lines is three ranges over
    the old name)."""
    old_lines, new_lines = split_lines(window.text), split_lines(new_text)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits: list[Edit] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        base = window.start_line + i1
        if tag == "replace" and i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                if old_lines[i1 + k] != new_lines[j1 + k]:
                    edits.append(_trimmed(base + k, old_lines[i1 + k], new_lines[j1 + k]))
            continue
        edits.append(_trimmed(base, "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])))
    return edits


def unified_diff(before: str, after: str, *, context: int = 1) -> str:
    """The hunks of a unified diff from ``before`` to ``after`` (no ``---``/``+++``
    header: the path travels beside it), every line ending in a newline; ``""`` when the
    two are equal."""
    out = []
    a = [line for line in split_lines(before) if line]
    b = [line for line in split_lines(after) if line]
    lines = difflib.unified_diff(a, b, n=context)
    for line in lines:
        if line.startswith(("---", "+++")) and not out:
            continue
        out.append(line if line.endswith("\n") else line + "\n")
    return "".join(out)
