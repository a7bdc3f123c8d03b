"""Conversations in SQLite under the state dir.

Durability is the point: the database runs in WAL mode with ``synchronous=FULL`` and every
message is committed the moment it is complete (a sent prompt, a finished reply), so a crash
or ``kill -9`` of the TUI loses at most the reply that was still streaming. Calls are small
and synchronous on purpose: one indexed insert plus a commit is well under the time of a frame.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ling_local import paths
from ling_local.errors import ConfigError
from tui.stats import ReplyStats

__all__ = ["ChatSettings", "Conversation", "ConversationStore", "StoredMessage", "default_db_path"]

# AUTOINCREMENT: ids are never reused, so "this message and everything after it" (edit,
# regenerate, cancel) can be said with one id comparison.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    system_prompt TEXT    NOT NULL DEFAULT '',
    temperature   REAL,
    max_tokens    INTEGER,
    ignore_eos    INTEGER NOT NULL DEFAULT 0,
    created       REAL    NOT NULL,
    updated       REAL    NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT    NOT NULL CHECK (role IN ('user', 'assistant')),
    content         TEXT    NOT NULL,
    model           TEXT    NOT NULL DEFAULT '',
    stats           TEXT,
    created         REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS prefs (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_VERSION = 1


def default_db_path() -> Path:
    return paths.state_dir() / "conversations.sqlite3"


@dataclass(slots=True)
class ChatSettings:
    """Per-conversation system prompt and sampling; None means the daemon's default."""

    system_prompt: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    ignore_eos: bool = False
    """Always generate max_tokens tokens (what llama.cpp and vLLM call ignore_eos)."""

    def __post_init__(self) -> None:
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"temperature must be between 0 and 2, got {self.temperature}")
        if self.max_tokens is not None and not 1 <= self.max_tokens <= 1_000_000:
            raise ConfigError(f"max_tokens must be a positive number, got {self.max_tokens}")


@dataclass(slots=True)
class Conversation:
    id: int
    title: str
    settings: ChatSettings = field(default_factory=ChatSettings)
    created: float = 0.0
    updated: float = 0.0
    message_count: int = 0


@dataclass(slots=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: ReplyStats | None = None
    created: float = 0.0
    model: str = ""
    """The model that wrote a reply (as the daemon named it)."""


class ConversationStore:
    """The TUI's only persistent state. One connection, used from the UI thread."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if str(self.path) != ":memory:":
            paths.ensure_private_dir(self.path.parent)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > _VERSION:
            raise ConfigError(
                f"{self.path} was written by a newer ling-local (schema {version}); upgrade"
            )
        self._db.executescript(f"BEGIN; {_SCHEMA} PRAGMA user_version={_VERSION}; COMMIT;")

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One explicit transaction: committed (and fsynced) when the block ends."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ----------------------------------------------------------------- conversations
    def create(
        self, title: str, settings: ChatSettings | None = None, *, created: float | None = None
    ) -> Conversation:
        s = settings or ChatSettings()
        now = time.time() if created is None else created
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, temperature, max_tokens,"
                " ignore_eos, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (title, s.system_prompt, s.temperature, s.max_tokens, int(s.ignore_eos), now, now),
            )
        return Conversation(int(cur.lastrowid), title, s, now, now)

    def start(
        self, title: str, settings: ChatSettings, text: str
    ) -> tuple[Conversation, StoredMessage]:
        """A new conversation and its first message, in one transaction (one fsync)."""
        now = time.time()
        s = settings
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, temperature, max_tokens,"
                " ignore_eos, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (title, s.system_prompt, s.temperature, s.max_tokens, int(s.ignore_eos), now, now),
            )
            conversation_id = int(cur.lastrowid)
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, created)"
                " VALUES (?, 'user', ?, ?)",
                (conversation_id, text, now),
            )
        conversation = Conversation(conversation_id, title, s, now, now, 1)
        return conversation, StoredMessage(
            int(cur.lastrowid), conversation_id, "user", text, None, now
        )

    def get(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute(
            f"{_SELECT_CONVERSATIONS} WHERE c.id = ? GROUP BY c.id", (conversation_id,)
        ).fetchone()
        return _conversation(row) if row else None

    def list(self, query: str = "") -> list[Conversation]:
        """Newest first; `query` matches titles and message text, case-insensitively."""
        if not query.strip():
            sql = f"{_SELECT_CONVERSATIONS} GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
            return [_conversation(r) for r in self._db.execute(sql)]
        like = "%" + query.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like += "%"
        sql = (
            f"{_SELECT_CONVERSATIONS} WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM"
            " messages s WHERE s.conversation_id = c.id AND s.content LIKE ? ESCAPE '\\')"
            " GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
        )
        return [_conversation(r) for r in self._db.execute(sql, (like, like))]

    def rename(self, conversation_id: int, title: str) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
            )

    def update_settings(self, conversation_id: int, settings: ChatSettings) -> None:
        s = settings
        with self._tx():
            self._db.execute(
                "UPDATE conversations SET system_prompt = ?, temperature = ?, max_tokens = ?,"
                " ignore_eos = ? WHERE id = ?",
                (s.system_prompt, s.temperature, s.max_tokens, int(s.ignore_eos), conversation_id),
            )

    def delete(self, conversation_id: int) -> None:
        with self._tx():
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # ----------------------------------------------------------------- messages
    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        stats: ReplyStats | None = None,
        *,
        model: str = "",
        created: float | None = None,
    ) -> StoredMessage:
        """Append a complete message and commit it at once (the durability promise)."""
        now = time.time() if created is None else created
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, model, stats, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, model, stats.to_json() if stats else None, now),
            )
            self._db.execute(
                "UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id)
            )
        return StoredMessage(int(cur.lastrowid), conversation_id, role, content, stats, now, model)

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        return [
            StoredMessage(
                r["id"],
                r["conversation_id"],
                r["role"],
                r["content"],
                ReplyStats.from_json(r["stats"]),
                r["created"],
                r["model"],
            )
            for r in rows
        ]

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Drop a message and everything after it (edit, regenerate, cancel)."""
        with self._tx():
            self._db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                (conversation_id, message_id),
            )

    # ----------------------------------------------------------------- preferences
    def get_pref(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM prefs WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_pref(self, key: str, value: str) -> None:
        with self._tx():
            self._db.execute(
                "INSERT INTO prefs (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def close(self) -> None:
        self._db.close()


_SELECT_CONVERSATIONS = (
    "SELECT c.*, COUNT(m.id) AS message_count FROM conversations c"
    " LEFT JOIN messages m ON m.conversation_id = c.id"
)


def _conversation(row: sqlite3.Row) -> Conversation:
    settings = ChatSettings(
        row["system_prompt"], row["temperature"], row["max_tokens"], bool(row["ignore_eos"])
    )
    return Conversation(
        row["id"], row["title"], settings, row["created"], row["updated"], row["message_count"]
    )
