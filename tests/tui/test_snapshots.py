"""SVG snapshots of the main screens (pytest-textual-snapshot). Nothing a model wrote is in
them: the conversations are fixed, stored ones, and the daemon only answers /health.

Update after an intended change with ``pytest tests/tui/test_snapshots.py --snapshot-update``
and look at the report before committing.
"""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from tests.support import DaemonProcess
from tests.tui.conftest import (
    DOWN_URL,
    seed_code_shapes,
    seed_conversations,
    seed_long_lines,
    wait_for,
)
from tui.app import LingApp, make_app


def app_for(daemon: DaemonProcess | None, store_path: Path) -> LingApp:
    url, token = (daemon.url, daemon.token) if daemon else (DOWN_URL, "x")
    return make_app(store_path=store_path, url=url, token=token, chain_file=None)


async def settle(pilot: Pilot, *, theme: str | None = None, press: tuple[str, ...] = ()) -> None:
    """Wait for the first health check, stop cursors blinking, then press keys."""
    app = pilot.app
    await wait_for(pilot, lambda: app.daemon_status.state != "checking", what="health check")
    if theme:
        app.theme = theme
    await pilot.press(*press)
    await pilot.pause()
    for widget in app.screen.query(TextArea):
        widget.cursor_blink = False
    for widget in app.screen.query(Input):
        widget.cursor_blink = False
    await pilot.pause()


def test_conversation(snap_compare, daemon: DaemonProcess, store_path: Path) -> None:
    seed_conversations(store_path)
    assert snap_compare(app_for(daemon, store_path), terminal_size=(100, 32), run_before=settle)


def test_conversation_light_80x24(snap_compare, daemon: DaemonProcess, store_path: Path) -> None:
    seed_conversations(store_path)

    async def light(pilot: Pilot) -> None:
        await settle(pilot, theme="textual-light")

    assert snap_compare(app_for(daemon, store_path), terminal_size=(80, 24), run_before=light)


def test_fenced_and_bare_code_replies(snap_compare, store_path: Path) -> None:
    """Both keep their lines and indentation, highlighted; the prose around them stays
    prose. Scrolled to the end: the bare-code reply."""
    seed_code_shapes(store_path)
    assert snap_compare(app_for(None, store_path), terminal_size=(100, 48), run_before=settle)


def test_bare_code_reply_80x24(snap_compare, store_path: Path) -> None:
    seed_code_shapes(store_path)
    assert snap_compare(app_for(None, store_path), terminal_size=(80, 24), run_before=settle)


def test_long_code_lines_wrap_with_a_marker(snap_compare, store_path: Path) -> None:
    """A code line wider than the chat continues on the next rows, each marked ↪."""
    seed_long_lines(store_path)
    assert snap_compare(app_for(None, store_path), terminal_size=(100, 32), run_before=settle)


def test_empty_state(snap_compare, daemon: DaemonProcess, store_path: Path) -> None:
    assert snap_compare(app_for(daemon, store_path), terminal_size=(100, 32), run_before=settle)


def test_daemon_down(snap_compare, store_path: Path) -> None:
    assert snap_compare(app_for(None, store_path), terminal_size=(100, 32), run_before=settle)


def test_help_screen(snap_compare, store_path: Path) -> None:
    async def help_open(pilot: Pilot) -> None:
        await settle(pilot, press=("f1",))

    assert snap_compare(app_for(None, store_path), terminal_size=(100, 40), run_before=help_open)


def test_settings_dialog(snap_compare, store_path: Path) -> None:
    seed_conversations(store_path)

    async def settings_open(pilot: Pilot) -> None:
        await settle(pilot, press=("ctrl+s",))

    assert snap_compare(
        app_for(None, store_path), terminal_size=(100, 32), run_before=settings_open
    )


def test_chain_screen(snap_compare, store_path: Path) -> None:
    async def chains_open(pilot: Pilot) -> None:
        await settle(pilot, press=("ctrl+g",))

    assert snap_compare(app_for(None, store_path), terminal_size=(100, 32), run_before=chains_open)
