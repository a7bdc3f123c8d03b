"""Incremental detokenization and stop strings (pure units)."""

from __future__ import annotations

from ling_local.engines.embedded.detok import IncrementalDetokenizer, StopMatcher


def test_stop_matcher_holds_back_a_possible_stop_prefix() -> None:
    m = StopMatcher(["\n\n", "END"])
    assert m.feed("abc\n") == ("abc", False)
    assert m.feed("x") == ("\nx", False)
    assert m.feed("E") == ("", False)
    assert m.feed("N") == ("", False)
    assert m.feed("Dtail") == ("", True)
    assert m.text == "abc\nx"


def test_stop_matcher_finish_releases_held_text() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("hello ST") == ("hello ", False)
    assert m.finish() == "ST"
    assert m.text == "hello ST"


def test_stop_matcher_earliest_stop_wins() -> None:
    m = StopMatcher(["b", "abc"])
    assert m.feed("xxabc") == ("xx", True)
    m = StopMatcher(["c", "zzz"])
    assert m.feed("abcz") == ("ab", True)


def test_incremental_detokenizer_never_splits_a_character(tmp_path) -> None:
    from ling_local.bench.random_model import build_tokenizer

    tok = build_tokenizer(300)
    text = "naïve café — 日本語 ✓ def f():\n\treturn 'ok'"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(lambda x: tok.decode(x))
    pieces = [detok.push([i]) for i in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def _scoped(chunks: list[str], scope: tuple[int, bool], stops: tuple[str, ...] = ()):
    m = StopMatcher(stops, scope)
    out = []
    for c in chunks:
        text, hit = m.feed(c)
        out.append(text)
        if hit:
            return "".join(out), True
    out.append(m.finish())
    return "".join(out), False


def test_scope_ends_an_answer_before_a_line_back_at_the_suffixs_indentation() -> None:
    # `def add(a, b):\n|` + `\n\nprint(add(1, 2))\n`: the model writes the body, then the
    # same function again; the answer is the body (the suffix starts with a newline)
    text = "    return a + b\n\n\ndef add(a, b):\n    return a + b\n"
    for chunks in (list(text), [text[:5], text[5:18], text[18:]], [text]):
        assert _scoped(chunks, (0, False)) == ("    return a + b", True)
    # the suffix starts at a line's text: the answer keeps its last newline
    assert _scoped(list("        x,\n        y,\n    }\n"), (4, True)) == (
        "        x,\n        y,\n",
        True,
    )


def test_scope_keeps_deeper_lines_and_blank_lines_between_them() -> None:
    text = '\n        """\n\n        return self._d()\n\n    def date(self):\n'
    assert _scoped(list(text), (4, True)) == ('\n        """\n\n        return self._d()\n', True)


def test_scope_never_cuts_the_first_line_and_releases_an_answer_that_ends_itself() -> None:
    assert _scoped(list("x = 1"), (4, True)) == ("x = 1", False)
    assert _scoped(list("    x = 1\n\n"), (4, True)) == ("    x = 1\n\n", False)


def test_scope_holds_blank_lines_back_until_the_next_line_decides() -> None:
    m = StopMatcher((), (0, False))
    assert m.feed("    a = 1\n") == ("    a = 1", False)
    assert m.feed("\n") == ("", False)
    assert m.feed("    b") == ("\n\n    b", False)
    assert m.feed(" = 2\nprint") == (" = 2", True)
    assert m.text == "    a = 1\n\n    b = 2"


def test_scope_and_stop_strings_together() -> None:
    assert _scoped(list("    x = 1\nSTOP"), (0, True), ("STOP",)) == ("    x = 1\n", True)
    assert _scoped(list("    x = 1\n    STOP"), (0, True), ("STOP",)) == ("    x = 1\n    ", True)


def test_scope_lets_the_first_line_of_its_own_through_whatever_the_chunks() -> None:
    # the cursor at the end of a line: the answer starts with a newline, and its first line
    # of its own may sit at the suffix's indentation
    text = "\n    .. versionchanged:: 26.1.0\n        Added.\n    ..."
    for chunks in (list(text), [text]):
        assert _scoped(chunks, (4, True)) == (
            "\n    .. versionchanged:: 26.1.0\n        Added.\n",
            True,
        )
