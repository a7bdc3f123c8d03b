"""The conversation-level actions of the chat screen: settings, rename, delete, export and
copy. A mixin so the chat screen's module keeps to the reply flow."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tui.export import default_export_path, write_export
from tui.screens.dialogs import ConfirmScreen, TextPromptScreen
from tui.screens.settings import SettingsScreen
from tui.store import ChatSettings, Conversation, ConversationStore, StoredMessage
from tui.widgets.chat_message import code_blocks

__all__ = ["ConversationActions"]


class ConversationActions:
    """Mixed into `ChatScreen`; uses its store, current conversation and history."""

    if TYPE_CHECKING:
        from textual.app import App

        app: App
        store: ConversationStore
        conversation: Conversation | None
        history: list[StoredMessage]
        draft_settings: ChatSettings
        sub_title: str

        def notify(self, message: str, **kw: object) -> None: ...
        def open_conversation(self, conversation_id: int | None) -> None: ...
        def refresh_sidebar(self) -> None: ...
        def _cancel_reply(self) -> bool: ...

    def _target(self, conversation_id: int | None) -> Conversation | None:
        if conversation_id is not None:
            return self.store.get(conversation_id)
        return self.conversation

    def action_settings(self) -> None:
        conversation = self.conversation
        current = conversation.settings if conversation else self.draft_settings

        def saved(settings: ChatSettings | None) -> None:
            if settings is None:
                return
            if conversation is not None:
                self.store.update_settings(conversation.id, settings)
                conversation.settings = settings
            else:
                self.draft_settings = settings
            self.notify("Settings saved.")

        title = conversation.title if conversation else "new conversation"
        self.app.push_screen(SettingsScreen(title, current), saved)

    def action_rename(self, conversation_id: int | None = None) -> None:
        target = self._target(conversation_id)
        if target is None:
            self.notify("Send a message first; then the conversation can be renamed.")
            return

        def renamed(title: str | None) -> None:
            if title:
                self.store.rename(target.id, title)
                if self.conversation and self.conversation.id == target.id:
                    self.conversation.title = title
                    self.sub_title = title
                self.refresh_sidebar()

        self.app.push_screen(TextPromptScreen("Rename conversation", target.title), renamed)

    def action_delete(self, conversation_id: int | None = None) -> None:
        target = self._target(conversation_id)
        if target is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                if self.conversation and self.conversation.id == target.id:
                    self._cancel_reply()
                    self.conversation = None
                self.store.delete(target.id)
                if self.conversation is None:
                    self.open_conversation(None)
                self.refresh_sidebar()
                self.notify(f"Deleted “{target.title}”.")

        self.app.push_screen(ConfirmScreen(f"Delete “{target.title}”?"), answered)

    def action_export(self, conversation_id: int | None = None) -> None:
        target = self._target(conversation_id)
        if target is None:
            self.notify("Nothing to export yet.", severity="warning")
            return

        def chosen(path: str | None) -> None:
            if not path:
                return
            try:
                written = write_export(Path(path), target, self.store.messages(target.id))
            except OSError as err:
                self.notify(f"Export failed: {err}", severity="error")
                return
            self.notify(f"Exported to {written}")

        default = str(default_export_path(target))
        self.app.push_screen(TextPromptScreen("Export to Markdown file", default), chosen)

    # ----------------------------------------------------------------- copy (palette)
    def _last_reply(self) -> StoredMessage | None:
        return next((m for m in reversed(self.history) if m.role == "assistant"), None)

    def action_copy_reply(self) -> None:
        last = self._last_reply()
        if last is None:
            self.notify("No reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(last.content)
        self.notify(f"Copied the last reply ({len(last.content)} characters)")

    def action_copy_code(self) -> None:
        last = self._last_reply()
        blocks = code_blocks(last.content) if last else []
        if not blocks:
            self.notify("The last reply has no code block.", severity="warning")
            return
        self.app.copy_to_clipboard(blocks[-1])
        self.notify("Copied the last code block of the last reply")
