"""The scope of a fill-in-the-middle answer, from the text around the cursor."""

from __future__ import annotations

from ling_local.prompts import fim_scope


def test_scope_is_the_indentation_of_the_code_after_the_cursor() -> None:
    assert fim_scope("def add(a, b):\n", "\n\nprint(add(1, 2))\n") == (0, False)
    assert fim_scope("    d = {\n", "    }\n") == (4, True)
    assert fim_scope("def f():\n    ", "\n        return 1\n") == (8, False)
    assert fim_scope("\tif x:\n", "\t\ty()\n") == (8, True)


def test_the_rest_of_the_cursors_line_is_not_the_scope() -> None:
    # inside a line, the line's rest belongs to the cursor's own statement
    assert fim_scope("x = foo(", ")\n    y = 2\n") == (4, True)
    assert fim_scope("x = foo(", ")") is None


def test_no_scope_at_the_end_of_a_file() -> None:
    assert fim_scope("def f():\n", "") is None
    assert fim_scope("def f():\n", "\n\n  \n") is None
