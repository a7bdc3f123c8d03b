"""Replies keep the shape of their code: fenced code is highlighted as it is, and code a
model writes without fences is found and shown as code — while it streams too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.content import Content
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownFence, MarkdownParagraph

from tests.tui.conftest import (
    BARE_CODE_REPLY,
    CODE_REPLY,
    DOWN_URL,
    LONG_LINE_REPLY,
    seed_code_shapes,
    seed_long_lines,
    wait_for,
)
from tui.app import make_app
from tui.reply_markdown import as_markdown
from tui.widgets.chat_message import ChatMessage, code_blocks
from tui.widgets.code_block import CONTINUED, WrappedCode, wrap_code
from tui.widgets.framed_stream import FRAME_S

BARE_CODE = BARE_CODE_REPLY.rsplit("\n", 1)[0] + "\n"  # the reply without its last sentence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the reply: one line of Markdown paragraph before
        (
            "def load_module(name):\n    return load_module(name)",
            "```python\ndef load_module(name):\n    return load_module(name)\n```",
        ),
        ("Use `wc -l file.txt`.", "Use `wc -l file.txt`."),
        ("- import the module\n- call main()", "- import the module\n- call main()"),
        ("import this module first.", "import this module first."),
        (
            "Set it:\nx = 1\ny = f(x)\nDone.",
            "Set it:\n```python\nx = 1\ny = f(x)\n```\nDone.",
        ),
        (
            "# sum of two\ndef add(a, b):\n\n    return a + b\n\nThat is all.",
            "```python\n# sum of two\ndef add(a, b):\n\n    return a + b\n```\n\nThat is all.",
        ),
        (CODE_REPLY, CODE_REPLY),  # fenced code passes through as the model wrote it
    ],
)
def test_bare_code_is_fenced_and_the_rest_is_left_alone(text: str, expected: str) -> None:
    assert as_markdown(text) == expected


def test_a_streaming_reply_grows_at_the_end_between_block_changes() -> None:
    """Partial results only append, except where a line starts or ends a code block; the
    last one is the finished reply's."""
    resets, shown = 0, ""
    for n in range(1, len(BARE_CODE_REPLY) + 1):
        markdown = as_markdown(BARE_CODE_REPLY[:n], partial=True)
        resets += not markdown.startswith(shown)
        shown = markdown
    assert resets <= 3
    assert as_markdown(BARE_CODE_REPLY, partial=True).startswith(shown[:-50])
    assert code_blocks(BARE_CODE_REPLY) == [BARE_CODE]


class OneMessage(App):
    def compose(self) -> ComposeResult:
        yield ChatMessage("assistant")


def _fences(message: ChatMessage) -> list[MarkdownFence]:
    return list(message.query_one(".body", Markdown).query(MarkdownFence))


async def test_bare_code_streams_in_as_code() -> None:
    app = OneMessage()
    async with app.run_test(size=(100, 40)) as pilot:
        message = app.query_one(ChatMessage)
        body = await message.stream()
        head, tail = BARE_CODE_REPLY[:120], BARE_CODE_REPLY[120:]
        for i in range(0, len(head), 3):  # token-sized pieces, at a token rate
            await body.write(head[i : i + 3])
            await asyncio.sleep(FRAME_S / 4)
        await asyncio.sleep(FRAME_S)
        await body.write("")
        await pilot.pause()
        # mid-reply: the function so far is already a code block, lines and indentation kept
        (fence,) = _fences(message)
        assert fence.code.startswith("def load_module(name, path=None):\n    # a module")
        for i in range(0, len(tail), 5):
            await body.write(tail[i : i + 5])
        await body.stop()
        await pilot.pause()
        (fence,) = _fences(message)
        assert fence.code.rstrip("\n") == BARE_CODE.rstrip("\n") and fence.lexer == "python"
        (prose,) = message.query(MarkdownParagraph)  # the sentence after it stays prose
        assert "def " not in str(prose.render())


async def test_y_copies_bare_code_as_a_block(store_path: Path) -> None:
    seed_code_shapes(store_path)
    app = make_app(store_path=store_path, url=DOWN_URL, token="x", chain_file=None)
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.click("#prompt")
        await pilot.press("shift+tab")  # the last message: the bare-code reply
        assert isinstance(app.focused, ChatMessage) and app.focused.content == BARE_CODE_REPLY
        await pilot.press("y")
        assert app.clipboard == BARE_CODE


@pytest.mark.parametrize("width", [20, 37, 80])
def test_wrapped_code_keeps_every_character_and_marks_each_continuation(width: int) -> None:
    code = Content("def f(x):\n    return " + "x + " * 40 + "1\n\n# é 漢字 " + "ab" * 30)
    rows = wrap_code(code, width)
    assert all(row.cell_length <= width for row in rows)
    lines, current = [], None
    for row in rows:
        if row.plain.startswith(CONTINUED):
            current += row.plain[len(CONTINUED) :]
        else:
            if current is not None:
                lines.append(current)
            current = row.plain
    lines.append(current)
    assert lines == code.plain.split("\n")
    assert len(rows) > len(lines)  # something was wrapped, and said so


async def test_a_long_code_line_is_wrapped_not_cut(store_path: Path) -> None:
    """At 100 columns every code block fits its width (nothing runs past its edge, where
    Textual's fence hid it behind an invisible scrollbar), and its rows hold the whole line."""
    seed_long_lines(store_path)
    app = make_app(store_path=store_path, url=DOWN_URL, token="x")
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        (reply,) = [m for m in app.screen.query(ChatMessage) if m.role == "assistant"]
        (fence,) = reply.query(MarkdownFence)
        await wait_for(pilot, lambda: fence.size.width > 0, what="the code block laid out")
        assert fence.virtual_size.width <= fence.size.width
        (code,) = fence.query(WrappedCode)
        rows = wrap_code(code.code, code.content_size.width)
        shown = "".join(r.plain.removeprefix(CONTINUED) for r in rows)
        long_line = next(line for line in LONG_LINE_REPLY.splitlines() if len(line) > 100)
        assert long_line in shown
