"""The trigger gate, the adaptive debounce and the typing-through cache."""

from __future__ import annotations

import pytest

from lsp.postprocess import Site
from lsp.trigger import SuggestionCache, TypingTracker, should_request


@pytest.mark.parametrize(
    ("prefix", "suffix", "expected"),
    [
        ("    return ", "", True),  # end of line
        ("print(", ")", True),  # only closers after the cursor
        ("x = foo(", "):", True),
        ("val", "ue = 1", False),  # inside a word
        ("x = ", "compute(y)", False),  # code after the cursor
    ],
)
def test_automatic_requests_only_where_a_suggestion_fits(
    prefix: str, suffix: str, expected: bool
) -> None:
    assert should_request(Site(prefix, suffix), invoked=False) is expected
    assert should_request(Site(prefix, suffix), invoked=True)  # asked for: always


def test_debounce_follows_typing_speed_within_bounds() -> None:
    t = TypingTracker()
    assert t.delay_s(120, 40, 350) == pytest.approx(0.12)  # nothing known yet
    for i in range(6):  # a fast typist: 60 ms between keys
        t.changed("a", now=10 + i * 0.06)
    assert t.delay_s(120, 40, 350) == pytest.approx(0.09)
    slow = TypingTracker()
    for i in range(6):  # 400 ms between keys: capped
        slow.changed("a", now=10 + i * 0.4)
    assert slow.delay_s(120, 40, 350) == pytest.approx(0.35)


def test_debounce_counts_from_the_last_edit() -> None:
    t = TypingTracker()
    t.changed("a", now=100.0)
    assert t.wait_s("a", 0.2, now=100.05) == pytest.approx(0.15)
    assert t.wait_s("a", 0.2, now=100.5) == 0.0  # the client already waited
    assert t.wait_s("b", 0.2, now=100.5) == 0.2


def test_typing_through_answers_the_rest_of_the_suggestion() -> None:
    cache = SuggestionCache()
    cache.put("u", "def add(a, b):\n    ret", "\n", "urn a + b", owner="gen")
    assert cache.lookup("u", "def add(a, b):\n    retu", "\n") == ("rn a + b", "gen")
    assert cache.lookup("u", "def add(a, b):\n    return a", "\n") == (" + b", "gen")
    # typed something else, or the whole thing, or the text after the cursor changed
    assert cache.lookup("u", "def add(a, b):\n    retx", "\n") is None
    assert cache.lookup("u", "def add(a, b):\n    return a + b", "\n") is None
    assert cache.lookup("u", "def add(a, b):\n    retu", "\nprint()\n") is None
    assert cache.lookup("other", "def add(a, b):\n    retu", "\n") is None


def test_deleting_back_over_typed_text_restores_the_suggestion() -> None:
    cache = SuggestionCache()
    cache.put("u", "x = fo", "\n", "o(1)")
    assert cache.lookup("u", "x = f", "\n") == ("oo(1)", None)


def test_an_auto_paired_bracket_after_the_cursor_still_matches() -> None:
    cache = SuggestionCache()
    cache.put("u", "print", "\n", '("hi")')
    assert cache.lookup("u", "print(", ")\n") == ('"hi")', None)
    assert cache.lookup("u", "print(", "x\n") is None
