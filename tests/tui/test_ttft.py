"""Time to first token in the TUI, against the SDK's on the same daemon (`ling-local bench
tui` measures it; the numbers are printed, not asserted on), and what keeps the TUI's close
to the SDK's: between Enter and the first token on screen the request goes out first and
nothing rebuilds the footer, and a prompt is drawn as typed, without a Markdown pass."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from textual.widgets import Footer, Static

from ling_local.bench.tui_ttft import _first_text_on_screen, summarize, tui_vs_sdk
from tests.support import DaemonProcess
from tests.tui.conftest import FIXED_TIME, wait_for
from tui.app import make_app
from tui.screens.chat import SETTLE_S
from tui.store import ChatSettings, ConversationStore
from tui.widgets.chat_message import ChatMessage


async def test_bench_tui_times_the_tui_and_the_sdk_on_the_same_daemon(
    daemon: DaemonProcess, store_path: Path
) -> None:
    rounds = await tui_vs_sdk(
        daemon.url, daemon.token, rounds=2, warmup=1, max_tokens=8, store_path=store_path
    )
    summary = summarize(rounds)
    print(
        f"\nTUI TTFT {summary['tui_ms']} ms (engine {summary['tui_engine_ms']}), "
        f"SDK {summary['sdk_ms']} ms (engine {summary['sdk_engine_ms']}), "
        f"gap {summary['gap_ms']} ms"
    )
    assert len(rounds) == 2
    for r in rounds:
        assert r.tui_ms > 0 and r.sdk_ms > 0
        assert r.tui_engine_ms is not None and r.sdk_engine_ms is not None
    store = ConversationStore(store_path)  # every TUI round's exchange was kept
    try:
        conversations = store.list()
        assert len(conversations) == 3
        assert all([m.role for m in store.messages(c.id)] == ["user", "assistant"]
                   for c in conversations)  # fmt: skip
    finally:
        store.close()


async def test_the_first_token_is_on_screen_before_the_footer_is_rebuilt(
    daemon: DaemonProcess, store_path: Path
) -> None:
    """Rebuilding the footer (Stop instead of Regen and Edit) mounts a dozen widgets: it
    waits until the reply's first text is drawn, then happens."""
    app = make_app(store_path=store_path, url=daemon.url, token=daemon.token)
    async with app.run_test(size=(100, 32)) as pilot:
        chat = app.screen
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        chat.draft_settings = ChatSettings(max_tokens=24, ignore_eos=True)
        chat.prompt.load_text("Write a function that adds two numbers.")
        await pilot.press("enter")  # a first exchange: what only a first one costs is paid
        await wait_for(pilot, lambda: len(chat.history) == 2, what="the first reply")
        await pilot.press("ctrl+n")
        chat.draft_settings = ChatSettings(max_tokens=24, ignore_eos=True)
        chat.prompt.load_text("Write a function that subtracts two numbers.")
        await pilot.pause()
        keys = list(app.screen.query_one(Footer).children)
        enter = asyncio.create_task(pilot.press("enter"))
        started = time.monotonic()
        while not _first_text_on_screen(chat):
            assert time.monotonic() < started + 60, "no reply text on screen"
            await asyncio.sleep(0.001)
        if list(app.screen.query_one(Footer).children) != keys:  # only once the wait is over
            assert time.monotonic() - started >= SETTLE_S, "the footer was rebuilt first"
        await enter
        await wait_for(
            pilot,
            lambda: list(app.screen.query_one(Footer).children) != keys,
            what="the footer rebuilt after the first token",
        )


async def test_a_prompt_is_shown_as_typed(store_path: Path) -> None:
    """Its line breaks kept (Markdown would join the lines of a paragraph into one)."""
    store = ConversationStore(store_path)
    conversation = store.create("lines", created=FIXED_TIME)
    store.add_message(conversation.id, "user", "first line\nsecond line", created=FIXED_TIME)
    store.close()
    app = make_app(store_path=store_path, url="http://127.0.0.1:9", token="x")
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        (message,) = app.screen.query(ChatMessage)
        body = message.query_one(".body")
        assert isinstance(body, Static) and body.size.height == 2
