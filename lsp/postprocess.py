"""Turning what the model wrote into ghost text worth showing.

Pure functions on strings, so they can run on every streamed chunk and be tested alone:

- one line in the middle of a line; a block after a block opener or on an empty line, cut
  where the block ends (its indentation drops back) or after `max_lines`;
- nothing that repeats what already follows the cursor (the rest of the line, the next
  line), no closing bracket the suffix already has;
- repetition loops cut, trailing whitespace stripped; an empty result means no suggestion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ling_local.prompts import BLOCK_OPENER, indent_width

__all__ = ["Shape", "Site", "complete_lines", "finish", "plan", "process", "refit"]

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_CLOSING_LINE = re.compile(r"^\s*(?:[)\]}]+[;,]?|end)\s*$")
_REPEAT_IN_LINE = re.compile(r"(.{3,}?)\1{2,}")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffd]")
"""Control characters and U+FFFD (a token cut inside a UTF-8 sequence) break ghost text."""


@dataclass(frozen=True, slots=True)
class Site:
    """Where the cursor is, as post-processing needs it."""

    line_prefix: str
    """Text of the cursor's line before the cursor."""
    line_suffix: str
    """Text of the cursor's line after the cursor."""
    prev_line: str = ""
    """The nearest non-blank line above the cursor's line."""
    next_line: str = ""
    """The nearest non-blank line below the cursor's line."""


@dataclass(frozen=True, slots=True)
class Shape:
    multiline: bool
    end_indent: int = -1
    """A generated line indented this much or less ends the block."""
    closer_indent: int | None = None
    """Indentation at which a closing-bracket line may still end the block (opener case)."""
    max_lines: int = 1


def plan(site: Site, max_lines: int) -> Shape:
    """Single line in the middle of a line; a block after an opener or on an empty line."""
    if site.line_suffix.strip():
        return Shape(False)
    if site.line_prefix.strip():
        if BLOCK_OPENER.search(site.line_prefix.rstrip()):
            indent = indent_width(site.line_prefix)
            return Shape(True, indent, indent, max_lines)
        return Shape(False)
    # An empty line: the block around the cursor, or the body of the opener just above.
    cursor = indent_width(site.line_prefix)
    if site.prev_line and BLOCK_OPENER.search(site.prev_line.rstrip()):
        opener = indent_width(site.prev_line)
        return Shape(True, max(cursor - 1, opener), None, max_lines)
    return Shape(True, cursor - 1, None, max_lines)


def _cut_unmatched_closer(text: str, line_suffix: str) -> str:
    """Cut at a closer that closes a bracket opened before the cursor when the suffix
    already holds that closer: `print(|)` + `"hi") + x` -> `"hi"`."""
    suffix = line_suffix.lstrip()
    depth: list[str] = []
    quote: str | None = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and (i == 0 or text[i - 1] != "\\"):
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch in _OPENERS:
            depth.append(ch)
        elif ch in _CLOSERS:
            if depth and depth[-1] == _CLOSERS[ch]:
                depth.pop()
            elif suffix.startswith(ch):
                return text[:i]
    return text


def _unclosed(text: str) -> int:
    depth = 0
    for ch in text:
        if ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS and depth:
            depth -= 1
    return depth


def _trim_suffix_overlap(text: str, line_suffix: str) -> str:
    """Drop the end of `text` that the rest of the line already has (`"hi"` before `"`,
    `x):` before `):`), unless that would unbalance brackets the text itself opened."""
    suffix = line_suffix.strip()
    if not suffix:
        return text
    stripped = text.rstrip()
    for k in range(min(len(stripped), len(suffix)), 0, -1):
        if stripped.endswith(suffix[:k]) and _unclosed(stripped[:-k]) == _unclosed(stripped):
            return stripped[:-k]
    return text


def _cut_line_repetition(line: str) -> str:
    m = _REPEAT_IN_LINE.search(line)
    if m and any(c.isalnum() for c in m.group(1)):
        return line[: m.start() + len(m.group(1))]
    return line


def _cut_line_loops(lines: list[str]) -> list[str]:
    """Keep the first copy of a block of 1-4 lines that the model then repeats."""
    for i in range(len(lines)):
        for size in range(1, 5):
            block, again = lines[i : i + size], lines[i + size : i + 2 * size]
            if len(again) == size and block == again and sum(len(x.strip()) for x in block) >= 4:
                return lines[: i + size]
    return lines


def process(raw: str, site: Site, shape: Shape, *, final: bool = False) -> tuple[str, bool]:
    """-> (text to show so far, whether the rest of the generation is not needed).

    While streaming (`final=False`) only complete lines decide that the block is over."""
    lines = _UNPRINTABLE.sub("", raw.replace("\r\n", "\n")).split("\n")
    complete = len(lines) - (0 if final else 1)
    if not shape.multiline:
        first = _cut_line_repetition(lines[0])
        first = _cut_unmatched_closer(first, site.line_suffix)
        first = _trim_suffix_overlap(first, site.line_suffix)
        return first.rstrip(), complete >= 1
    out: list[str] = [_cut_line_repetition(lines[0])]
    done, blank_run = False, 0
    nxt = site.next_line.strip()
    for index, line in enumerate(lines[1:], start=1):
        if index >= complete:
            out.append(line)  # still being written: show it, decide nothing yet
            break
        if not line.strip():
            blank_run += 1
            if blank_run >= 2:
                done = True
                break
            out.append("")
            continue
        blank_run = 0
        indent = indent_width(line)
        if nxt and line.strip() == nxt:
            done = True  # the model is re-typing the line that already follows
            break
        if indent <= shape.end_indent:
            if shape.closer_indent == indent and _CLOSING_LINE.match(line):
                out.append(line)
            done = True
            break
        out.append(_cut_line_repetition(line))
        if sum(1 for x in out if x.strip()) >= shape.max_lines:
            done = True
            break
    if out and _repeats_next_line(out[0], nxt, site):
        return "", True
    looped = _cut_line_loops(out)
    done = done or len(looped) < len(out)
    text = "\n".join(x.rstrip() for x in looped).rstrip()
    return text, done


def _repeats_next_line(first: str, nxt: str, site: Site) -> bool:
    """On an empty line, a first line equal to the next line only duplicates it."""
    return bool(nxt) and not site.line_prefix.strip() and first.strip() == nxt


def finish(raw: str, site: Site, shape: Shape) -> str:
    """The suggestion for a finished generation ('' means: show nothing)."""
    text, _ = process(raw, site, shape, final=True)
    return text if text.strip() else ""


def refit(text: str, site: Site) -> str:
    """A cached suggestion re-checked against what is now after the cursor (an editor may
    have paired a bracket the user typed): mid-line, only its first line fits."""
    if not site.line_suffix.strip():
        return text
    first = text.split("\n", 1)[0]
    first = _trim_suffix_overlap(_cut_unmatched_closer(first, site.line_suffix), site.line_suffix)
    return first.rstrip()


def complete_lines(raw: str, site: Site, shape: Shape) -> str:
    """A multi-line suggestion's lines that are already complete (the one being written is
    left out), or '' when none has text yet: what can be shown before the block is done."""
    if not shape.multiline or "\n" not in raw:
        return ""
    text, _ = process(raw[: raw.rfind("\n")], site, shape, final=True)
    return text if text.strip() else ""
