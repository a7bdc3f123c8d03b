"""The help keys: F1 anywhere, `?` where no text box has focus (in one it is a character),
and the README, the welcome box and the help screen say the same."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import Input

from tests.support import REPO
from tests.tui.conftest import DOWN_URL, seed_conversations, wait_for
from tui.app import LingApp, make_app
from tui.screens.help import KEYS, HelpScreen
from tui.widgets.chat_log import _WELCOME
from tui.widgets.chat_message import ChatMessage
from tui.widgets.sidebar import ConversationList


def app_for(store_path: Path) -> LingApp:
    return make_app(store_path=store_path, url=DOWN_URL, token="x")


async def test_question_mark_shows_the_keys_where_no_text_box_has_focus(store_path: Path) -> None:
    seed_conversations(store_path)
    app = app_for(store_path)
    async with app.run_test(size=(100, 32)) as pilot:
        chat = app.screen
        for widget in (chat.query_one(ConversationList), chat.query(ChatMessage).last()):
            widget.focus()
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
            await pilot.press("question_mark")  # and closes it again
            await wait_for(pilot, lambda: app.screen is chat, what="help closed")
            assert app.focused is widget


async def test_question_mark_is_a_character_in_a_text_box(store_path: Path) -> None:
    seed_conversations(store_path)
    app = app_for(store_path)
    async with app.run_test(size=(100, 32)) as pilot:
        chat = app.screen
        chat.prompt.focus()
        await pilot.press("w", "h", "y", "question_mark")
        assert chat.prompt.text == "why?" and app.screen is chat
        search = chat.query_one("#search", Input)
        search.focus()
        await pilot.press("question_mark")
        assert search.value == "?" and app.screen is chat
        await pilot.press("f1")  # F1 works from a text box too
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")


def test_the_readme_the_welcome_box_and_the_bindings_agree() -> None:
    bound = {
        key
        for binding in LingApp.BINDINGS
        if binding.action == "help"
        for key in binding.key.split(",")
    }
    assert bound == {"f1", "question_mark"}
    listed = {entry for _, keys in KEYS for entry, does in keys if "this help" in does}
    assert listed == {"F1, ?"}
    welcome = " ".join(re.sub(r"\[/?b\]", "", _WELCOME).split())
    assert "F1 lists every key, and so does ? outside a text box" in welcome
    readme = (REPO / "README.md").read_text().split("### In your terminal", 1)[1]
    readme = " ".join(readme.split("###", 1)[0].split())
    assert "F1 shows every key, and so does `?` where no text box has focus" in readme
