"""Post-processing on what models really produce at real cursor positions."""

from __future__ import annotations

import pytest

from lsp.context import Snapshot
from lsp.postprocess import Site, complete_lines, finish, plan, process, refit


def at(source: str) -> tuple[Site, Snapshot]:
    """A document with `|` marking the cursor."""
    offset = source.index("|")
    snap = Snapshot("file:///t.py", source.replace("|", "", 1), offset, "python")
    return snap.site(), snap


def suggest(source: str, raw: str, max_lines: int = 8) -> str:
    site, _ = at(source)
    return finish(raw, site, plan(site, max_lines))


# ------------------------------------------------------------------------- single vs block
def test_mid_line_gives_one_line() -> None:
    site, _ = at("x = compute(|)\n")
    shape = plan(site, 8)
    assert not shape.multiline
    assert suggest("x = compute(|)\n", "a, b)\ny = 2\n") == "a, b"


def test_end_of_plain_line_gives_one_line() -> None:
    assert suggest("import o|\n", "s\nimport sys\n") == "s"
    assert suggest("import os|\n", "\nimport sys\n") == ""


def test_block_after_opener_stops_where_the_block_ends() -> None:
    source = "def area(r):|\n\nprint(area(2))\n"
    raw = "\n    import math\n    return math.pi * r ** 2\n\n\ndef perimeter(r):\n    return 2"
    assert suggest(source, raw) == "\n    import math\n    return math.pi * r ** 2"


def test_block_on_empty_indented_line_keeps_to_its_scope() -> None:
    source = "class Stack:\n    def __init__(self):\n        |\n"
    raw = "self.items = []\n        self.size = 0\n\n    def push(self, x):\n        pass"
    assert suggest(source, raw) == "self.items = []\n        self.size = 0"


def test_block_is_capped_at_max_lines() -> None:
    source = "def f():|\n"
    raw = "".join(f"\n    x{i} = {i}" for i in range(20))
    assert suggest(source, raw, max_lines=3).count("\n") == 3  # "" + 3 body lines


def test_brace_block_keeps_its_closing_line_unless_the_document_has_it() -> None:
    js = "function f(a) {|\n\nconsole.log(f(1));\n"
    raw = "\n  return a + 1;\n}\nconsole.log(2);"
    assert suggest(js, raw) == "\n  return a + 1;\n}"
    js_closed = "function f(a) {|\n}\n"
    assert suggest(js_closed, raw) == "\n  return a + 1;"


def test_two_blank_lines_end_a_top_level_block() -> None:
    source = "import os\n|"
    raw = "def main():\n    print(os.getcwd())\n\n\nif __name__ == '__main__':\n    main()"
    assert suggest(source, raw) == "def main():\n    print(os.getcwd())"


# ------------------------------------------------------------------------- suffix
def test_closing_bracket_already_in_the_suffix_is_not_repeated() -> None:
    assert suggest("print(|)\n", '"hello")') == '"hello"'
    assert suggest("if check(x|):\n", ", y):") == ", y"
    assert suggest("items = [|]\n", "1, 2, 3]") == "1, 2, 3"


def test_model_closing_the_call_and_continuing_is_cut_at_the_close() -> None:
    assert suggest("total = sum(|)\n", "values) + offset") == "values"


def test_nested_brackets_inside_the_suggestion_are_kept() -> None:
    assert suggest("print(|)\n", "len(items))") == "len(items)"


def test_suggestion_that_only_retypes_the_suffix_is_empty() -> None:
    assert suggest("foo(|)\n", ")") == ""


def test_block_that_retypes_the_next_line_is_cut() -> None:
    source = "def f(x):\n    |\n    return y\n"
    assert suggest(source, "y = x * 2\n    return y\n") == "y = x * 2"
    assert suggest(source, "return y\n") == ""


def test_refit_trims_a_cached_suggestion_against_an_auto_paired_bracket() -> None:
    site, _ = at("print(|)\n")
    assert refit('x, sep="")\nmore', site) == 'x, sep=""'
    site_end, _ = at("value = |\n")
    assert refit("1\nnext", site_end) == "1\nnext"


# ------------------------------------------------------------------------- cleanup
def test_repetition_loops_are_cut() -> None:
    assert suggest("x = |\n", "foo(foo(foo(foo(foo(") == "foo("
    source = "def f():|\n"
    raw = "\n    print('a')\n    print('a')\n    print('a')\n    print('a')"
    assert suggest(source, raw) == "\n    print('a')"


def test_trailing_whitespace_and_blank_lines_are_stripped() -> None:
    assert suggest("def f():|\n", "\n    return 1   \n\n") == "\n    return 1"
    assert suggest("x = |\n", "   ") == ""


def test_control_characters_and_broken_utf8_are_removed() -> None:
    assert suggest("name = |\n", "'caf\ufffd\x17e'") == "'cafe'"


@pytest.mark.parametrize(
    ("raw", "done"),
    [("\n    return 1\n", False), ("\n    return 1\nprint(2)\n", True)],
)
def test_streaming_knows_when_the_block_is_over(raw: str, done: bool) -> None:
    site, _ = at("def f():|\n")
    text, finished = process(raw, site, plan(site, 8))
    assert text.startswith("\n    return 1")
    assert finished is done


def test_streaming_one_line_is_done_at_the_first_newline() -> None:
    site, _ = at("x = |\n")
    assert process("1 +", site, plan(site, 8)) == ("1 +", False)
    assert process("1 + 2\n", site, plan(site, 8)) == ("1 + 2", True)


def test_closing_quote_already_in_the_suffix_is_not_repeated() -> None:
    assert suggest('name = "|"\n', 'hello"') == "hello"


def test_complete_lines_leave_out_the_line_being_written() -> None:
    site, _ = at("def load(path):|\n")
    shape = plan(site, 8)
    assert complete_lines("\n    with open(pa", site, shape) == ""  # no whole line yet
    assert complete_lines("\n    with open(path) as f:\n        ret", site, shape) == (
        "\n    with open(path) as f:"
    )
    one_line, _ = at("x = |\n")
    assert complete_lines("1\n2", one_line, plan(one_line, 8)) == ""  # one-line: never early
