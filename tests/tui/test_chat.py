"""The chat driven with Textual's Pilot against a real daemon serving the embedded model."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.widgets import Markdown

from tests.support import DaemonProcess
from tests.tui.conftest import CODE_REPLY, DOWN_URL, daemon_idle, seed_conversations, wait_for
from tui.app import LingApp, make_app
from tui.screens.chat import ChatScreen
from tui.store import ChatSettings, ConversationStore
from tui.widgets.chat_log import EmptyState, ErrorNotice
from tui.widgets.chat_message import ChatMessage
from tui.widgets.status_bar import StatusBar

SIZE = (100, 32)


def app_for(daemon: DaemonProcess | None, store_path: Path, **kw) -> LingApp:
    url, token = (daemon.url, daemon.token) if daemon else (DOWN_URL, "x")
    return make_app(store_path=store_path, url=url, token=token, health_interval=0.5, **kw)


def seed_settings(store_path: Path, **settings) -> int:
    store = ConversationStore(store_path)
    conversation = store.create("test chat", ChatSettings(**settings))
    store.close()
    return conversation.id


def stored(store_path: Path, conversation_id: int) -> list[tuple[str, str]]:
    store = ConversationStore(store_path)
    try:
        return [(m.role, m.content) for m in store.messages(conversation_id)]
    finally:
        store.close()


def chat(app: LingApp) -> ChatScreen:
    assert isinstance(app.screen, ChatScreen)
    return app.screen


async def send(pilot, text: str) -> None:
    await pilot.click("#prompt")
    chat(pilot.app).prompt.load_text(text)
    await pilot.press("enter")


async def test_send_streams_a_reply_and_commits_both_messages(
    daemon: DaemonProcess, store_path: Path
) -> None:
    conversation_id = seed_settings(store_path, max_tokens=400, ignore_eos=True)
    app = app_for(daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        shown_while_streaming: list[str] = []

        def sample() -> None:  # runs inside the app, between frames, while the reply streams
            if screen.reply is not None and screen.reply.widget.is_mounted:
                shown_while_streaming.append(screen.reply.widget.query_one(Markdown).source)

        sampler = app.set_interval(0.005, sample)
        await send(pilot, "Write a function that adds two numbers.")
        await wait_for(
            pilot, lambda: screen.reply is None and len(screen.history) == 2, what="reply finished"
        )
        sampler.stop()
        # The reply's text grew on screen before the reply was complete.
        assert any(shown_while_streaming), "no partial text was shown while streaming"
        widgets = screen.log_view.messages()
        assert [w.role for w in widgets] == ["user", "assistant"]
        reply = widgets[-1]
        stats = reply.stats
        assert stats is not None and 1 <= stats.completion_tokens <= 400
        assert stats.finish_reason in ("stop", "length")
        assert stats.ttft_s is not None and 0 < stats.ttft_s < stats.seconds
        assert "tok/s" in str(reply.query_one(".stats").render())
        assert "TTFT" in str(app.screen.query_one(StatusBar).query_one("#reply-numbers").render())
        assert screen.prompt.text == ""
    messages = stored(store_path, conversation_id)
    assert messages[0] == ("user", "Write a function that adds two numbers.")
    assert messages[1] == ("assistant", reply.content)
    assert len(messages) == 2


async def stop_mid_reply(pilot, prompt: str) -> int:
    """Send `prompt` and press Esc while its reply streams; the conversation's id."""
    screen = chat(pilot.app)
    for _ in range(5):  # a stop string may end a reply before we can cancel it: retry
        screen.action_new_conversation() if screen.history else None
        await send(pilot, prompt)
        await wait_for(
            pilot,
            lambda: screen.reply is None or screen.reply.meter.chunks > 3,
            what="tokens streaming",
        )
        if screen.reply is not None:
            break
    else:
        raise AssertionError("every reply ended before it could be cancelled")
    conversation_id = screen.conversation.id
    await pilot.press("escape")
    await pilot.pause()
    return conversation_id


