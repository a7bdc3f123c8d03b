"""Shared helpers for the TUI tests: a fixed stored conversation and a Pilot wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.support import DaemonProcess, start_daemon, write_profile
from tui.stats import ReplyStats
from tui.store import ChatSettings, ConversationStore

DOWN_URL = "http://127.0.0.1:9"
"""Nothing listens on the discard port: a daemon that is down, with a fixed address."""

# Noon UTC on 2026-03-03: the same calendar day in every time zone a CI runner uses.
FIXED_TIME = 1772539200.0

CODE_REPLY = """Here is a function:

```python
def add(a: int, b: int) -> int:
    return a + b
```

And a test:

```python
assert add(2, 3) == 5
```
"""


BARE_CODE_REPLY = """def load_module(name, path=None):
    # a module by name, or from a file when a path is given
    if path is None:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name, path)
    return importlib.util.module_from_spec(spec)


for name in sys.argv[1:]:
    print(load_module(name))
That loads every module named on the command line."""
"""Code as a code model writes it: no fences, prose after it."""


@pytest.fixture(scope="package")
def slow_daemon(tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    """A daemon whose replies take seconds, not milliseconds: the embedded engine decodes the
    shared test model at thousands of tokens a second, faster than a test can press Esc in
    the middle of a reply. A wider random model (~200 tokens/s on a 2-core CPU) leaves time
    to cancel, or to kill the TUI, while a reply is really streaming."""
    from ling_local.bench.random_model import build_random_llama

    model = build_random_llama(
        tmp_path_factory.mktemp("slow-model"),
        hidden_size=256,
        intermediate_size=688,
        num_layers=6,
    )
    profile = write_profile(tmp_path_factory.mktemp("slow-profile") / "slow.toml", str(model))
    daemon = start_daemon(profile, tmp_path_factory.mktemp("slow-daemon-home"))
    yield daemon
    daemon.stop()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "conversations.sqlite3"


def seed_conversations(path: Path) -> tuple[int, int]:
    """Two fixed conversations; the second one is the most recent."""
    store = ConversationStore(path)
    try:
        first = store.create("Shell one-liners", created=FIXED_TIME)
        store.add_message(first.id, "user", "How do I count lines in a file?", created=FIXED_TIME)
        store.add_message(first.id, "assistant", "Use `wc -l file.txt`.", created=FIXED_TIME + 1)
        second = store.create(
            "Add two numbers",
            ChatSettings(system_prompt="You write Python."),
            created=FIXED_TIME + 60,
        )
        store.add_message(
            second.id,
            "user",
            "Write a function that adds two numbers.",
            created=FIXED_TIME + 60,
        )
        stats = ReplyStats(
            ttft_s=0.084,
            engine_ttft_ms=61.0,
            completion_tokens=42,
            seconds=0.9,
            tokens_per_s=51.2,
            accept_length=3.1,
            finish_reason="stop",
        )
        store.add_message(
            second.id, "assistant", CODE_REPLY, stats, model="ling-tiny", created=FIXED_TIME + 61
        )
        return first.id, second.id
    finally:
        store.close()


def seed_code_shapes(path: Path) -> int:
    """One conversation with both kinds of reply: fenced code, and bare code."""
    store = ConversationStore(path)
    try:
        conversation = store.create("Code shapes", created=FIXED_TIME)
        store.add_message(conversation.id, "user", "Add two numbers.", created=FIXED_TIME)
        store.add_message(conversation.id, "assistant", CODE_REPLY, created=FIXED_TIME + 1)
        store.add_message(conversation.id, "user", "Load a module by name.", created=FIXED_TIME + 2)
        store.add_message(conversation.id, "assistant", BARE_CODE_REPLY, created=FIXED_TIME + 3)
        return conversation.id
    finally:
        store.close()


LONG_LINE_REPLY = """A query that does it all in one line:

```python
def find(session, name):
    result = session.query(User).filter(User.name == name).options(selectinload(User.addresses)).order_by(User.id).all()  # an InstrumentedExpression each
    return result
```
"""
"""A reply with a code line of 150 characters: wider than the chat at 100 columns."""


def seed_long_lines(path: Path) -> int:
    store = ConversationStore(path)
    try:
        conversation = store.create("Long lines", created=FIXED_TIME)
        store.add_message(conversation.id, "user", "Find a user.", created=FIXED_TIME)
        store.add_message(conversation.id, "assistant", LONG_LINE_REPLY, created=FIXED_TIME + 1)
        return conversation.id
    finally:
        store.close()


async def wait_for(
    pilot: Pilot, condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Let the app run until `condition()` holds (fails the test after `timeout`)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)
    await asyncio.sleep(0)


async def daemon_idle(client, timeout: float = 10.0) -> bool:
    """True once the daemon runs no generation (what a cancel must lead to)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await client.health()).running == 0:
            return True
        await asyncio.sleep(0.05)
    return False
