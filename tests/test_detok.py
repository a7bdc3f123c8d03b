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
