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
    assert _scoped(list("        x = 1\n        y = 2\n\n    def f(self):\n"), (4, True)) == (
        "        x = 1\n        y = 2\n",
        True,
    )


def test_scope_keeps_statements_that_follow_on_until_a_blank_line() -> None:
    # an empty line in a body before `    return total` (indentation 4): the statements the
    # model writes at that indentation, one after the other, are the answer; the blank line
    # and the next paragraph are not
    text = "    total = 0\n    for x in xs:\n        total += x\n\n    print(total)\n"
    for chunks in (list(text), [text[:20], text[20:]], [text]):
        assert _scoped(chunks, (4, True)) == (
            "    total = 0\n    for x in xs:\n        total += x\n",
            True,
        )
    # a line back at that indentation inside a bracket the answer opened is kept too
    text = "    f(\n    a,\n    b)\n\n    g()\n"
    assert _scoped(list(text), (4, True)) == ("    f(\n    a,\n    b)\n", True)


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
    assert m.feed("    b") == ("", False)  # a later line is released once it is complete
    assert m.feed(" = 2\n") == ("\n\n    b = 2", False)
    assert m.feed("\nprint") == ("", True)
    assert m.text == "    a = 1\n\n    b = 2"


def test_scope_ends_an_answer_that_repeats_its_own_lines() -> None:
    # a small model in a loop (held-out list of names): the answer ends before the repeat
    text = (
        '    "humanize.duration",\n    "humanize.time",\n    "humanize.duration",\n    "humanize.'
    )
    for chunks in (list(text), [text[:30], text[30:50], text[50:]], [text]):
        assert _scoped(chunks, (0, True)) == (
            '    "humanize.duration",\n    "humanize.time",\n',
            True,
        )
    # ...also when the answer runs out of tokens on the repeated line
    assert _scoped(list("        x = compute(a)\n        x = compute(a)"), (4, True)) == (
        "        x = compute(a)\n",
        False,
    )
    # short lines (`else:`, `pass`, `)`) may repeat: they are not a loop
    assert _scoped(list("        pass\n        pass\n"), (4, True)) == (
        "        pass\n        pass\n",
        False,
    )


def test_scope_and_stop_strings_together() -> None:
    assert _scoped(list("    x = 1\nSTOP"), (0, True), ("STOP",)) == ("    x = 1\n", True)
    assert _scoped(list("    x = 1\n    STOP"), (0, True), ("STOP",)) == ("    x = 1\n    ", True)


def test_scope_lets_the_first_line_of_its_own_through_whatever_the_chunks() -> None:
    # the cursor at the end of a line: the answer starts with a newline, and its first line
    # of its own may sit at the suffix's indentation
    text = "\n    .. versionchanged:: 26.1.0\n        Added.\n\n    ..."
    for chunks in (list(text), [text]):
        assert _scoped(chunks, (4, True)) == (
            "\n    .. versionchanged:: 26.1.0\n        Added.\n",
            True,
        )
