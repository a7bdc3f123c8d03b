"""A model's reply as Markdown that keeps the shape of its code.

Chat models fence their code; a code model (the embedded tiny one) often writes bare code,
and Markdown would fold its lines into one paragraph (``def f(x): return x``). Outside
fences, runs of lines that read as code are fenced here, so they keep their newlines and
indentation and are highlighted; prose, lists and fenced blocks pass through unchanged.

`as_markdown(text, partial=True)` is for a reply that is still streaming: it never closes
the block the text ends in and judges only complete lines, so as text arrives the result
mostly grows at the end (the widget appends instead of re-rendering the whole reply).
"""

from __future__ import annotations

import re

__all__ = ["as_markdown"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Lines that start code: statements and definitions, assignments, calls.
_STATEMENT = re.compile(
    r"^\s*(?:(?:async\s+)?def\s+\w+\s*\(|class\s+\w+\s*[(:]|import\s+[\w.]+|from\s+[\w.]+\s+import\s"
    r"|return\b|yield\b|raise\b|assert\b|pass$|break$|continue$|del\s|global\s|nonlocal\s"
    r"|(?:el)?if\s.*:$|else:$|for\s.+\sin\s.+:$|while\s.+:$|try:$|except\b.*:$|finally:$"
    r"|with\s.+:$|@[\w.]+|lambda\b|print\(|await\s|async\s+(?:for|with)\s|#!)"
)
_ASSIGN = re.compile(
    r"^\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?(?:\s*,\s*[A-Za-z_]\w*)*\s*(?::\s*[\w.\[\], |]+)?"
    r"\s*(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)\s*\S"
)
_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\(.*\)\s*$")
_CLOSER = re.compile(r"^\s*[)\]}]+[)\]},;:]*\s*$")
# Lines that belong to code next to code but start nothing alone: comments, strings,
# decorators' arguments, a dict's entries.
_NEUTRAL = re.compile(r"^\s*(?:#|\"|'|[)\]}]|\.\w)")
# Markdown that is never code: list items, headings, quotes, tables, rules.
_MARKDOWN = re.compile(r"^\s{0,3}(?:[-*+]\s|\d+[.)]\s|#{1,6}\s|>|\||---|\*\*\*|___)")
# A sentence: words, no brackets or "=", ending in . ! or ? ("import this module first.")
_SENTENCE = re.compile(r"^[^=(){}\[\]]*\s\w[^=(){}\[\]]*[.!?]$")
_COMMENT = re.compile(r"^\s*#\s")


def _looks_like_code(line: str) -> bool:
    """Whether a line alone reads as code (a statement, an assignment, a call)."""
    if _MARKDOWN.match(line) or _SENTENCE.match(line.strip()):
        return False
    return bool(_STATEMENT.match(line) or _ASSIGN.match(line) or _CALL.match(line))


def _continues_code(line: str) -> bool:
    """Whether a line belongs to the code above it."""
    return (
        line[:1] in (" ", "\t")
        or _looks_like_code(line)
        or bool(_CLOSER.match(line) or _NEUTRAL.match(line))
    )


def as_markdown(text: str, *, partial: bool = False) -> str:
    """`text` with its bare code fenced (see the module docstring)."""
    lines = text.split("\n")
    tail = lines.pop() if partial else None  # the line still being written
    out: list[str] = []
    fence = ""  # the model's own open fence
    run: list[str] = []  # bare code lines being collected
    pending_blank = 0  # blank lines inside a run, kept only if code follows

    def close_run() -> None:
        nonlocal pending_blank
        if run:
            out.extend(["```python", *run, "```"])
            run.clear()
        out.extend([""] * pending_blank)
        pending_blank = 0

    for i, line in enumerate(lines):
        if fence:
            out.append(line)
            if line.strip().startswith(fence):
                fence = ""
            continue
        if match := _FENCE.match(line):
            close_run()
            fence = match.group(1)[0] * 3
            out.append(line)
            continue
        if run:
            if not line.strip():
                pending_blank += 1
                continue
            if _continues_code(line):
                run.extend([""] * pending_blank + [line])
                pending_blank = 0
                continue
            close_run()
        # A comment starts the code it sits on (else Markdown makes it a heading).
        comment = _COMMENT.match(line) and i + 1 < len(lines) and _looks_like_code(lines[i + 1])
        if comment or _looks_like_code(line):
            run.append(line)
        else:
            out.append(line)
    if tail is None:
        close_run()
    else:
        if run:  # the code block the text ends in stays open
            out.extend(["```python", *run, *[""] * pending_blank])
        out.append(tail)
    return "\n".join(out)
