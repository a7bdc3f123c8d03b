"""`ling-local tui`: the Textual chat app. `make_app` is the one factory the CLI and the tests
both use, so what the tests drive is what a person runs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen

from tui.chains import BUILTIN_CHAINS, ChainRunner
from tui.daemon import DaemonLink, DaemonStatus
from tui.screens.chains import ChainScreen
from tui.screens.chat import ChatScreen
from tui.screens.help import HelpScreen
from tui.store import ConversationStore

__all__ = ["LingApp", "main", "make_app"]

log = logging.getLogger(__name__)

DARK, LIGHT = "textual-dark", "textual-light"


class LingApp(App[None]):
    CSS_PATH = "tui.tcss"
    TITLE = "ling-local"
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (100, "-wide")]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),
        # Where no text box has focus: in one, "?" is a character like any other.
        Binding("question_mark", "help", "Help", show=False),
        Binding("ctrl+g", "chains", "Chains"),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
    ]

    daemon_status: reactive[DaemonStatus] = reactive(DaemonStatus("checking"), init=False)
    """The last health check; the status bar and the empty chat watch it."""

    def __init__(
        self,
        store: ConversationStore,
        link: DaemonLink,
        *,
        chains: dict[str, ChainRunner] | None = None,
        chain_file: str | None = None,
        health_interval: float = 3.0,
    ) -> None:
        super().__init__()
        self.store = store
        self.link = link
        self.chains = dict(BUILTIN_CHAINS if chains is None else chains)
        self.chain_file = chain_file
        self.health_interval = health_interval

    def get_default_screen(self) -> Screen:
        return ChatScreen(self.store)

    def on_mount(self) -> None:
        self.theme = self.store.get_pref("theme", DARK) or DARK
        self.set_interval(self.health_interval, self.check_daemon)
        self.check_daemon()
        if self.chain_file:
            self.action_chains()

    async def on_unmount(self) -> None:
        await self.link.aclose()
        self.store.close()

    @work(exclusive=True, group="health")
    async def check_daemon(self) -> None:
        """Gentle polling: one cheap GET /health every few seconds, never on the token path."""
        status = await self.link.status()
        if status != self.daemon_status:
            log.info("daemon: %s", status.summary())
        self.daemon_status = status

    # ----------------------------------------------------------------- actions
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_chains(self) -> None:
        if not isinstance(self.screen, ChainScreen):
            self.push_screen(ChainScreen(self.chains, self.chain_file))

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.theme == DARK else DARK

    def watch_theme(self, theme: str) -> None:
        self.store.set_pref("theme", theme)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, ChatScreen):
            for title, summary, action in [
                ("New conversation", "Start an empty conversation", "new_conversation"),
                ("Regenerate", "Write the last reply again", "regenerate"),
                ("Edit last message", "Put the last message back in the input", "edit_last"),
                ("Copy last reply", "Copy the last reply to the clipboard", "copy_reply"),
                ("Copy last code block", "Copy the last reply's last code block", "copy_code"),
                ("Rename conversation", "Give the conversation a title", "rename"),
                ("Delete conversation", "Delete the conversation", "delete"),
                ("Conversation settings", "System prompt, temperature, max tokens", "settings"),
                ("Export to Markdown", "Write the conversation to a .md file", "export"),
            ]:
                yield SystemCommand(title, summary, getattr(screen, f"action_{action}"))
        yield SystemCommand("Agent chains", "Run a chain and watch its steps", self.action_chains)
        yield SystemCommand("Keys", "Every key binding", self.action_help)


def make_app(
    *,
    store_path: Path | str | None = None,
    url: str | None = None,
    token: str | None = None,
    chains: dict[str, ChainRunner] | None = None,
    chain_file: str | None = None,
    health_interval: float = 3.0,
) -> LingApp:
    """Build the app: the conversation store (default: under the state dir) and the daemon
    link (default: discovered, like every other client)."""
    return LingApp(
        ConversationStore(store_path),
        DaemonLink(url, token),
        chains=chains,
        chain_file=chain_file,
        health_interval=health_interval,
    )


def main(chain_file: str | None = None) -> None:
    from ling_local.logs import setup_logging

    setup_logging("tui", stderr=False)  # stderr belongs to the terminal UI
    make_app(chain_file=chain_file).run()
