"""The conversation store on a real SQLite file, and the Markdown export."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ling_local.errors import ConfigError
from tests.tui.conftest import CODE_REPLY, seed_conversations
from tui.export import conversation_markdown, default_export_path, write_export
from tui.stats import ReplyStats
from tui.store import ChatSettings, ConversationStore


def test_wal_mode_and_every_message_visible_to_another_connection(store_path: Path) -> None:
    store = ConversationStore(store_path)
    conversation = store.create("t")
    store.add_message(conversation.id, "user", "hello")
    # A second connection (a restarted TUI) sees the committed message at once.
    other = sqlite3.connect(store_path)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT content FROM messages").fetchall() == [("hello",)]
    other.close()
    store.close()


def test_reopen_keeps_conversations_messages_stats_and_settings(store_path: Path) -> None:
    first, second = seed_conversations(store_path)
    store = ConversationStore(store_path)
    listed = store.list()
    assert [c.id for c in listed] == [second, first]  # newest first
    assert listed[0].settings.system_prompt == "You write Python."
    assert listed[0].message_count == 2
    messages = store.messages(second)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == CODE_REPLY
    assert messages[1].stats is not None and messages[1].stats.accept_length == 3.1
    store.close()


def test_search_matches_titles_and_text_and_escapes_wildcards(store_path: Path) -> None:
    first, second = seed_conversations(store_path)
    store = ConversationStore(store_path)
    assert [c.id for c in store.list("shell")] == [first]
    assert [c.id for c in store.list("wc -L")] == [first]  # message text, any case
    assert [c.id for c in store.list("a + b")] == [second]
    assert store.list("100%") == []
    assert store.list("_") == []  # a literal underscore, not "any character"
    store.close()


def test_rename_settings_delete_cascade(store_path: Path) -> None:
    first, _ = seed_conversations(store_path)
    store = ConversationStore(store_path)
    store.rename(first, "Counting lines")
    store.update_settings(first, ChatSettings("Be brief.", 0.2, 64, True))
    got = store.get(first)
    assert got is not None and got.title == "Counting lines"
    assert got.settings == ChatSettings("Be brief.", 0.2, 64, True)
    store.delete(first)
    assert store.get(first) is None
    assert store.messages(first) == []
    store.close()


def test_delete_messages_from_drops_the_tail(store_path: Path) -> None:
    store = ConversationStore(store_path)
    c = store.create("t")
    ids = [store.add_message(c.id, role, role).id for role in ("user", "assistant", "user")]
    store.delete_messages_from(c.id, ids[1])
    assert [m.id for m in store.messages(c.id)] == ids[:1]
    assert store.add_message(c.id, "assistant", "again").id > ids[-1]  # ids are never reused
    store.close()


def test_bad_settings_fail_with_the_field_name() -> None:
    with pytest.raises(ConfigError, match="temperature"):
        ChatSettings(temperature=3.0)
    with pytest.raises(ConfigError, match="max_tokens"):
        ChatSettings(max_tokens=0)


def test_a_newer_schema_is_refused_not_corrupted(store_path: Path) -> None:
    ConversationStore(store_path).close()
    db = sqlite3.connect(store_path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(ConfigError, match="newer"):
        ConversationStore(store_path)


def test_prefs_round_trip(store_path: Path) -> None:
    store = ConversationStore(store_path)
    assert store.get_pref("theme", "dark") == "dark"
    store.set_pref("theme", "textual-light")
    store.set_pref("theme", "textual-dark")
    assert store.get_pref("theme") == "textual-dark"
    store.close()


def test_export_markdown(store_path: Path, tmp_path: Path) -> None:
    _, second = seed_conversations(store_path)
    store = ConversationStore(store_path)
    conversation = store.get(second)
    assert conversation is not None
    text = conversation_markdown(conversation, store.messages(second))
    assert text.startswith("# Add two numbers\n")
    assert "## System\n\nYou write Python." in text
    assert "## You\n\nWrite a function that adds two numbers." in text
    assert "```python\ndef add(a: int, b: int) -> int:" in text
    assert "TTFT 84 ms (engine 61)" in text
    path = default_export_path(conversation, tmp_path)
    assert path.name == f"add-two-numbers-{second}.md"
    assert write_export(path, conversation, store.messages(second)).read_text() == text
    store.close()


def test_reply_stats_format_and_json() -> None:
    stats = ReplyStats(0.25, 200.0, 100, 2.25, 50.0, None, "length")
    assert (
        stats.format()
        == "TTFT 250 ms (engine 200) · 50.0 tok/s · 100 tok in 2.2 s · hit max tokens"
    )
    assert ReplyStats.from_json(stats.to_json()) == stats
    assert ReplyStats.from_json("not json") is None
