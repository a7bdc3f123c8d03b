"""The next-edit window, its edits and the shipped model's prompt format (plain Python)."""

from __future__ import annotations

import random

import pytest

from ling_local.next_edit import (
    NE_CURSOR,
    NE_END,
    NE_NONE,
    NEXT_EDIT_TOKENS,
    NextEditInput,
    RecentEdit,
    build_ling_prompt,
    editable_window,
    edits_between,
    parse_ling_answer,
    unified_diff,
)
from ling_local.next_edit.window import split_lines

FILE = "".join(f"line {i}\n" for i in range(40))


def apply(text: str, edits) -> str:
    """Apply edits (file positions) from the last to the first."""
    lines = split_lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, character: int) -> int:
        return starts[line] + character

    for e in sorted(edits, key=lambda e: (e.start_line, e.start_character), reverse=True):
        a, b = offset(e.start_line, e.start_character), offset(e.end_line, e.end_character)
        text = text[:a] + e.text + text[b:]
    return text


def test_the_window_is_21_lines_around_the_cursor_and_keeps_the_rest() -> None:
    w = editable_window(FILE, 20, 3)
    assert (w.start_line, w.end_line) == (10, 31)
    assert w.before + w.text + w.after == FILE
    assert w.text[w.cursor :].startswith("e 20\n")


@pytest.mark.parametrize(("line", "character"), [(0, 0), (39, 99), (40, 0), (500, 7), (-3, -1)])
def test_the_window_clips_at_the_file_and_line_ends(line: int, character: int) -> None:
    w = editable_window(FILE, line, character)
    assert w.before + w.text + w.after == FILE
    assert 0 <= w.cursor <= len(w.text)
    assert w.end_line - w.start_line <= 21


def test_a_rename_is_an_edit_over_the_old_name_only() -> None:
    text = "def f(count):\n    total = count + 1\n    return count\n"
    w = editable_window(text, 0, 6)
    new = w.text.replace("count", "n")
    edits = edits_between(w, new)
    spans = [(e.start_line, e.start_character, e.end_line, e.end_character, e.text) for e in edits]
    assert spans == [(0, 6, 0, 11, "n"), (1, 12, 1, 17, "n"), (2, 11, 2, 16, "n")]
    assert apply(text, edits) == text.replace("count", "n")


def test_no_change_gives_no_edits() -> None:
    w = editable_window(FILE, 5, 0)
    assert edits_between(w, w.text) == []


def test_random_rewrites_apply_back_exactly() -> None:
    rng = random.Random(7)
    words = ["a", "bb", "x = 1", "", "    return y", "é", "\t"]
    for _ in range(300):
        text = "".join(rng.choice(words) + "\n" for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.3:
            text += rng.choice(words)
        lines = split_lines(text)
        w = editable_window(text, rng.randrange(len(lines)), rng.randint(0, 5))
        new_lines = [ln for ln in split_lines(w.text) if rng.random() > 0.2]
        new_lines = [rng.choice(words) + "\n" if rng.random() < 0.2 else ln for ln in new_lines]
        new = "".join(new_lines)
        expected = w.before + new + w.after
        assert apply(text, edits_between(w, new)) == expected


def test_unified_diff_hunks_without_header() -> None:
    before = "a\nb\nc\n"
    assert unified_diff(before, before) == ""
    diff = unified_diff(before, "a\nB\nc\n")
    assert diff.startswith("@@ ") and "-b\n+B\n" in diff and "---" not in diff
    assert unified_diff("x", "y").endswith("\n")


def test_the_prompt_marks_the_window_and_the_cursor() -> None:
    text = "import os\n\n" + FILE
    request = NextEditInput(
        "pkg/mod.py", text, 20, 2, (RecentEdit("pkg/mod.py", "@@ -1 +1 @@\n-a\n+b\n"),)
    )
    prompt = build_ling_prompt(request)
    assert prompt.text.startswith("<|ne_edits|>pkg/mod.py\n@@ -1 +1 @@")
    assert prompt.text.endswith("<|ne_answer|>")
    specials = [t for special, t in prompt.segments if special]
    assert set(specials) <= set(NEXT_EDIT_TOKENS)
    assert specials.count(NE_CURSOR) == 1
    window = prompt.text.split("<|ne_start|>")[1].split(NE_END)[0]
    assert window.replace(NE_CURSOR, "") == prompt.window.text


def test_user_text_that_looks_like_a_marker_stays_text() -> None:
    request = NextEditInput("a.py", f"x = '{NE_END}'\n", 0, 0)
    prompt = build_ling_prompt(request)
    assert any(not special and NE_END in t for special, t in prompt.segments)


def test_budgets_keep_the_newest_edits_and_the_nearest_lines() -> None:
    edits = tuple(RecentEdit("a.py", f"@@ -{i} +{i} @@\n-{i}\n+{i}!\n" * 20) for i in range(10))
    text = "".join(f"{i:05d}\n" for i in range(2000))
    prompt = build_ling_prompt(NextEditInput("a.py", text, 1000, 0, edits), edits_chars=900)
    history = prompt.segments[1][1]
    assert "-9\n" in history and "-0\n" not in history
    file_part = prompt.text.split("<|ne_file|>")[1]
    assert "00989\n" in file_part and "00000\n" not in file_part
    assert "01011\n" in file_part and "01999\n" not in file_part


def test_answers() -> None:
    assert parse_ling_answer(NE_NONE, complete=True) is None
    assert parse_ling_answer("a\nb\n", complete=False) is None
    assert parse_ling_answer(f"a\n{NE_CURSOR}b\n{NE_END}", complete=True) == "a\nb\n"
    assert parse_ling_answer("a\n", complete=True) == "a\n"
