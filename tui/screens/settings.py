"""Ctrl+S: the conversation's system prompt and sampling. Empty fields mean the daemon's
defaults; a bad value is refused here, with its name, before it reaches the daemon."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, TextArea

from ling_local.errors import ConfigError
from tui.store import ChatSettings

__all__ = ["SettingsScreen"]


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]

    def __init__(self, title: str, settings: ChatSettings) -> None:
        super().__init__()
        self.conversation_title = title
        self.settings = settings

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(classes="dialog", id="settings"):
            yield Label(f"Settings · {self.conversation_title}", classes="dialog-title")
            yield Label("System prompt")
            yield TextArea(s.system_prompt, id="system-prompt", soft_wrap=True, compact=True)
            with Horizontal(classes="fields"):
                with Vertical():
                    yield Label("Temperature (0–2)")
                    yield Input(
                        "" if s.temperature is None else f"{s.temperature:g}",
                        placeholder="daemon default",
                        id="temperature",
                        compact=True,
                    )
                with Vertical():
                    yield Label("Max tokens")
                    yield Input(
                        "" if s.max_tokens is None else str(s.max_tokens),
                        placeholder="daemon default",
                        id="max-tokens",
                        type="integer",
                        compact=True,
                    )
            yield Checkbox(
                "Ignore end of sequence (always write max tokens)",
                s.ignore_eos,
                id="ignore-eos",
                compact=True,
            )
            yield Label("", id="settings-error")
            with Horizontal(classes="buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="save", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def _read(self) -> ChatSettings:
        temperature = self.query_one("#temperature", Input).value.strip()
        max_tokens = self.query_one("#max-tokens", Input).value.strip()
        try:
            t = float(temperature) if temperature else None
        except ValueError:
            raise ConfigError(f"temperature must be a number, got {temperature!r}") from None
        try:
            m = int(max_tokens) if max_tokens else None
        except ValueError:
            raise ConfigError(f"max_tokens must be a whole number, got {max_tokens!r}") from None
        return ChatSettings(
            self.query_one("#system-prompt", TextArea).text.strip(),
            t,
            m,
            self.query_one("#ignore-eos", Checkbox).value,
        )

    def action_save(self) -> None:
        try:
            settings = self._read()
        except ConfigError as err:
            self.query_one("#settings-error", Label).update(err.message)
            return
        self.dismiss(settings)

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