async def test_escape_cancels_the_reply_and_restores_the_prompt(
    slow_daemon: DaemonProcess, store_path: Path
) -> None:
    seed_settings(store_path, max_tokens=4000, ignore_eos=True)
    app = app_for(slow_daemon, store_path)
    prompt = "Tell me a long story\nabout a compiler."
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        conversation_id = await stop_mid_reply(pilot, prompt)
        assert screen.reply is None
        assert screen.prompt.text == prompt
        assert screen.log_view.messages() == []
        async with slow_daemon.async_client() as client:  # stopped in the daemon, not just here
            assert await daemon_idle(client)
    assert stored(store_path, conversation_id) == []


async def test_a_new_conversation_starts_empty_and_the_draft_waits_in_its_own(
    slow_daemon: DaemonProcess, store_path: Path
) -> None:
    """The prompt Esc gave back belongs to the conversation it was sent in: Ctrl+N opens an
    empty input, and going back to that conversation finds the draft again."""
    seed_settings(store_path, max_tokens=4000, ignore_eos=True)
    app = app_for(slow_daemon, store_path)
    prompt = "Tell me a long story\nabout a compiler."
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        conversation_id = await stop_mid_reply(pilot, prompt)
        assert screen.prompt.text == prompt
        await pilot.press("ctrl+n")
        assert screen.conversation is None and screen.prompt.text == ""
        await pilot.press("ctrl+n")  # again, in the empty conversation: still empty, no error
        await pilot.pause()
        assert screen.conversation is None and screen.prompt.text == ""
        assert len(screen.log_view.query(EmptyState)) == 1
        screen.prompt.load_text("a draft of the new one")
        screen.open_conversation(conversation_id)
        assert screen.prompt.text == prompt
        await pilot.press("ctrl+n")
        assert screen.prompt.text == "a draft of the new one"
        async with slow_daemon.async_client() as client:
            assert await daemon_idle(client)


