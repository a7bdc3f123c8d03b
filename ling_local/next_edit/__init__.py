"""Next-edit prediction: what the model sees and what its answer means.

A next-edit request is a file, a cursor and the user's recent edits; the answer is the
*editable window* around the cursor rewritten (or "no change"), which becomes a list of
edits with ranges in the file. This package is plain Python (no engine, no torch): the
daemon, the language server, ``training/`` and ``bench next-edit`` all use it, so the
window the model was trained on is the window it is asked about.

- :mod:`ling_local.next_edit.window`: the editable window, edits between two windows,
  unified diffs of recent edits.
- :mod:`ling_local.next_edit.ling`: the shipped model's prompt format (special tokens).
"""

from __future__ import annotations

from ling_local.next_edit.ling import (
    NE_ANSWER,
    NE_CURSOR,
    NE_EDITS,
    NE_END,
    NE_FILE,
    NE_NONE,
    NE_START,
    NEXT_EDIT_TOKENS,
    LingPrompt,
    build_ling_prompt,
    parse_ling_answer,
)
from ling_local.next_edit.window import (
    Edit,
    NextEditInput,
    RecentEdit,
    Window,
    editable_window,
    edits_between,
    unified_diff,
)

__all__ = [
    "NEXT_EDIT_TOKENS",
    "NE_ANSWER",
    "NE_CURSOR",
    "NE_EDITS",
    "NE_END",
    "NE_FILE",
    "NE_NONE",
    "NE_START",
    "Edit",
    "LingPrompt",
    "NextEditInput",
    "RecentEdit",
    "Window",
    "build_ling_prompt",
    "editable_window",
    "edits_between",
    "parse_ling_answer",
    "unified_diff",
]
