"""App-level behaviour: discovery of a daemon that comes up later, themes, the help screen
covering every key, the command palette, and the import rule (no engine in the TUI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ling_local import paths
from tests.support import REPO, DaemonProcess
from tests.tui.conftest import wait_for
from tui.app import LingApp, make_app
from tui.screens.chains import ChainScreen
from tui.screens.chat import ChatScreen
from tui.screens.help import KEYS
from tui.widgets.chat_log import EmptyState
from tui.widgets.chat_message import ChatMessage


async def test_a_daemon_that_comes_up_later_is_found_by_discovery(
    daemon: DaemonProcess, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing to discover yet: the default address, where no daemon listens.
    monkeypatch.setenv("LING_LOCAL_URL", "http://127.0.0.1:9")
    app = make_app(store_path=store_path, health_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.daemon_status.state == "down", what="down")
        # The daemon "starts": its runtime file and token appear where discovery looks.
        monkeypatch.delenv("LING_LOCAL_URL")
        paths.ensure_private_dir(paths.runtime_dir())
        paths.runtime_file().write_text(
            json.dumps(
                {
                    "url": daemon.url,
                    "pid": daemon.process.pid,
                    "profile": "test",
                    "model": "test",
                    "started": 0.0,
                }
            )
        )
        paths.ensure_private_dir(paths.config_dir())
        paths.token_file().write_text(daemon.token)
        await wait_for(pilot, lambda: app.daemon_status.ready, timeout=10, what="ready")
        assert app.link.url == daemon.url
        empty = app.screen.query_one(EmptyState)
        assert "Ready: test on the torch engine" in str(empty.render())


async def test_theme_toggle_is_remembered(store_path: Path) -> None:
    app = make_app(store_path=store_path, url="http://127.0.0.1:9")
    async with app.run_test() as pilot:
        assert app.theme == "textual-dark"
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"
    app = make_app(store_path=store_path, url="http://127.0.0.1:9")
    async with app.run_test():
        assert app.theme == "textual-light"


def test_help_lists_every_binding_of_every_screen() -> None:
    listed = {
        key.strip().lower() for _, keys in KEYS for entry, _ in keys for key in entry.split(",")
    }
    for owner in (LingApp, ChatScreen, ChainScreen, ChatMessage):
        for binding in owner.BINDINGS:
            first = binding.key.split(",")[0].replace("escape", "esc").replace("question_mark", "?")
            if first in ("up", "down"):  # moving between messages: said in the Shift+Tab line
                continue
            assert first in listed, f"{owner.__name__}: {first} is not in the help screen"


async def test_command_palette_offers_the_chat_actions(store_path: Path) -> None:
    app = make_app(store_path=store_path, url="http://127.0.0.1:9")
    async with app.run_test():
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in (
            "New conversation",
            "Regenerate",
            "Export to Markdown",
            "Agent chains",
            "Copy last code block",
            "Keys",
        ):
            assert title in titles


# What the TUI may use of ling_local: the client side only (the scripting API included).
TUI_MAY_IMPORT = (
    "client",
    "client_wire",
    "transport",
    "config",
    "errors",
    "paths",
    "logs",
    "discovery",
    "agents",
)


def test_the_tui_never_imports_an_engine() -> None:
    code = (
        "import sys, tui.app, tui.chains, tui.screens.chains\n"
        "bad = [m for m in sys.modules if m.startswith(('ling_local.engines', 'torch',"
        " 'transformers', 'ling_local.server', 'ling_local.scheduler'))]\n"
        "assert not bad, bad\n"
        "print(' '.join(m for m in sys.modules if m.startswith('ling_local.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True, text=True
    )
    loaded = out.stdout.split()
    assert "ling_local.agents.chain" in loaded
    outside = [m for m in loaded if m.split(".")[1] not in TUI_MAY_IMPORT]
    assert not outside, outside


def test_public_names_exist() -> None:
    import importlib

    for name in (
        "tui.app",
        "tui.chains",
        "tui.store",
        "tui.stats",
        "tui.daemon",
        "tui.export",
        "tui.messages",
    ):
        module = importlib.import_module(name)
        assert module.__all__ and all(hasattr(module, n) for n in module.__all__), name