async def test_switch_conversations_and_restart_finds_them_intact(
    daemon: DaemonProcess, store_path: Path
) -> None:
    first, second = seed_conversations(store_path)
    app = app_for(daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        assert screen.conversation is not None and screen.conversation.id == second
        assert screen.log_view.messages()[-1].content == CODE_REPLY
        screen.query_one("#conversations").focus()
        await pilot.press("home", "down", "enter")  # the list is newest first
        await wait_for(pilot, lambda: screen.conversation.id == first, what="switch")
        assert [w.content for w in screen.log_view.messages()] == [
            "How do I count lines in a file?",
            "Use `wc -l file.txt`.",
        ]
        assert screen.sub_title == "Shell one-liners"
        assert app.focused is screen.prompt
        # Search narrows the sidebar to matching conversations.
        await pilot.press("ctrl+f", *"numbers")
        await pilot.pause()
        assert screen.query_one("#conversations").option_count == 1
    # Restart: a new app on the same database shows the same conversations and messages.
    app = app_for(daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        assert [c.id for c in app.store.list()] == [second, first]
        assert [w.role for w in screen.log_view.messages()] == ["user", "assistant"]
        assert screen.log_view.messages()[-1].stats.format().startswith("TTFT 84 ms")


async def test_regenerate_and_edit_the_last_message(
    daemon: DaemonProcess, store_path: Path
) -> None:
    conversation_id = seed_settings(store_path, max_tokens=6, ignore_eos=True)
    app = app_for(daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        await send(pilot, "first question")
        await wait_for(pilot, lambda: len(screen.history) == 2, what="first reply")
        old_reply = screen.history[-1].id
        await pilot.press("ctrl+r")
        await wait_for(
            pilot,
            lambda: (
                len(screen.history) == 2
                and screen.reply is None
                and screen.history[-1].id != old_reply
            ),
            what="regenerated reply",
        )
        await pilot.press("ctrl+e")
        assert screen.prompt.text == "first question"
        assert all(w.has_class("-editing") for w in screen.log_view.messages())
        screen.prompt.load_text("edited question")
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: (
                len(screen.history) == 2
                and screen.reply is None
                and screen.history[0].content == "edited question"
            ),
            what="resent",
        )
    messages = stored(store_path, conversation_id)
    assert [m[0] for m in messages] == ["user", "assistant"]
    assert messages[0][1] == "edited question"


async def test_copy_a_reply_and_its_code_blocks(store_path: Path) -> None:
    seed_conversations(store_path)
    app = app_for(None, store_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#prompt")
        await pilot.press("shift+tab")  # up from the prompt to the last message
        assert isinstance(app.focused, ChatMessage) and app.focused.role == "assistant"
        await pilot.press("y")
        assert app.clipboard == "def add(a: int, b: int) -> int:\n    return a + b\n"
        await pilot.press("y")
        assert app.clipboard == "assert add(2, 3) == 5\n"
        await pilot.press("c")
        assert app.clipboard == CODE_REPLY


async def test_daemon_down_says_what_to_do_and_keeps_the_prompt(store_path: Path) -> None:
    app = app_for(None, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.state == "down", what="down state")
        empty = screen.query_one(EmptyState)
        assert "ling-local serve" in str(empty.render())
        assert "ling-local serve" in str(screen.query_one("#daemon-state").render())
        await send(pilot, "hello?")
        await pilot.pause()
        assert screen.prompt.text == "hello?"
        assert app.store.list() == []


async def test_a_reply_that_fails_rolls_back_and_explains(
    daemon: DaemonProcess, store_path: Path
) -> None:
    conversation_id = seed_settings(store_path, max_tokens=8)
    app = app_for(daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        # The daemon refuses a prompt longer than the model's context: a 4xx, shown plainly.
        await send(pilot, "word " * 5000)
        await wait_for(pilot, lambda: bool(screen.query(ErrorNotice)), what="error notice")
        assert "failed" in str(screen.query_one(ErrorNotice).render())
        assert screen.prompt.text.startswith("word word")
    assert stored(store_path, conversation_id) == []


async def test_settings_rename_export_delete(store_path: Path, tmp_path: Path) -> None:
    _, second = seed_conversations(store_path)
    app = app_for(None, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await pilot.press("ctrl+s")
        app.screen.query_one("#temperature").value = "5"
        await pilot.press("ctrl+s")
        assert "temperature" in str(app.screen.query_one("#settings-error").render())
        app.screen.query_one("#temperature").value = "0.3"
        app.screen.query_one("#max-tokens").value = "99"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.store.get(second).settings.temperature == 0.3
        assert app.store.get(second).settings.max_tokens == 99

        await pilot.press("f2")
        app.screen.query_one("#value").value = "Adding"
        await pilot.press("enter")
        await pilot.pause()
        assert app.store.get(second).title == "Adding" and screen.sub_title == "Adding"

        target = tmp_path / "out" / "adding.md"
        await pilot.press("ctrl+o")
        app.screen.query_one("#value").value = str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert target.read_text().startswith("# Adding\n")

        screen.query_one("#conversations").focus()
        await pilot.press("home", "d", "y")
        await pilot.pause()
        assert app.store.get(second) is None
        assert screen.conversation is None or screen.conversation.id != second


async def test_a_paste_keeps_its_lines_and_does_not_send(store_path: Path) -> None:
    app = app_for(None, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await pilot.click("#prompt")
        app.post_message(events.Paste("def f():\n    return 1\n"))  # as the driver does
        await pilot.pause()
        await pilot.press(*"# done", "ctrl+j", "x")
        assert screen.prompt.text == "def f():\n    return 1\n# done\nx"
        assert screen.history == []


async def test_quitting_while_a_reply_streams_exits_cleanly(
    slow_daemon: DaemonProcess, store_path: Path
) -> None:
    conversation_id = seed_settings(store_path, max_tokens=4000, ignore_eos=True)
    app = app_for(slow_daemon, store_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = chat(app)
        await wait_for(pilot, lambda: app.daemon_status.ready, what="daemon ready")
        await send(pilot, "a long answer, please")
        await wait_for(
            pilot, lambda: screen.reply is None or screen.reply.meter.chunks > 0, what="streaming"
        )
        await pilot.press("ctrl+q")
    assert stored(store_path, conversation_id)[0] == ("user", "a long answer, please")
    async with slow_daemon.async_client() as client:
        assert await daemon_idle(client)
