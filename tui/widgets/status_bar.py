"""The line above the key footer: the daemon's state on the left, reply numbers on the right."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label

from tui.daemon import DaemonStatus

__all__ = ["StatusBar"]

_DOTS = {"ready": "●", "starting": "◐", "checking": "○"}


class StatusBar(Horizontal):
    def compose(self) -> ComposeResult:
        yield Label("", id="daemon-state")
        yield Label("", id="reply-numbers")

    def on_mount(self) -> None:
        self.watch(self.app, "daemon_status", self.show_status)

    def show_status(self, status: DaemonStatus) -> None:
        label = self.query_one("#daemon-state", Label)
        label.update(f"{_DOTS.get(status.state, '✖')} {status.summary()}")
        label.set_classes(f"-{status.state}")

    def show_numbers(self, text: str) -> None:
        self.query_one("#reply-numbers", Label).update(text)
