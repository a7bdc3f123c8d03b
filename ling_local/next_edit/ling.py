"""The shipped model's next-edit prompt format.

Seven special tokens (appended to the tiny model's vocabulary after its FIM and chat
tokens; the tokenizer and model own their ids), and this layout::

    <|ne_edits|>{path}\\n{diff}...<|ne_file|>{path}\\n{text above the window}
    <|ne_start|>{window up to the cursor}<|ne_cursor|>{rest of the window}<|ne_end|>
    {text below the window}<|ne_answer|>

The answer is the window rewritten, then ``<|ne_end|>``; or ``<|ne_none|>`` alone when no
edit is due. Recent edits come oldest first (the newest nearest the file), each as
:func:`~ling_local.next_edit.window.unified_diff` hunks after its path. What does not fit
the budgets is dropped from the far end: the oldest edits, the text farthest from the
window.

:func:`build_ling_prompt` returns the prompt as segments so that a daemon tokenizes the
user's text with special-token parsing off (a file containing ``<|ne_end|>`` cannot end its
own window) and adds the format's tokens by id.
"""

from __future__ import annotations

from dataclasses import dataclass

from ling_local.next_edit.window import NextEditInput, Window, editable_window, split_lines

__all__ = [
    "NEXT_EDIT_TOKENS",
    "NE_ANSWER",
    "NE_CURSOR",
    "NE_EDITS",
    "NE_END",
    "NE_FILE",
    "NE_NONE",
    "NE_START",
    "LingPrompt",
    "build_ling_prompt",
    "parse_ling_answer",
]

NE_EDITS = "<|ne_edits|>"
NE_FILE = "<|ne_file|>"
NE_START = "<|ne_start|>"
NE_CURSOR = "<|ne_cursor|>"
NE_END = "<|ne_end|>"
NE_ANSWER = "<|ne_answer|>"
NE_NONE = "<|ne_none|>"
NEXT_EDIT_TOKENS = [NE_EDITS, NE_FILE, NE_START, NE_CURSOR, NE_END, NE_ANSWER, NE_NONE]

EDITS_CHARS = 1500
"""At most this many characters of recent edits (paths and diffs), newest kept."""
BEFORE_CHARS = 1500
"""At most this many characters of whole lines above the window, nearest kept."""
AFTER_CHARS = 1000
"""At most this many characters of whole lines below the window, nearest kept."""


@dataclass(frozen=True, slots=True)
class LingPrompt:
    segments: tuple[tuple[bool, str], ...]
    """``(is_special, text)`` in order; a special segment is one of NEXT_EDIT_TOKENS."""
    window: Window

    @property
    def text(self) -> str:
        """The prompt as one string (for an engine that takes text)."""
        return "".join(text for _, text in self.segments)


def _nearest_lines(text: str, budget: int, *, from_end: bool) -> str:
    """Whole lines of ``text`` nearest the window (its end when ``from_end``) within
    ``budget`` characters."""
    lines = [line for line in split_lines(text) if line]
    kept: list[str] = []
    used = 0
    for line in reversed(lines) if from_end else lines:
        if used + len(line) > budget:
            break
        kept.append(line)
        used += len(line)
    return "".join(reversed(kept) if from_end else kept)


def build_ling_prompt(
    request: NextEditInput,
    *,
    edits_chars: int = EDITS_CHARS,
    before_chars: int = BEFORE_CHARS,
    after_chars: int = AFTER_CHARS,
) -> LingPrompt:
    window = editable_window(request.text, request.line, request.character)
    edits: list[str] = []
    used = 0
    for edit in reversed(request.recent_edits):
        piece = f"{edit.path}\n{edit.diff}"
        if not edit.diff:
            continue
        if used + len(piece) > edits_chars:
            break
        edits.append(piece)
        used += len(piece)
    before = _nearest_lines(window.before, before_chars, from_end=True)
    after = _nearest_lines(window.after, after_chars, from_end=False)
    segments = [
        (True, NE_EDITS),
        (False, "".join(reversed(edits))),
        (True, NE_FILE),
        (False, f"{request.path}\n{before}"),
        (True, NE_START),
        (False, window.text[: window.cursor]),
        (True, NE_CURSOR),
        (False, window.text[window.cursor :]),
        (True, NE_END),
        (False, after),
        (True, NE_ANSWER),
    ]
    return LingPrompt(tuple(s for s in segments if s[1]), window)


def parse_ling_answer(answer: str, *, complete: bool) -> str | None:
    """The rewritten window, or None for "no change". ``complete`` says the generation
    ended at ``<|ne_end|>`` (or ``<|ne_none|>``) rather than at its token limit: a window
    cut short is no suggestion."""
    if answer.startswith(NE_NONE) or not complete:
        return None
    text = answer.split(NE_END, 1)[0]
    return text.replace(NE_CURSOR, "")
