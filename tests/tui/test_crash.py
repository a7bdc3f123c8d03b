"""Crash safety: kill -9 the real TUI process while a reply streams, start it again, and every
completed message is there (only the reply in flight is lost)."""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

from tests.support import DaemonProcess, child_env
from tests.tui.pty_app import PtyApp, home_store, wait_until
from tui.store import ChatSettings, ConversationStore


def rows(db: Path) -> list[tuple[str, str]]:
    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT role, content FROM messages ORDER BY id").fetchall()
    finally:
        connection.close()


def more_rows(db: Path, than: int) -> bool:
    return len(rows(db)) > than


def test_kill_during_a_streamed_reply_keeps_every_completed_message(
    slow_daemon: DaemonProcess, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    db = home_store(home)
    store = ConversationStore(db)  # long replies, so there is time to kill one mid-stream
    store.create("crash test", ChatSettings(max_tokens=600, ignore_eos=True))
    store.close()
    env = child_env(home, LING_LOCAL_URL=slow_daemon.url, LING_LOCAL_TOKEN=slow_daemon.token)

    app = PtyApp(env)
    try:
        app.wait_for_text("Enter sends")
        app.wait_for_text("ready · torch")
        app.type("first question\r")
        wait_until(lambda: len(rows(db)) == 2, what="the first reply to be committed")
        with slow_daemon.client() as client:
            for attempt in range(5):  # a reply may end before we catch it: try again
                sent = len(rows(db))
                app.type(f"question {attempt}\r")
                wait_until(partial(more_rows, db, sent), what="the prompt to be committed")
                wait_until(
                    lambda: client.health().running == 1 or len(rows(db)) % 2 == 0,
                    what="a reply streaming",
                )
                if client.health().running == 1 and len(rows(db)) % 2 == 1:
                    break
            before = rows(db)
            assert len(before) % 2 == 1, "could not catch a reply in flight"
            assert app.kill() == -9
            # The dropped connection also stopped the generation in the daemon.
            wait_until(lambda: client.health().running == 0, timeout=10, what="daemon idle")
    finally:
        app.close()

    after = rows(db)
    assert after == before  # every completed message, and not a byte of the cut reply
    assert after[0] == ("user", "first question") and after[1][0] == "assistant"
    assert after[-1][0] == "user"
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    connection.close()

    # Start it again: the conversation opens with the same messages on screen.
    app = PtyApp(env)
    try:
        app.wait_for_text("crash test")  # the conversation, opened again
        app.wait_for_text(after[-1][1])  # its last message, at the bottom of the chat
        app.type("\x11")  # Ctrl+Q
        assert app.process.wait(15) == 0
    finally:
        app.close()
    assert rows(db) == after
