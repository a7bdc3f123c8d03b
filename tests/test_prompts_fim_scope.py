"""The scope of a fill-in-the-middle answer, from the text around the cursor."""

from __future__ import annotations

from ling_local.config import PromptSettings
from ling_local.prompts import PromptBuilder, completes_a_line, fim_scope


def test_scope_is_the_indentation_of_the_code_after_the_cursor() -> None:
    assert fim_scope("def add(a, b):\n", "\n\nprint(add(1, 2))\n") == (0, False)
    assert fim_scope("    d = {\n", "    }\n") == (4, True)
    assert fim_scope("def f():\n    ", "\n        return 1\n") == (8, False)
    assert fim_scope("\tif x:\n", "\t\ty()\n") == (8, True)


def test_the_rest_of_the_cursors_line_is_not_the_scope() -> None:
    # inside a line, the line's rest belongs to the cursor's own statement
    assert fim_scope("x = foo(", ")\n    y = 2\n") == (4, True)
    assert fim_scope("x = foo(", ")") == (0, True)


def test_at_the_end_of_a_file_the_scope_is_the_top_level() -> None:
    # nothing follows: the answer ends before a new top-level paragraph (the next function)
    assert fim_scope("def f():\n", "") == (0, True)
    assert fim_scope("def f():\n", "\n\n  \n") == (0, False)


def test_an_answer_completes_the_line_someone_is_typing() -> None:
    # text before the cursor that opens nothing, or text after it: the rest of the line only
    assert completes_a_line("    return comment_ws, ", "\n\n    def f(self):\n")
    assert completes_a_line("with open(path, ", ") as f:\n    data = f.read()\n")
    assert completes_a_line("x = 1\nprint(", ")\n")
    # an empty line, or a line that opens a block or a bracket: several lines may follow
    assert not completes_a_line("def add(a, b):\n", "\n\nprint(add(1, 2))\n")
    assert not completes_a_line("class A:\n    ", "\n")
    assert not completes_a_line("def add(a, b):", "\n\nprint(add(1, 2))\n")
    assert not completes_a_line("d = {  # names", "\n}\n")
    assert not completes_a_line("", "")
    # at the start of a line with text: whole lines go in before it
    assert not completes_a_line("def f(xs):\n", "    return sum(xs)\n")
    assert completes_a_line("def f(xs):\n    ", "return sum(xs)\n")


def test_a_one_line_fim_prompt_stops_at_the_newline() -> None:
    builder = PromptBuilder(PromptSettings(fim_format="spm"), None)
    one = builder.fim("    return comment_ws, ", "\n\n    def f(self):\n")
    assert "\n" in one.stop and one.scope is None
    block = builder.fim("def add(a, b):\n", "\n\nprint(add(1, 2))\n")
    assert "\n" not in block.stop and block.scope == (0, False)
